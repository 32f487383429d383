package worker

import (
	"errors"
	"net"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/httpserver/httpservertest"
)

// TestMetricsServerRefusesLargeHeaders: the server of /metrics and
// /healthz has the limits of every server of oncerun.
func TestMetricsServerRefusesLargeHeaders(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := httpServer(Handler(nil, prometheus.NewRegistry()), zap.NewNop())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		require.True(t, errors.Is(<-done, http.ErrServerClosed))
	})
	httpservertest.RefusesLargeHeaders(t, http.MethodGet, "http://"+ln.Addr().String()+"/metrics")
}
