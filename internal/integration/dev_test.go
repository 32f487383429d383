package integration

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/workflows"
)

// devProcess is a running `oncerun-dev dev`.
type devProcess struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan error
}

func startDev(t *testing.T, bin, dataDir string, port int, env []string) *devProcess {
	t.Helper()
	p := &devProcess{out: &syncBuffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(bin, "dev", "--data-dir", dataDir, "--temporal-port", strconv.Itoa(port))
	p.cmd.Env = append(localEnv(t, p.cmd.Environ()), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	require.NoError(t, p.cmd.Start())
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if strings.Contains(p.out.String(), "oncerun dev is running") {
			return p
		}
		select {
		case err := <-p.exited:
			t.Fatalf("oncerun dev exited (%v):\n%s", err, p.out.String())
		default:
		}
	}
	t.Fatalf("oncerun dev did not start in a minute:\n%s", p.out.String())
	return nil
}

// interrupt sends Ctrl-C and waits for a clean exit.
func (p *devProcess) interrupt(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-p.exited:
		require.NoError(t, err, "oncerun dev exits 0 on Ctrl-C:\n%s", p.out.String())
	case <-time.After(time.Minute):
		t.Fatalf("oncerun dev did not stop on Ctrl-C:\n%s", p.out.String())
	}
}

// TestDevCommandKeepsARunAcrossRestart runs `oncerun-dev dev` as a user would:
// a run waits for approval, Ctrl-C stops the whole stack, a new `oncerun-dev dev`
// on the same data directory still has the run, and approving it completes it.
func TestDevCommandKeepsARunAcrossRestart(t *testing.T) {
	t.Parallel()
	bin := buildDev(t)
	db := pgtest.NewEmptyDB(t)
	dataDir := t.TempDir()
	port := devPort(t)
	queue := fmt.Sprintf("oncerun-dev-%d", queues.Add(1))
	apAddr := freeAddr(t)
	// The database is named by a keyword/value string with a password on
	// the first start and by a URL with one on the second: the banner shows
	// neither password.
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	keywords := fmt.Sprintf("host=%s port=%s user=%s password='kv s3cret' dbname=%s sslmode=disable",
		u.Hostname(), cmp.Or(u.Port(), "5432"), u.User.Username(), db.Name)
	u.User = url.UserPassword(u.User.Username(), "url-s3cret")
	withPassword := u.String()
	env := []string{"DATABASE_URL=" + keywords, "METRICS_ADDR=" + freeAddr(t), "TEMPORAL_TASK_QUEUE=" + queue,
		"APPROVALS_ADDR=" + apAddr, "APPROVALS_TOKENS_FILE="}
	runID := "r-" + queue
	ctx := context.Background()

	dev := startDev(t, bin, dataDir, port, env)
	assert.Contains(t, dev.out.String(), fmt.Sprintf("127.0.0.1:%d, namespace default (embedded", port))
	assert.NotContains(t, dev.out.String(), "s3cret")
	assert.Contains(t, dev.out.String(), "password=xxxxx dbname="+db.Name)
	assert.Contains(t, dev.out.String(), "approvals   http://"+apAddr+"/")
	assert.Contains(t, dev.out.String(), "(sandbox provider; ledger in "+filepath.Join(dataDir, "sandbox-payments"),
		"with no PAYMENTS_BASE_URL, dev runs a sandbox payment provider")
	assert.Regexp(t, `\n  export PAYMENTS_BASE_URL=http://127\.0\.0\.1:\d+ PAYMENTS_API_KEY=\S+   # the sandbox provider, for oncerun reconcile\n`,
		dev.out.String(), "another terminal is told how to reach the sandbox provider")
	assert.Contains(t, dev.out.String(), "(in-process server, mailbox in memory; SMTP_ADDR)")
	// The first start makes a development token and prints it, once.
	m := regexp.MustCompile(`token +(oncerun_\S+)`).FindStringSubmatch(dev.out.String())
	require.NotNil(t, m, "the banner shows the development token:\n%s", dev.out.String())
	token := m[1]
	saved, err := os.ReadFile(filepath.Join(dataDir, "dev-token"))
	require.NoError(t, err)
	assert.Equal(t, token, strings.TrimSpace(string(saved)))
	api := &approvals.Client{BaseURL: "http://" + apAddr, Token: token}
	_, code, err := api.Start(ctx, approvals.StartRequest{RunID: runID, Plan: refundPlan("25900")})
	require.NoError(t, err)
	assert.Equal(t, 201, code)
	rc := connectDev(t, port, queue)
	waitState(t, rc, runID, workflows.RunWaitingForApproval)
	dev.interrupt(t)

	env[0] = "DATABASE_URL=" + withPassword
	dev = startDev(t, bin, dataDir, port, env)
	assert.NotContains(t, dev.out.String(), token, "the token is printed on the first start only")
	assert.NotContains(t, dev.out.String(), "s3cret")
	assert.Contains(t, dev.out.String(), ":xxxxx@")
	assert.Contains(t, dev.out.String(), "the development token is in "+filepath.Join(dataDir, "dev-token"))
	rc = connectDev(t, port, queue)
	waitState(t, rc, runID, workflows.RunWaitingForApproval)
	hash, err := api.StepHash(ctx, runID, 3)
	require.NoError(t, err, "the token made on the first start still works after the restart")
	_, code, err = api.Decide(ctx, runID, 3, workflows.DecisionApprove, approvals.DecideRequest{ArgsHash: hash})
	require.NoError(t, err)
	assert.Equal(t, 202, code)
	final := waitState(t, rc, runID, workflows.RunCompleted)
	assert.Equal(t, workflows.StepDone, final.Steps[2].State)
	assert.Equal(t, "dev", final.Steps[2].Approval.Approver)
	dev.interrupt(t)
}

// connectDev is a runs client on the task queue queue of the dev stack whose
// embedded Temporal listens on port.
func connectDev(t *testing.T, port int, queue string) *runs.Client {
	t.Helper()
	tc, err := client.Dial(client.Options{HostPort: fmt.Sprintf("127.0.0.1:%d", port), Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	require.NoError(t, err)
	t.Cleanup(tc.Close)
	return &runs.Client{Temporal: tc, TaskQueue: queue}
}

func waitState(t *testing.T, rc *runs.Client, runID string, want workflows.RunState) workflows.Status {
	t.Helper()
	var last workflows.Status
	var lastErr error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		last, lastErr = rc.Status(context.Background(), "acme", runID)
		if lastErr == nil && last.State == want {
			return last
		}
	}
	t.Fatalf("run %s never became %s: %+v (%v)", runID, want, last, lastErr)
	return last
}

// TestDevWithTemporalAddressSaysItEmbedsNone: `oncerun-dev dev` in a shell
// where TEMPORAL_ADDRESS is exported uses that server, says so before
// anything else, and says the embedded server's flags do not apply.
func TestDevWithTemporalAddressSaysItEmbedsNone(t *testing.T) {
	t.Parallel()
	bin := buildDev(t)
	db := pgtest.NewEmptyDB(t)
	dataDir := t.TempDir()
	queue := fmt.Sprintf("oncerun-dev-outside-%d", queues.Add(1))
	p := startDev(t, bin, dataDir, devPort(t), []string{"DATABASE_URL=" + db.URL, "TEMPORAL_ADDRESS=" + frontend,
		"TEMPORAL_NAMESPACE=" + namespace, "TEMPORAL_TASK_QUEUE=" + queue, "METRICS_ADDR=" + freeAddr(t),
		"APPROVALS_ADDR=" + freeAddr(t), "APPROVALS_TOKENS_FILE="})
	out := p.out.String()
	first, _, _ := strings.Cut(out, "\n")
	assert.Contains(t, first, "using the Temporal server at "+frontend+", namespace "+namespace+", plain text (TEMPORAL_ADDRESS)")
	assert.Contains(t, first, "none is embedded, so --temporal-port and --data-dir do not apply to Temporal")
	assert.NoFileExists(t, filepath.Join(dataDir, "temporal.sqlite"), "no server was embedded")
	p.interrupt(t)
}

// TestDevEmbeddingIgnoresTheUsersTemporalCredentials: an API key exported
// for another Temporal does not reach the embedded server, which is plain
// and local, and is not printed.
func TestDevEmbeddingIgnoresTheUsersTemporalCredentials(t *testing.T) {
	t.Parallel()
	const key = "oncerun-key-for-another-temporal"
	p := startDev(t, buildDev(t), t.TempDir(), devPort(t), []string{"DATABASE_URL=" + pgtest.NewEmptyDB(t).URL,
		"TEMPORAL_ADDRESS=", "TEMPORAL_API_KEY=" + key, "TEMPORAL_TASK_QUEUE=" + fmt.Sprintf("oncerun-dev-key-%d", queues.Add(1)),
		"METRICS_ADDR=" + freeAddr(t), "APPROVALS_ADDR=" + freeAddr(t), "APPROVALS_TOKENS_FILE="})
	assert.Contains(t, p.out.String(), "(embedded; state in")
	assert.NotContains(t, p.out.String(), key)
	p.interrupt(t)
}

// TestDevBannerNeverPrintsThePaymentsPassword: a password in
// PAYMENTS_BASE_URL is shown redacted in the dev banner.
func TestDevBannerNeverPrintsThePaymentsPassword(t *testing.T) {
	t.Parallel()
	p := startDev(t, buildDev(t), t.TempDir(), devPort(t), []string{"DATABASE_URL=" + pgtest.NewEmptyDB(t).URL,
		"PAYMENTS_BASE_URL=http://shop:hunter2@127.0.0.1:9", "PAYMENTS_API_KEY=k",
		"TEMPORAL_TASK_QUEUE=" + fmt.Sprintf("oncerun-dev-pay-%d", queues.Add(1)),
		"METRICS_ADDR=" + freeAddr(t), "APPROVALS_ADDR=" + freeAddr(t), "APPROVALS_TOKENS_FILE="})
	assert.Contains(t, p.out.String(), "payments    http://shop:xxxxx@127.0.0.1:9 (PAYMENTS_BASE_URL)")
	assert.NotContains(t, p.out.String(), "hunter2")
	p.interrupt(t)
}
