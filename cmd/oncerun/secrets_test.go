package main

import (
	"bufio"
	"context"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"

	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/settings"
)

// walk is one command line run in a world, and a part of what it must
// print: proof that it got where the case is about.
type walk struct {
	name string
	w    *world
	bin  string
	args []string
	want string
	// until, when set, is a line after which the command, still running,
	// is stopped with SIGINT.
	until string
}

// TestNoCommandPrintsASecret runs the production command (and, but with
// -short, the development command) with a distinct secret in every
// variable that holds one: the --help of every command, every command
// with bad input or with what it reaches refusing connections, the worker
// and serve against a Temporal that is not there and against a database
// that is not there, and dev's banner. Nothing any of them prints holds a
// secret, in any form.
func TestNoCommandPrintsASecret(t *testing.T) {
	t.Parallel()
	lean, dev := build(t)
	base := newWorld(t)
	api := newWorld(t)
	api.throughAPI()
	required := newWorld(t)
	required.env["ONCERUN_MCP_CONFIG"] = required.mcpConfig(t, false)
	badTLS := newWorld(t)
	badTLS.plant("TEMPORAL_TLS_CLIENT_KEY_DATA", "-----BEGIN PRIVATE KEY-----\nbad-tls-key-s3cret\n-----END PRIVATE KEY-----\n",
		"bad-tls-key-s3cret", "")
	reachable := newWorld(t)
	for _, name := range []string{"TEMPORAL_TLS_CLIENT_KEY_DATA", "TEMPORAL_TLS_CLIENT_CERT_DATA", "TEMPORAL_TLS_SERVER_CA_CERT_DATA"} {
		delete(reachable.env, name)
	}
	reachable.env["TEMPORAL_ADDRESS"], reachable.env["TEMPORAL_TLS"] = frontend(t), "false"

	walks := helpWalks(t, base, lean)
	for _, c := range []walk{
		{name: "worker, Temporal not there", w: base, args: []string{"worker"}, want: "connect to Temporal"},
		{name: "worker, the database not there", w: reachable, args: []string{"worker"}, want: "connect to PostgreSQL"},
		{name: "worker, an MCP server down", w: required, args: []string{"worker"}, want: "connect to MCP server desk"},
		{name: "worker, a TLS key that does not parse", w: badTLS, args: []string{"worker"}, want: "TEMPORAL_TLS_CLIENT_KEY_DATA"},
		{name: "worker, an unknown flag", w: base, args: []string{"worker", "--bogus"}, want: "unknown flag"},
		{name: "serve, Temporal not there", w: base, args: []string{"serve"}, want: "connect to Temporal"},
		{name: "serve, the database not there", w: reachable, args: []string{"serve"}, want: "connect to PostgreSQL"},
		{name: "migrate", w: base, args: []string{"migrate"}, want: "Error"},
		{name: "migrate --database-url", w: base, args: []string{"migrate", "--database-url", "postgres://oncerun:flag-pw-s3cret@" + base.closed + "/x?connect_timeout=1"}, want: "Error"},
		{name: "start", w: base, args: []string{"start", "--tenant", "acme", "--run-id", "r1", "--goal", "refund order 1001"}, want: "Temporal"},
		{name: "start, no such plan", w: base, args: []string{"start", "--tenant", "acme", "--run-id", "r1", "--plan", "nope.json"}, want: "nope.json"},
		{name: "start, no run id", w: base, args: []string{"start", "--tenant", "acme"}, want: "Error"},
		{name: "status", w: base, args: []string{"status", "--tenant", "acme", "--run-id", "r1"}, want: "Temporal"},
		{name: "approvals", w: base, args: []string{"approvals"}, want: "Error"},
		{name: "approve", w: base, args: []string{"approve", "--tenant", "acme", "--run-id", "r1", "--step", "1"}, want: "Error"},
		{name: "reject, a bad step", w: base, args: []string{"reject", "--run-id", "r1", "--step", "one"}, want: "invalid argument"},
		{name: "resolve, a bad outcome", w: base, args: []string{"resolve", "--run-id", "r1", "--step", "1", "--outcome", "maybe"}, want: "Error"},
		{name: "reconcile", w: base, args: []string{"reconcile"}, want: "Error"},
		{name: "keys", w: base, args: []string{"keys", "--expiring"}, want: "Error"},
		{name: "tools", w: base, args: []string{"tools"}, want: "TOOL"},
		{name: "tools --json", w: base, args: []string{"tools", "--json"}, want: `"name"`},
		{name: "tools, an MCP server down", w: required, args: []string{"tools", "--json"}, want: "connect to MCP server desk"},
		{name: "status, a TLS key that does not parse", w: badTLS, args: []string{"status", "--tenant", "acme", "--run-id", "r1"}, want: "TEMPORAL_TLS_CLIENT_KEY_DATA"},
		{name: "token, a bad role", w: base, args: []string{"token", "new", "--name", "n", "--tenant", "acme", "--role", "nope"}, want: "Error"},
		{name: "an unknown command", w: base, args: []string{"frobnicate"}, want: "unknown command"},
		{name: "start through the API", w: api, args: []string{"start", "--tenant", "acme", "--run-id", "r1", "--goal", "refund order 1001"}, want: "ONCERUN_API"},
		{name: "status through the API", w: api, args: []string{"status", "--run-id", "r1"}, want: "ONCERUN_API"},
		{name: "approvals through the API", w: api, args: []string{"approvals"}, want: "ONCERUN_API"},
		{name: "approve through the API", w: api, args: []string{"approve", "--run-id", "r1", "--step", "1"}, want: "ONCERUN_API"},
		{name: "reject through the API", w: api, args: []string{"reject", "--run-id", "r1", "--step", "1"}, want: "ONCERUN_API"},
	} {
		c.bin = lean
		walks = append(walks, c)
	}
	if dev != "" {
		walks = append(walks, devWalks(t, lean, dev)...)
	}
	for _, c := range walks {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			out := output(t, c)
			assert.Contains(t, out, c.want, "the command got where this case is about")
			for _, s := range append(slices.Clone(c.w.secrets), secret{where: "--database-url", value: "flag-pw-s3cret", user: "oncerun"}) {
				for _, f := range s.forms() {
					assert.NotContains(t, out, f, "%s printed the secret of %s", strings.Join(c.args, " "), s.where)
				}
			}
		})
	}
}

// helpWalks are the --help of bin and of every command under it.
func helpWalks(t *testing.T, w *world, bin string, skip ...string) []walk {
	t.Helper()
	var walks []walk
	var visit func(path []string)
	visit = func(path []string) {
		args := append(slices.Clone(path), "--help")
		c := walk{name: filepath.Base(bin) + " " + strings.Join(args, " "), w: w, bin: bin, args: args, want: "Usage:"}
		walks = append(walks, c)
		for _, sub := range subcommands(output(t, c)) {
			if len(path) == 0 && slices.Contains(skip, sub) {
				continue
			}
			visit(append(slices.Clone(path), sub))
		}
	}
	visit(nil)
	return walks
}

// subcommands reads the commands a --help lists.
func subcommands(help string) []string {
	var out []string
	in := false
	for line := range strings.SplitSeq(help, "\n") {
		switch {
		case strings.HasPrefix(line, "Available Commands:"):
			in = true
		case in && strings.HasPrefix(line, "  "):
			if name := strings.Fields(line)[0]; name != "help" {
				out = append(out, name)
			}
		default:
			in = false
		}
	}
	return out
}

// devWalks are the development command's own: the --help of its commands
// that the production command has not, dev against a Temporal that is not
// there, and dev running with its banner, on a database of its own.
func devWalks(t *testing.T, lean, dev string) []walk {
	t.Helper()
	base := newWorld(t)
	running := newWorld(t)
	delete(running.env, "TEMPORAL_ADDRESS")
	db := pgtest.NewEmptyDB(t)
	u := strings.Replace(db.URL, "postgres://postgres@", "postgres://postgres:dev-db-pw-s3cret@", 1)
	require.NotEqual(t, db.URL, u, "the password is planted in %s", db.URL)
	running.plant("DATABASE_URL", u, "dev-db-pw-s3cret", "postgres")
	port := temporalPort(t)
	lines := helpOf(t, base, lean)
	walks := helpWalks(t, base, dev, lines...)
	return append(walks,
		walk{name: "dev, Temporal not there", w: base, bin: dev, args: []string{"dev", "--data-dir", t.TempDir()}, want: "connect to Temporal"},
		walk{name: "dev running", w: running, bin: dev, args: []string{"dev", "--data-dir", t.TempDir(), "--temporal-port", strconv.Itoa(port)},
			want: "oncerun dev is running", until: "Ctrl-C stops everything"},
	)
}

// helpOf is the commands bin's --help lists.
func helpOf(t *testing.T, w *world, bin string) []string {
	t.Helper()
	return subcommands(output(t, walk{w: w, bin: bin, args: []string{"--help"}}))
}

// output runs c and returns what it printed, on standard output and error.
// A command that does not end within a minute fails the test.
func output(t *testing.T, c walk) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, c.args...)
	cmd.Env, cmd.Dir = c.w.environ(), c.w.dir
	if c.until == "" {
		out, _ := cmd.CombinedOutput()
		require.NoError(t, ctx.Err(), "%s did not end: %s", strings.Join(c.args, " "), out)
		return string(out)
	}
	r, wr, err := os.Pipe()
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = wr, wr
	require.NoError(t, cmd.Start())
	wr.Close()
	var out strings.Builder
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), c.until) {
			_ = cmd.Process.Signal(syscall.SIGINT)
		}
	}
	_ = cmd.Wait()
	require.NoError(t, ctx.Err(), "%s did not end: %s", strings.Join(c.args, " "), out.String())
	return out.String()
}

// build builds the production command and, but with -short, the
// development command into a directory of the test's, and returns their
// paths (dev empty when not built).
func build(t *testing.T) (lean, dev string) {
	t.Helper()
	dir := t.TempDir()
	pkgs := []string{"."}
	if !testing.Short() {
		pkgs = append(pkgs, "../oncerun-dev")
	}
	cmd := exec.Command("go", append([]string{"build", "-o", dir + string(os.PathSeparator)}, pkgs...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	lean = filepath.Join(dir, "oncerun")
	if !testing.Short() {
		dev = filepath.Join(dir, "oncerun-dev")
	}
	return lean, dev
}

// frontend is a gRPC server of Temporal's WorkflowService that implements
// none of its methods: Temporal's client takes a server that does not know
// GetSystemInfo for an old one, so a worker gets past dialing Temporal to
// its database.
func frontend(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := grpc.NewServer()
	workflowservice.RegisterWorkflowServiceServer(s, workflowservice.UnimplementedWorkflowServiceServer{})
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

// temporalPort is a frontend port for dev's embedded server whose service
// ports (the frontend's and the next six, and those 300 below) are free:
// taken between 20000 and 32000, below the kernel's ephemeral range.
func temporalPort(t *testing.T) int {
	t.Helper()
	free := func(port int) bool {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			return false
		}
		return l.Close() == nil
	}
	for range 100 {
		port := 20000 + 10*rand.IntN(1200)
		ok := true
		for off := range 7 {
			ok = ok && free(port+off) && free(port+off-300)
		}
		if ok {
			return port
		}
	}
	t.Fatal("no free block of ports for dev's Temporal server")
	return 0
}

// plain are the variables that hold no credential: the walk plants none
// in them. A variable neither here nor planted by newWorld fails
// TestEveryVariableIsPlantedOrPlain.
var plain = []string{
	"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_TASK_QUEUE", "TEMPORAL_TLS", "TEMPORAL_TLS_CLIENT_CERT_PATH",
	"TEMPORAL_TLS_CLIENT_KEY_PATH", "TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_TLS_SERVER_NAME",
	"TEMPORAL_TLS_DISABLE_HOST_VERIFICATION", "TEMPORAL_CLIENT_AUTHORITY", "TEMPORAL_PROFILE", "TEMPORAL_CONNECT_WAIT",
	"TEMPORAL_DEPLOYMENT_NAME", "TEMPORAL_WORKER_BUILD_ID", "ONCERUN_VERSIONING_BEHAVIOR", "ONCERUN_CUT_OFF_AFTER",
	"METRICS_ADDR", "CREDIT_APPROVAL_THRESHOLD_CENTS", "OPENAI_MODEL", "OPENAI_PARALLEL_TOOL_CALLS", "LOG_LEVEL", "LOG_ACTIVITY_ATTEMPTS",
	"WATCHDOG_INTERVAL", "WATCHDOG_BATCH_SIZE", "WATCHDOG_DUTY_CYCLE", "EXPIRY_POLICY", "APPROVAL_DEADLINE_WARNINGS",
	"ONCERUN_CRASH_AT", "ONCERUN_STALL_AT", "ONCERUN_CRASH_AFTER_COMMIT", "ONCERUN_CRASH_AROUND_EFFECT",
	"APPROVALS_ADDR", "APPROVALS_TOKENS_FILE", "APPROVALS_SECURE_COOKIES", "APPROVALS_DB_TIMEOUT",
	"APPROVALS_TOKENS_FILE_INSECURE", "ONCERUN_TRACE_TRUSTED_NETWORKS", "PAYMENTS_KEY_LIFETIME", "SMTP_ADDR", "SMTP_USERNAME", "SMTP_FROM",
	"RECONCILE_INTERVAL", "RECONCILE_SETTLEMENT", "RECONCILE_LOOKBACK", "RECONCILE_ALERT_AGE",
	"ONCERUN_CHROMIUM", "ONCERUN_SCREENSHOT_DIR", "ONCERUN_LIMITS_FILE", "ONCERUN_AGENTS_CONFIG", "USER",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_SERVICE_NAME",
	"OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_SDK_DISABLED",
}

// TestEveryVariableIsPlantedOrPlain holds TestNoCommandPrintsASecret to
// every variable there is: each one a worker reads (settings.EnvNames) or the
// README's environment table lists is planted with a secret, or said to
// hold none.
func TestEveryVariableIsPlantedOrPlain(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.throughAPI()
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	names := slices.Concat(settings.EnvNames, readmeVariables(string(readme)))
	require.Contains(t, names, "ONCERUN_TOKEN", "the README's table is read")
	for _, name := range names {
		_, set := w.env[name]
		if prefix, ok := strings.CutSuffix(name, "<NAME>"); ok {
			set = slices.ContainsFunc(w.secrets, func(s secret) bool { return strings.HasPrefix(s.where, prefix) })
		}
		assert.True(t, set || slices.Contains(plain, name), "%s: plant a secret in it, or list it as plain", name)
	}
}

// readmeVariable is a variable's name in the first column of the README's
// environment table.
var readmeVariable = regexp.MustCompile("`([A-Z][A-Z0-9_]+(?:<NAME>)?)`")

// readmeVariables are the variables of the README's environment table.
func readmeVariables(readme string) []string {
	var out []string
	_, table, _ := strings.Cut(readme, "| variable | read by | default |")
	table, _, _ = strings.Cut(table, "\n\n")
	for line := range strings.SplitSeq(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 2 {
			continue
		}
		for _, m := range readmeVariable.FindAllStringSubmatch(cells[1], -1) {
			out = append(out, m[1])
		}
	}
	return out
}
