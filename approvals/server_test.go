package approvals

import (
	"context"
	"net"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/httpserver/httpservertest"
)

// TestListenAndServeRefusesLargeHeaders: the approvals server has the
// limits of every server of oncerun.
func TestListenAndServeRefusesLargeHeaders(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- ListenAndServe(ctx, "127.0.0.1:0", http.NotFoundHandler(), nil, func(a net.Addr) { addr <- a.String() })
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	httpservertest.RefusesLargeHeaders(t, http.MethodGet, "http://"+<-addr+"/")
}
