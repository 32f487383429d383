package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/workflows"
)

// syncBuffer is a buffer the process's output copier and the test may use
// at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// TestWorkerProcess runs the worker binary as an operator would: against an
// empty database it migrates, serves /healthz and /metrics, completes a run,
// and exits 0 on SIGTERM.
func TestWorkerProcess(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "worker")
	build := exec.Command("go", "build", "-o", bin, "../../worker")
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))

	db := pgtest.NewEmptyDB(t)
	httpAddr := freeAddr(t)
	queue := fmt.Sprintf("oncerun-process-%d", queues.Add(1))
	runID := "r-" + queue
	logs := &syncBuffer{}
	cmd := exec.Command(bin)
	cmd.Env = append(cmd.Environ(),
		"TEMPORAL_ADDRESS="+frontend,
		"TEMPORAL_NAMESPACE="+namespace,
		"TEMPORAL_TASK_QUEUE="+queue,
		"DATABASE_URL="+db.URL,
		"METRICS_ADDR="+httpAddr,
	)
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	healthy := false
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && !healthy; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + httpAddr + "/healthz")
		if err == nil {
			healthy = resp.StatusCode == http.StatusOK
			resp.Body.Close()
		}
	}
	require.True(t, healthy, "worker never became healthy:\n%s", logs.String())

	_, err = temporalClient.ScheduleClient().GetHandle(context.Background(), workflows.WatchdogScheduleID).Describe(context.Background())
	require.NoError(t, err, "the worker created the expiry watchdog's schedule")

	pool, err := pgxpool.New(context.Background(), db.URL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	rc := &runs.Client{Temporal: temporalClient, TaskQueue: queue, Pool: pool}
	_, err = rc.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: runID, Plan: refundPlan("5000")})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var st workflows.Status
	require.NoError(t, temporalClient.GetWorkflow(ctx, workflows.WorkflowID("acme", runID), "").Get(ctx, &st))
	assert.Equal(t, workflows.RunCompleted, st.State)

	resp, err := http.Get("http://" + httpAddr + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Contains(t, string(body), `oncerun_tool_calls_total{outcome="executed",tool="issue_credit"} 1`)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, "the worker exits 0 on SIGTERM:\n%s", logs.String())
	case <-time.After(time.Minute):
		t.Fatalf("the worker did not stop on SIGTERM:\n%s", logs.String())
	}
	assert.Contains(t, logs.String(), "worker stopping")
	assert.Contains(t, logs.String(), "schema migrated")
}

func portOf(t *testing.T, hostPort string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(hostPort)
	require.NoError(t, err)
	n, err := strconv.Atoi(p)
	require.NoError(t, err)
	return n
}
