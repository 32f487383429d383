package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/internal/agents"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/workflows"
)

// j. The worker dies around a child run's start: in the workflow task that
// starts it (child-start), or once Temporal has started it and before the
// parent has recorded it (child-started), the child running on meanwhile.
// Another worker takes the parent up from its history: the child is
// started once, its note and credit are made once, and the parent's step
// is done with the child's outcome.
func TestCrashAroundAChildRunsStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		point, text string
		// childAtDeath says whether the child exists when the worker dies.
		childAtDeath bool
	}{
		{settings.PointChildStart, "during the workflow task that starts the step's child run", false},
		{settings.PointChildStarted, "once the step's child run has started, before the run records it", true},
	} {
		t.Run(tc.point, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			e.agents = agents.Config{Agents: []agents.Agent{{Name: "credits", Description: "Credits for late parcels.",
				Tools: []string{shop.ToolAddOrderNote, shop.ToolIssueCredit}, Planner: agents.PlannerScript}}}
			path := filepath.Join(t.TempDir(), "agents.yaml")
			require.NoError(t, os.WriteFile(path, []byte("agents:\n  - name: credits\n    description: Credits for late parcels.\n"+
				"    tools: [add_order_note, issue_credit]\n    planner: script\n"), 0o600))
			p := startWorkerProcess(t, e, nil, settings.EnvAgentsConfig+"="+path, settings.EnvCrashAt+"="+tc.point+":agent_credits")
			run := e.id(tc.point)
			child := workflows.ChildRunID(run, 1)
			ctx := context.Background()
			_, err := e.runs.Start(ctx, workflows.RunInput{Tenant: "acme", RunID: run, Plan: []planner.Call{
				call("agent_credits", `{"goal":"credit the late parcel","plan":[`+
					`{"tool":"add_order_note","args":{"order_id":"1001","text":"late parcel"}},`+
					`{"tool":"issue_credit","args":{"order_id":"1001","reason":"late","amount_cents":2500,"currency":"EUR"}}]}`),
			}})
			require.NoError(t, err)

			p.died(tc.text)
			_, err = e.tc.DescribeWorkflowExecution(ctx, workflows.WorkflowID("acme", child), "")
			if tc.childAtDeath {
				require.NoError(t, err, "Temporal started the child before the worker died")
			} else {
				require.Error(t, err, "no child before the task that starts it completes")
			}

			e.startWorker("w2", sdkworker.Options{})
			st := e.result("acme", run)
			require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
			require.Len(t, st.Steps, 1)
			assert.Equal(t, workflows.StepDone, st.Steps[0].State, st.Steps[0].Error)
			assert.Equal(t, child, st.Steps[0].Child)
			assert.Equal(t, 1, e.countEvents(run, func(ev *historypb.HistoryEvent) bool {
				return ev.GetEventType() == enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
			}), "the parent started the child once")
			assert.Zero(t, e.countEvents(run, func(ev *historypb.HistoryEvent) bool {
				return ev.GetEventType() == enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_FAILED
			}), "no second start was tried and refused")
			assert.True(t, e.historyHas(run, enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT), "the dead worker's task timed out")
			cs := e.result("acme", child)
			require.Equal(t, workflows.RunCompleted, cs.State, "%+v", cs)
			assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND order_id = '1001' AND reason = 'late'"), "one credit")
			assert.Equal(t, 1, e.count("order_notes", "tenant = 'acme' AND order_id = '1001' AND body = 'late parcel'"), "one note")
		})
	}
}

// countEvents counts the events of the run's history that satisfy is.
func (e *env) countEvents(runID string, is func(*historypb.HistoryEvent) bool) int {
	e.t.Helper()
	it := e.tc.GetWorkflowHistory(context.Background(), workflows.WorkflowID("acme", runID), "", false,
		enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	n := 0
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(e.t, err)
		if is(ev) {
			n++
		}
	}
	return n
}
