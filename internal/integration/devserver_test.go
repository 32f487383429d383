package integration

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/internal/devserver"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/workflows"
)

// TestDevServerKeepsRunsAcrossRestart stops the embedded server while a run
// waits for approval and starts it again on the same data directory: the
// run is still there, and approving it completes it.
func TestDevServerKeepsRunsAcrossRestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	dir := t.TempDir()
	ctx := context.Background()
	run := e.id("r-dev")
	port := devPort(t) // the same port on both starts, as 7233 would be

	start := func() (*devserver.Server, client.Client) {
		srv, err := devserver.Start(devserver.Config{DataDir: dir, Port: port})
		require.NoError(t, err)
		tc, err := client.Dial(client.Options{HostPort: srv.Address(), Namespace: srv.Namespace(), Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
		require.NoError(t, err)
		e.tc = tc
		e.runs = &runs.Client{Temporal: tc, TaskQueue: e.queue, Pool: e.pool}
		return srv, tc
	}

	srv, tc := start()
	// WAL mode is recorded in the database file's header: bytes 18 and 19
	// (the write and read format versions) are 2 in WAL mode, 1 otherwise.
	header := make([]byte, 20)
	f, err := os.Open(filepath.Join(dir, "temporal.sqlite"))
	require.NoError(t, err)
	_, err = io.ReadFull(f, header)
	f.Close()
	require.NoError(t, err)
	assert.Equal(t, []byte{2, 2}, header[18:20], "the Temporal server's SQLite database is in WAL mode")

	w := e.startWorker("w1", worker.Options{})
	_, err = e.runs.Start(ctx, workflows.RunInput{Tenant: "acme", RunID: run, Plan: refundPlan("25900")})
	require.NoError(t, err)
	e.waitFor("acme", run, "the credit's approval", func(s workflows.Status) bool {
		return s.State == workflows.RunWaitingForApproval
	})
	w.Stop()
	tc.Close()
	require.NoError(t, srv.Stop())

	srv, tc = start()
	t.Cleanup(func() { tc.Close(); _ = srv.Stop() })
	e.startWorker("w2", worker.Options{})
	e.waitFor("acme", run, "an answer after the restart", func(s workflows.Status) bool {
		return s.State == workflows.RunWaitingForApproval
	})
	e.decide(run, 3, workflows.DecisionApprove, "dana", "")
	final := e.result("acme", run)
	assert.Equal(t, workflows.RunCompleted, final.State)
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme'"))
}

func TestDevServerRefusesATakenPort(t *testing.T) {
	t.Parallel()
	_, err := devserver.Start(devserver.Config{DataDir: t.TempDir(), Port: portOf(t, frontend)})
	require.ErrorIs(t, err, devserver.ErrPortInUse)
	assert.ErrorContains(t, err, "TEMPORAL_ADDRESS")
}
