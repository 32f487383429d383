package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/config"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/devserver"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/temporalconn"
	"github.com/oncerun/oncerun/internal/testcerts"
	"github.com/oncerun/oncerun/workflows"
)

// The tests of this file run oncerun's production command against Temporal
// servers shaped as production's: one that takes only clients with a
// certificate of its CA (a self-hosted cluster with mutual TLS), and one
// that takes only calls carrying `Authorization: Bearer <key>` over TLS
// (Temporal Cloud's API keys). Each is Temporal's own server at the pinned
// version, started in this process as the dev server is, with the public
// frontend secured and an internal frontend for the server's own workers.
// The processes are configured only through the temporal CLI's variables.

// securedTemporal starts a Temporal server of the test's own with cfg's
// security and returns its frontend's address.
func securedTemporal(t *testing.T, cfg devserver.Config) string {
	t.Helper()
	cfg.DataDir, cfg.Port = t.TempDir(), devPort(t)
	srv, err := devserver.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	return srv.Address()
}

// apiKeys maps a bearer token to claims: an admin for the one key it
// knows, an error (so the call is refused) for any other.
type apiKeys struct{ key string }

func (m apiKeys) GetClaims(ai *authorization.AuthInfo) (*authorization.Claims, error) {
	if ai.AuthToken != "Bearer "+m.key {
		return nil, errors.New("unknown API key")
	}
	return &authorization.Claims{Subject: "oncerun", System: authorization.RoleAdmin}, nil
}

// adminsOnly allows the calls of admins and refuses every other, those
// with no credentials included.
type adminsOnly struct{}

func (adminsOnly) Authorize(_ context.Context, c *authorization.Claims, _ *authorization.CallTarget) (authorization.Result, error) {
	if c != nil && c.System&authorization.RoleAdmin != 0 {
		return authorization.Result{Decision: authorization.DecisionAllow}, nil
	}
	return authorization.Result{Decision: authorization.DecisionDeny}, nil
}

// temporalEnv is this process's environment with none of the user's
// Temporal settings (localEnv), plus vars.
func temporalEnv(t *testing.T, vars ...string) []string {
	t.Helper()
	var env []string
	for _, kv := range localEnv(t, os.Environ()) {
		if !strings.HasPrefix(kv, "ONCERUN_") {
			env = append(env, kv)
		}
	}
	return append(env, vars...)
}

// localEnv is environ for a process of a test: no TEMPORAL_ variable and
// no temporal.toml of the machine's user reach it; the test adds the
// TEMPORAL_ variables the process needs.
func localEnv(t testing.TB, environ []string) []string {
	t.Helper()
	return temporalconn.LocalEnv(environ, t.TempDir())
}

// refusedAtStart runs `oncerun worker` with env and checks that it exits
// non-zero with a message containing each of want, and that it touched
// nothing: its database is still empty.
func refusedAtStart(t *testing.T, bin string, env []string, want ...string) {
	t.Helper()
	db := pgtest.NewEmptyDB(t)
	// A worker that waited instead would be stopped here, and fail below.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "worker")
	cmd.Env = append(env, "DATABASE_URL="+db.URL, "METRICS_ADDR="+freeAddr(t), "TEMPORAL_CONNECT_WAIT=10m")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the worker refuses to start:\n%s", out)
	for _, w := range want {
		assert.Contains(t, string(out), w)
	}
	assert.NotContains(t, string(out), "not reachable yet", "a server that refuses us is not waited for")
	assert.Zero(t, count(t, db.URL, `SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'`),
		"nothing was started: the database was not even migrated")
}

// runWithApproval runs `oncerun worker` and `oncerun serve` with env, starts
// examples/refund.json with the CLI, approves its credit through the
// service's API and checks with the CLI that the run completed with one
// credit.
func runWithApproval(t *testing.T, bin string, env []string) {
	t.Helper()
	db := pgtest.NewEmptyDB(t)
	queue := fmt.Sprintf("oncerun-secure-%d", queues.Add(1))
	env = append(env, "DATABASE_URL="+db.URL, "TEMPORAL_TASK_QUEUE="+queue)
	tokensFile := filepath.Join(t.TempDir(), "tokens.json")
	token, entry, err := approvals.NewToken(approvals.Identity{Name: "dana", Tenant: "acme", Role: approvals.RoleOperator})
	require.NoError(t, err)
	require.NoError(t, approvals.AppendToken(tokensFile, entry))
	apAddr := freeAddr(t)
	for _, args := range [][]string{
		{"worker", "METRICS_ADDR=" + freeAddr(t)},
		{"serve", "APPROVALS_ADDR=" + apAddr, "APPROVALS_TOKENS_FILE=" + tokensFile},
	} {
		logs := &syncBuffer{}
		cmd := exec.Command(bin, args[0])
		cmd.Env = append(env, args[1:]...)
		cmd.Stdout, cmd.Stderr = logs, logs
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("oncerun %s:\n%s", args[0], logs.String())
			}
		})
	}
	cli := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out, err := cmd.Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			out = append(out, ee.Stderr...)
		}
		require.NoError(t, err, "oncerun %s:\n%s", strings.Join(args, " "), out)
		return out
	}
	cli("start", "--tenant", "acme", "--run-id", "r1", "--plan", "../../examples/refund.json", "--json")

	api := &approvals.Client{BaseURL: "http://" + apAddr, Token: token}
	var pending []approvals.Item
	require.Eventually(t, func() bool {
		pending, err = api.Approvals(context.Background(), approvals.ViewPending)
		return err == nil && len(pending) == 1
	}, 2*time.Minute, 200*time.Millisecond, "the credit waits for approval in the service's list")
	_, _, err = api.Decide(context.Background(), "r1", pending[0].Step, workflows.DecisionApprove,
		approvals.DecideRequest{ArgsHash: pending[0].ArgsHash})
	require.NoError(t, err)

	var st workflows.Status
	require.Eventually(t, func() bool {
		require.NoError(t, json.Unmarshal(cli("status", "--tenant", "acme", "--run-id", "r1", "--json"), &st))
		return st.State == workflows.RunCompleted
	}, 2*time.Minute, 300*time.Millisecond, "the run completes")
	assert.Equal(t, 1, count(t, db.URL, `SELECT count(*) FROM credits WHERE tenant = 'acme'`))
}

// count runs a count query on the database at url.
func count(t *testing.T, url, query string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var n int
	require.NoError(t, conn.QueryRow(context.Background(), query).Scan(&n))
	return n
}

// TestMutualTLSTemporal: against a frontend that takes only clients with a
// certificate its CA signed, the worker, the approvals service and the CLI
// complete a run with an approval given TEMPORAL_TLS_* alone; without a
// client certificate, or with one of another CA, the worker fails at once,
// saying what failed, and starts nothing.
func TestMutualTLSTemporal(t *testing.T) {
	t.Parallel()
	bin := buildOncerun(t)
	ca := testcerts.NewCA(t, "cluster CA")
	server := ca.Server(t, "127.0.0.1", "temporal.internal")
	addr := securedTemporal(t, devserver.Config{FrontendTLS: &config.ServerTLS{
		CertFile: server.CertPath, KeyFile: server.KeyPath, ClientCAFiles: []string{ca.CertPath}, RequireClientAuth: true,
	}})
	client := ca.Client(t, "oncerun-worker")
	trusted := []string{"TEMPORAL_ADDRESS=" + addr, "TEMPORAL_TLS_SERVER_CA_CERT_PATH=" + ca.CertPath,
		"TEMPORAL_TLS_SERVER_NAME=temporal.internal"}

	runWithApproval(t, bin, temporalEnv(t, append(trusted,
		"TEMPORAL_TLS_CLIENT_CERT_PATH="+client.CertPath, "TEMPORAL_TLS_CLIENT_KEY_PATH="+client.KeyPath)...))

	refusedAtStart(t, bin, temporalEnv(t, trusted...),
		"TLS handshake with "+addr+": remote error: tls: certificate required", "check TEMPORAL_TLS_*")
	other := testcerts.NewCA(t, "another CA").Client(t, "oncerun-worker")
	refusedAtStart(t, bin, temporalEnv(t, append(trusted,
		"TEMPORAL_TLS_CLIENT_CERT_PATH="+other.CertPath, "TEMPORAL_TLS_CLIENT_KEY_PATH="+other.KeyPath)...),
		"TLS handshake with "+addr+": remote error: tls:", "check TEMPORAL_TLS_*")
	// A client that does not trust the server's CA refuses it too.
	refusedAtStart(t, bin, temporalEnv(t, "TEMPORAL_ADDRESS="+addr, "TEMPORAL_TLS=true",
		"TEMPORAL_TLS_CLIENT_CERT_PATH="+client.CertPath, "TEMPORAL_TLS_CLIENT_KEY_PATH="+client.KeyPath),
		"TLS handshake with "+addr+": tls: failed to verify certificate: x509: certificate signed by unknown authority")
}

// TestAPIKeyTemporal: against a frontend that takes only calls with the
// right bearer token over TLS, as Temporal Cloud takes API keys, the right
// key works for the worker, the service and the CLI; a wrong key, or none,
// fails at once and names TEMPORAL_API_KEY, and the key is never printed.
func TestAPIKeyTemporal(t *testing.T) {
	t.Parallel()
	bin := buildOncerun(t)
	ca := testcerts.NewCA(t, "cloud CA")
	server := ca.Server(t, "127.0.0.1")
	const key = "oncerun-test-api-key-7f3a"
	addr := securedTemporal(t, devserver.Config{
		FrontendTLS: &config.ServerTLS{CertFile: server.CertPath, KeyFile: server.KeyPath},
		ClaimMapper: apiKeys{key: key}, Authorizer: adminsOnly{},
	})
	base := []string{"TEMPORAL_ADDRESS=" + addr, "TEMPORAL_TLS_SERVER_CA_CERT_PATH=" + ca.CertPath}

	runWithApproval(t, bin, temporalEnv(t, append(base, "TEMPORAL_API_KEY="+key)...))

	const wrong = "oncerun-wrong-key-0000"
	refusedAtStart(t, bin, temporalEnv(t, append(base, "TEMPORAL_API_KEY="+wrong)...),
		"permission denied at "+addr, "check TEMPORAL_API_KEY")
	refusedAtStart(t, bin, temporalEnv(t, base...),
		"permission denied at "+addr, "check TEMPORAL_API_KEY or TEMPORAL_TLS_CLIENT_CERT_PATH (none is set)")

	cmd := exec.Command(bin, "status", "--tenant", "acme", "--run-id", "r1")
	cmd.Env = temporalEnv(t, append(base, "TEMPORAL_API_KEY="+wrong)...)
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "check TEMPORAL_API_KEY", "the CLI says what to check too")
	assert.NotContains(t, string(out), wrong, "the key is never printed")
}
