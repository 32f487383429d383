package desk_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/httpserver/httpservertest"
	"github.com/oncerun/oncerun/internal/sandbox/desk"
)

// TestServeRefusesLargeHeaders: the desk has the limits of every server of
// oncerun.
func TestServeRefusesLargeHeaders(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r, err := desk.Serve(ctx, "127.0.0.1:0", desk.Config{DataDir: t.TempDir()})
	require.NoError(t, err)
	httpservertest.RefusesLargeHeaders(t, http.MethodPost, r.URL())
}
