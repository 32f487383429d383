package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// TestExampleModuleRunsItsOwnTool builds examples/loyalty, a module of its
// own that imports oncerun's public packages only, and uses it as its team
// would: `loyalty-dev dev` (the module's ./dev) runs the dev stack with the module's award_points
// tool and creates its table; a run started through the approvals API and
// one started by `loyalty start` (each command checks the plan against the
// same registry) call it, wait for approval, and complete; the table holds
// one award per run, under each step's key. oncerun's own binary, which
// does not know the tool, refuses the plan, naming it.
func TestExampleModuleRunsItsOwnTool(t *testing.T) {
	t.Parallel()
	dir, err := filepath.Abs("../../examples/loyalty")
	require.NoError(t, err)
	bins := t.TempDir()
	bin, devBin := filepath.Join(bins, "loyalty"), filepath.Join(bins, "loyalty-dev")
	for out, pkg := range map[string]string{bin: ".", devBin: "./dev"} {
		build := exec.Command("go", "build", "-o", out, pkg)
		build.Dir = dir
		build.Env = append(build.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
		msg, err := build.CombinedOutput()
		require.NoError(t, err, "the example module's %s builds on its own go.mod:\n%s", pkg, msg)
	}
	planPath := filepath.Join(dir, "plan.json")

	db := pgtest.NewEmptyDB(t)
	dataDir := t.TempDir()
	port := devPort(t)
	queue := fmt.Sprintf("oncerun-example-%d", queues.Add(1))
	apAddr := freeAddr(t)
	env := []string{"DATABASE_URL=" + db.URL, "METRICS_ADDR=" + freeAddr(t), "TEMPORAL_TASK_QUEUE=" + queue,
		"APPROVALS_ADDR=" + apAddr, "APPROVALS_TOKENS_FILE="}
	dev := startDev(t, devBin, dataDir, port, env)
	m := regexp.MustCompile(`token +(oncerun_\S+)`).FindStringSubmatch(dev.out.String())
	require.NotNil(t, m, "the banner shows the development token:\n%s", dev.out.String())
	assert.Contains(t, dev.out.String(), devBin+" start --tenant acme --run-id r1 --plan plan.json",
		"the banner names the binary that is running, not oncerun's own")
	assert.NotContains(t, dev.out.String(), "./cmd/oncerun")
	api := &approvals.Client{BaseURL: "http://" + apAddr, Token: m[1]}
	ctx := context.Background()

	raw, err := os.ReadFile(planPath)
	require.NoError(t, err)
	var pf struct {
		Steps []tools.ProposedCall `json:"steps"`
	}
	require.NoError(t, untrusted.Decode(raw, &pf))

	// Through the approvals API of `loyalty dev`.
	_, code, err := api.Start(ctx, approvals.StartRequest{RunID: "r-api", Plan: pf.Steps})
	require.NoError(t, err)
	assert.Equal(t, 201, code, "the dev stack's API knows award_points")

	// Through the module's CLI, which checks the plan itself.
	cliEnv := append(localEnv(t, os.Environ()), "DATABASE_URL="+db.URL, "TEMPORAL_TASK_QUEUE="+queue,
		fmt.Sprintf("TEMPORAL_ADDRESS=127.0.0.1:%d", port), "ONCERUN_API=", "ONCERUN_TOKEN=")
	start := exec.Command(bin, "start", "--tenant", "acme", "--run-id", "r-cli", "--plan", planPath, "--json")
	start.Env = cliEnv
	out, err := start.CombinedOutput()
	require.NoError(t, err, "loyalty start accepts a plan that calls award_points:\n%s", out)

	// oncerun's own binary has no such tool.
	stock := exec.Command(buildOncerun(t), "start", "--tenant", "acme", "--run-id", "r-stock", "--plan", planPath)
	stock.Env = cliEnv
	out, err = stock.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), `unknown tool "award_points"`)

	rc := connectDev(t, port, queue)
	for _, runID := range []string{"r-api", "r-cli"} {
		pending := waitState(t, rc, runID, workflows.RunWaitingForApproval)
		require.Len(t, pending.Steps, 2)
		assert.Equal(t, "award_points", pending.Steps[1].Tool)
		hash, err := api.StepHash(ctx, runID, 2)
		require.NoError(t, err)
		_, code, err := api.Decide(ctx, runID, 2, workflows.DecisionApprove, approvals.DecideRequest{ArgsHash: hash})
		require.NoError(t, err)
		assert.Equal(t, 202, code)
		final := waitState(t, rc, runID, workflows.RunCompleted)
		assert.Equal(t, workflows.StepDone, final.Steps[1].State)
	}

	pool, err := pgxpool.New(ctx, db.URL)
	require.NoError(t, err)
	defer pool.Close()
	rows, err := pool.Query(ctx, `SELECT idempotency_key, customer_id, points FROM loyalty_points ORDER BY idempotency_key`)
	require.NoError(t, err)
	type award struct {
		Key, Customer string
		Points        int
	}
	var awards []award
	for rows.Next() {
		var a award
		require.NoError(t, rows.Scan(&a.Key, &a.Customer, &a.Points))
		awards = append(awards, a)
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, []award{
		{"v1/acme/r-api/2/award_points", "c-42", 2500},
		{"v1/acme/r-cli/2/award_points", "c-42", 2500},
	}, awards, "one award per run, under the step's key")
	dev.interrupt(t)
}
