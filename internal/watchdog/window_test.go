package watchdog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/internal/watchdog"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// runsAlive says every run is open: the test environment has no server to
// ask, and the run under test is open while the watchdog looks.
type runsAlive struct{}

func (runsAlive) RunState(context.Context, string, string) (bool, string, error) {
	return true, "running", nil
}

// TestPauseOutlivingAKeysWindow is the failure the watchdog exists for. A
// run adds a note (keyed, kept 24 hours: a window the registry would refuse
// for a 3-day pause, built here on purpose), then waits 3 days for the
// approval of a credit. The watchdog passes on day 3. Under hold the note's
// key survives; under prune it is gone and a replay of the note would write
// it again; in both cases an alert exists. The credit's natural key holds
// regardless.
func TestPauseOutlivingAKeysWindow(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{watchdog.PolicyHold, watchdog.PolicyPrune} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := pgtest.NewPool(t, 8)
			store, err := idempotency.New(pool, idempotency.Config{Owner: "worker-a"})
			require.NoError(t, err)
			shopTools := shop.Tools(shop.Config{})
			for i := range shopTools {
				if shopTools[i].Name == shop.ToolAddOrderNote {
					shopTools[i].Retention = 24 * time.Hour
				}
			}
			reg, err := tools.NewRegistry(tools.RegistryConfig{MaxApprovalPause: 12 * time.Hour, RetryHorizon: time.Hour, Margin: time.Hour}, shopTools...)
			require.NoError(t, err)
			acts := &activities.Activities{Pool: pool, Store: store, Tools: reg,
				Planners: map[string]planner.Planner{planner.NameScript: planner.Script{}}}
			wd := &watchdog.Activities{Pool: pool, Tools: reg, Runs: runsAlive{}}

			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestWorkflowEnvironment()
			env.SetStartTime(time.Now()) // the keys' expiry is on the database's clock
			env.RegisterWorkflow(workflows.AgentRun)
			env.RegisterActivity(acts)
			var pass watchdog.PruneOutput
			env.RegisterDelayedCallback(func() {
				var err error
				pass, err = wd.PruneExpired(ctx, watchdog.PruneInput{Cutoff: env.Now(), BatchSize: 100, Policy: policy})
				require.NoError(t, err)
				var st workflows.Status
				v, err := env.QueryWorkflow(workflows.QueryStatus)
				require.NoError(t, err)
				require.NoError(t, v.Get(&st))
				env.SignalWorkflow(workflows.SignalApproval, workflows.Approval{
					Step: 2, Decision: workflows.DecisionApprove, Approver: "dana", ArgsHash: st.Steps[1].ArgsHash,
				})
			}, 72*time.Hour)
			env.ExecuteWorkflow(workflows.AgentRun, workflows.RunInput{Tenant: "acme", RunID: "r-window", Plan: []planner.Call{
				{Tool: shop.ToolAddOrderNote, Args: json.RawMessage(`{"order_id":"1001","text":"damaged"}`)},
				{Tool: shop.ToolIssueCredit, Args: json.RawMessage(`{"order_id":"1001","reason":"damaged","amount_cents":25900,"currency":"EUR"}`)},
			}})
			require.True(t, env.IsWorkflowCompleted())
			require.NoError(t, env.GetWorkflowError())
			var st workflows.Status
			require.NoError(t, env.GetWorkflowResult(&st))
			require.Equal(t, []workflows.StepState{workflows.StepDone, workflows.StepDone},
				[]workflows.StepState{st.Steps[0].State, st.Steps[1].State})

			count := func(sql string, args ...any) int {
				var n int
				require.NoError(t, pool.QueryRow(ctx, sql, args...).Scan(&n))
				return n
			}
			noteKey := "v1/acme/r-window/1/add_order_note"
			assert.Equal(t, 1, pass.Alerts, "the watchdog raised one alert, for the note's key")
			assert.Equal(t, 1, count(`SELECT count(*) FROM key_expiry_alerts WHERE key = $1 AND policy = $2`, noteKey, policy))

			note := st.Steps[0]
			again, err := acts.RunTool(ctx, activities.ToolInput{Tenant: "acme", RunID: "r-window", Step: 1,
				Tool: note.Tool, Args: note.Args, ArgsHash: note.ArgsHash})
			require.NoError(t, err)
			notes := count(`SELECT count(*) FROM order_notes WHERE tenant = 'acme'`)
			if policy == watchdog.PolicyHold {
				assert.Equal(t, 1, count(`SELECT count(*) FROM idempotency_keys WHERE key = $1`, noteKey), "held")
				assert.True(t, again.Replayed, "a replay of the note is still a replay")
				assert.Equal(t, 1, notes)
			} else {
				assert.False(t, again.Replayed, "with its key pruned, a replay of the note runs the effect again")
				assert.Equal(t, 2, notes, "the risk the alert is for: a second note")
			}

			// Prune the credit's key too: its natural key still holds.
			_, err = pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE key = $1`, st.Steps[1].Key)
			require.NoError(t, err)
			credit := st.Steps[1]
			out, err := acts.RunTool(ctx, activities.ToolInput{Tenant: "acme", RunID: "r-window", Step: 2,
				Tool: credit.Tool, Args: credit.Args, ArgsHash: credit.ArgsHash})
			require.NoError(t, err)
			assert.Contains(t, string(out.Result), `"created": false`, fmt.Sprintf("result %s", out.Result))
			assert.Equal(t, 1, count(`SELECT count(*) FROM credits WHERE tenant = 'acme'`), "still one credit")
		})
	}
}
