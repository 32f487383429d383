package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/devserver"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/watchdog"
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

func freeAddr(t testing.TB) string {
	t.Helper()
	addr, err := devserver.FreeAddr("127.0.0.1")
	require.NoError(t, err)
	return addr
}

// TestWorkerProcess runs the worker binary as an operator would: against an
// empty database it migrates, serves /healthz and /metrics and the approvals
// service, completes a run started through the API, and exits 0 on SIGTERM.
func TestWorkerProcess(t *testing.T) {
	t.Parallel()
	bin := buildOncerun(t)

	db := pgtest.NewEmptyDB(t)
	httpAddr := freeAddr(t)
	queue := fmt.Sprintf("oncerun-process-%d", queues.Add(1))
	runID := "r-" + queue
	logs := &syncBuffer{}
	tokensFile := filepath.Join(t.TempDir(), "tokens.json")
	opsToken, entry, err := approvals.NewToken(approvals.Identity{Name: "ops", Tenant: "acme", Role: approvals.RoleOperator})
	require.NoError(t, err)
	require.NoError(t, approvals.AppendToken(tokensFile, entry))
	apAddr := freeAddr(t)
	cmd := exec.Command(bin, "worker")
	cmd.Env = append(localEnv(t, cmd.Environ()),
		"TEMPORAL_ADDRESS="+frontend,
		"TEMPORAL_NAMESPACE="+namespace,
		"TEMPORAL_TASK_QUEUE="+queue,
		"DATABASE_URL="+db.URL,
		"METRICS_ADDR="+httpAddr,
		"APPROVALS_ADDR="+apAddr,
		"APPROVALS_TOKENS_FILE="+tokensFile,
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

	_, err = temporalClient.ScheduleClient().GetHandle(context.Background(), watchdog.DefaultScheduleID).Describe(context.Background())
	require.NoError(t, err, "the worker created the expiry watchdog's schedule")

	api := &approvals.Client{BaseURL: "http://" + apAddr, Token: opsToken}
	var code int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, code, err = api.Start(context.Background(), approvals.StartRequest{RunID: runID, Plan: refundPlan("5000")})
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	require.NoError(t, err, "the worker serves the approvals API:\n%s", logs.String())
	assert.Equal(t, http.StatusCreated, code)
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
	got, err := api.Status(context.Background(), runID)
	require.NoError(t, err)
	assert.Equal(t, workflows.RunCompleted, got.State)

	// A token added to the file while the worker runs is honoured without a
	// restart.
	viewer, entry, err := approvals.NewToken(approvals.Identity{Name: "vic", Tenant: "acme", Role: approvals.RoleViewer})
	require.NoError(t, err)
	require.NoError(t, approvals.AppendToken(tokensFile, entry))
	require.Eventually(t, func() bool {
		_, err := (&approvals.Client{BaseURL: api.BaseURL, Token: viewer}).Approvals(context.Background(), approvals.ViewDecided)
		return err == nil
	}, 10*time.Second, 200*time.Millisecond, "the new token works once the file is read again")

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

// devPort returns a frontend port for an embedded dev server whose every
// service port is free.
func devPort(t *testing.T) int {
	t.Helper()
	port, err := devserver.FreePort("127.0.0.1")
	require.NoError(t, err)
	return port
}

// binary is a command of this module, built once for the package's tests.
type binary struct {
	pkg, name string
	once      sync.Once
	path      string
	err       error
}

// build builds b once and returns its path.
func (b *binary) build(t testing.TB) string {
	t.Helper()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "oncerun-it-")
		if err != nil {
			b.err = err
			return
		}
		binMu.Lock()
		binDirs = append(binDirs, dir)
		binMu.Unlock()
		b.path = filepath.Join(dir, b.name)
		if out, err := exec.Command("go", "build", "-o", b.path, b.pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("build %s: %w\n%s", b.name, err, out)
		}
	})
	require.NoError(t, b.err)
	return b.path
}

var (
	oncerunBin = &binary{pkg: "../../cmd/oncerun", name: "oncerun"}
	devBin     = &binary{pkg: "../../cmd/oncerun-dev", name: "oncerun-dev"}
	binMu      sync.Mutex
)

// buildOncerun builds the production command, cmd/oncerun.
func buildOncerun(t testing.TB) string { return oncerunBin.build(t) }

// buildDev builds the development command, cmd/oncerun-dev: every
// production command and dev, demo, chaos, temporal-server and the
// sandboxes.
func buildDev(t *testing.T) string { return devBin.build(t) }

// binDirs are removed when the package's tests end.
var binDirs []string

// TestServeCommand runs `oncerun serve` as an operator would: without a
// tokens file it refuses to start, naming the variable; with one it serves
// the API against Temporal and PostgreSQL, and stops on SIGTERM.
func TestServeCommand(t *testing.T) {
	t.Parallel()
	bin := buildOncerun(t)
	db := pgtest.NewEmptyDB(t)
	base := []string{"TEMPORAL_ADDRESS=" + frontend, "TEMPORAL_NAMESPACE=" + namespace, "DATABASE_URL=" + db.URL}

	cmd := exec.Command(bin, "serve")
	cmd.Env = append(localEnv(t, cmd.Environ()), append(base, "APPROVALS_TOKENS_FILE=")...)
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "APPROVALS_TOKENS_FILE")

	tokensFile := filepath.Join(t.TempDir(), "tokens.json")
	cmd = exec.Command(bin, "token", "new", "--name", "dana", "--tenant", "acme", "--role", "approver", "--add-to", tokensFile)
	out, err = cmd.Output()
	require.NoError(t, err)
	token := strings.SplitN(string(out), "\n", 2)[0]

	addr := freeAddr(t)
	logs := &syncBuffer{}
	cmd = exec.Command(bin, "serve")
	cmd.Env = append(localEnv(t, cmd.Environ()), append(base, "APPROVALS_TOKENS_FILE="+tokensFile, "APPROVALS_ADDR="+addr)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	api := &approvals.Client{BaseURL: "http://" + addr, Token: token}
	require.Eventually(t, func() bool {
		items, err := api.Approvals(context.Background(), approvals.ViewPending)
		return err == nil && len(items) == 0
	}, 30*time.Second, 100*time.Millisecond, "serve answers the API:\n%s", logs.String())
	_, err = api.Status(context.Background(), "nope")
	var apiErr *approvals.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusNotFound, apiErr.Status, "a run's status comes from Temporal")
	_, err = (&approvals.Client{BaseURL: api.BaseURL, Token: "oncerun_wrong"}).Approvals(context.Background(), approvals.ViewPending)
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusUnauthorized, apiErr.Status)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, "serve exits 0 on SIGTERM:\n%s", logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not stop on SIGTERM:\n%s", logs.String())
	}
}
