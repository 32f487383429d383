package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/chaos"
	"github.com/oncerun/oncerun/internal/pgtest"
)

// TestChaosShort runs `oncerun-dev chaos --short` as `make chaos` runs the full
// harness: 20 runs of every effect class through the approvals API while
// workers are SIGKILLed, the Temporal server is killed and started again,
// PostgreSQL's connections are cut, the provider and the mail server
// fail, and the workers' network fails under them (black holes, latency,
// throttling, reset and refused connections, on one worker's link or a
// whole zone's). The harness counts every effect in the business tables,
// the provider's ledger and the mailbox, and exits 1 on any duplicate, loss
// or drift; and it finds no transaction left open once the runs settled.
func TestChaosShort(t *testing.T) {
	t.Parallel()
	rep := runChaos(t, []string{"--short"})
	short := chaos.Short()
	assert.Empty(t, rep.Violations)
	assert.Equal(t, short.Runs, rep.Runs)
	assert.Equal(t, short.Runs, rep.Ended, "every run ended")
	assert.Zero(t, rep.Duplicates)
	assert.Zero(t, rep.Lost)
	assert.Zero(t, rep.Drift)
	assert.Zero(t, rep.InFlightKeys)
	// The faults happened: a run without them proves nothing.
	assert.GreaterOrEqual(t, rep.WorkerKills, short.Kills/2, "workers killed")
	assert.Equal(t, short.TemporalRestarts, rep.TemporalRestarts)
	assert.Equal(t, short.PGRestarts, rep.PGRestarts)
	assert.Positive(t, rep.ProviderFaults)
	assert.Equal(t, short.NetFaults, rep.NetFaults, "network faults")
	require.NotNil(t, rep.Network)
	faults := 0
	for _, f := range rep.Network.Faults {
		faults += f.Count
		assert.Positive(t, f.Seconds, "%s on %s healed after a while", f.Kind, f.Scope)
	}
	assert.Equal(t, short.NetFaults, faults, "every network fault is in the report by kind and scope")
	// Nothing was left behind: no transaction open, every worker sampled.
	assert.Zero(t, rep.Network.IdleInTransaction, "backends idle in a transaction after settling")
	assert.Len(t, rep.Network.Workers, short.Workers)
	assert.NotEmpty(t, rep.Network.Proxies)
	// Every run's note, and the credits and refunds it was given, landed.
	assert.GreaterOrEqual(t, rep.Effects, short.Runs)
	assert.Positive(t, rep.Mails)
	// The delegating runs' children were checked, each started once.
	children := 2 * int(short.Delegating*float64(short.Runs)+0.5)
	assert.Equal(t, children, rep.Children, "every delegating run's two children were checked")
	assert.Equal(t, children, rep.ChildStarts, "each child started once")
}

// runChaos runs `oncerun-dev chaos --json` with args and env on the test's
// PostgreSQL server and returns its report; the run must exit 0.
func runChaos(t *testing.T, args []string, env ...string) chaos.Report {
	t.Helper()
	bin := buildDev(t)
	// The harness stops its processes on SIGTERM; should the test time out,
	// the kernel kills them with it (they die with their parent).
	cmd := exec.CommandContext(t.Context(), bin, append(append([]string{"chaos"}, args...), "--json", "--dir", t.TempDir())...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	cmd.Env = append(append(os.Environ(), "DATABASE_URL="+pgtest.ServerURL()), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, err, "oncerun-dev chaos %v failed:\n%s\n%s", args, stdout.String(), stderr.String())
	var rep chaos.Report
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep), stdout.String())
	t.Logf("chaos report: %s", stdout.String())
	return rep
}

// TestChaosDeployShort runs `oncerun-dev chaos --deploy --short`: the
// short harness while the workers roll through three tool registries and
// two Worker Deployment versions (a tool added, an approval threshold
// changed, an MCP server down at some workers' start, a sub-agent
// removed, the MCP server's schema changed), the runs calling the desk
// too. Every effect found is a step its run records done, every step
// recorded done has its effect, none twice.
func TestChaosDeployShort(t *testing.T) {
	t.Parallel()
	rep := runChaos(t, []string{"--deploy", "--short"})
	short := chaos.ShortDeploy()
	assert.Empty(t, rep.Violations)
	assert.Equal(t, short.Runs, rep.Ended, "every run ended")
	assert.Zero(t, rep.Duplicates)
	assert.Zero(t, rep.Lost)
	assert.Zero(t, rep.NotInRecord)
	assert.Zero(t, rep.TwiceUnderKey)
	assert.Zero(t, rep.RecordedNotFound)
	assert.Zero(t, rep.InFlightKeys)
	assert.Equal(t, short.Rolls, rep.Deploys, "every deploy rolled")
	assert.Equal(t, 1, rep.DeskRedeploys)
	// The faults happened: workers died holding runs' work, which workers
	// of the registries took over.
	assert.GreaterOrEqual(t, rep.WorkerKills, short.Kills/2, "workers killed")
	assert.Positive(t, rep.Takeovers+rep.Resume.InFlight, "work a dead worker held was taken over")
	assert.GreaterOrEqual(t, rep.Effects, short.Runs)
}
