package watchdog_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/log"

	"github.com/oncerun/oncerun/internal/metrics"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/internal/watchdog"
	"github.com/oncerun/oncerun/tools"
)

type fixture struct {
	pool    *pgxpool.Pool
	acts    *watchdog.Activities
	metrics *metrics.Metrics
}

// setup returns the watchdog's activities on a database of the test's own,
// with the built-in tools' windows. Runs is left for the test to set.
func setup(t testing.TB) fixture {
	t.Helper()
	pool := pgtest.NewPool(t, 8)
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, shop.Tools(shop.Config{})...)
	require.NoError(t, err)
	m := metrics.New(prometheus.NewRegistry())
	return fixture{pool: pool, metrics: m, acts: &watchdog.Activities{Pool: pool, Tools: reg, Metrics: m}}
}

// fakeRuns answers for runs by id: open, closed, or an error.
type fakeRuns map[string]string

func (f fakeRuns) RunState(_ context.Context, _, runID string) (bool, string, error) {
	switch f[runID] {
	case "open":
		return true, "running", nil
	case "error":
		return false, "", errors.New("temporal unavailable")
	}
	return false, "completed", nil
}

// testLogger logs through t, so a pass's log shows only when its test
// fails or runs with -v, and nothing is logged once the test has ended.
func testLogger(t *testing.T) log.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.done = true
	})
	return log.NewStructuredLogger(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})))
}

type testWriter struct {
	t    *testing.T
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}
