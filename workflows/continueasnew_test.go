package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/planner"
)

func TestContinueAsNewKeepsStepNumbers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// grow makes the test history grow as step runs; the test
		// environment does not count events itself.
		grow func(env *testsuite.TestWorkflowEnvironment, step int64)
	}{
		{"history limit reached", func(env *testsuite.TestWorkflowEnvironment, step int64) {
			env.SetCurrentHistoryLength(int(7 * step)) // 21 events after step 3
		}},
		{"server suggests it", func(env *testsuite.TestWorkflowEnvironment, step int64) {
			env.SetContinueAsNewSuggested(step == 3)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			calls := []activities.PlannedCall{
				lookup("o-1"), invalid("nope"), lookup("o-2"), lookup("o-3"), lookup("o-4"), lookup("o-5"),
			}
			in := modelRun()
			in.Limits.HistoryLimit = 20

			// First generation: steps 1 to 3, then Continue-As-New.
			h := setup(t, calls...)
			h.onTool = func(env *testsuite.TestWorkflowEnvironment, in activities.ToolInput) error {
				tc.grow(env, in.Step)
				return nil
			}
			h.env.ExecuteWorkflow(AgentRun, in)
			next := h.continuedAsNew(t)

			require.NotNil(t, next.Carry)
			var nums []int64
			for _, s := range next.Carry.Steps {
				nums = append(nums, s.Step)
			}
			assert.Equal(t, []int64{1, 2, 3}, nums)
			assert.Equal(t, []StepState{StepDone, StepFailed, StepDone}, []StepState{next.Carry.Steps[0].State,
				next.Carry.Steps[1].State, next.Carry.Steps[2].State}, "the invalid call is step 2, refused")
			assert.Equal(t, 3, next.Carry.Proposed)
			assert.True(t, next.Carry.Identity, "every generation numbers its steps as the first did")
			assert.Equal(t, carryFormat, next.Carry.Format)
			assert.Equal(t, []planner.Outcome{planner.OutcomeDone, planner.OutcomeInvalid, planner.OutcomeDone},
				outcomes(next.Carry.History))
			assert.Equal(t, 1, next.Carry.Generation)
			assert.Equal(t, t0, next.Carry.StartedAt)
			assert.Equal(t, in.Tenant, next.Tenant)
			assert.Equal(t, in.RunID, next.RunID)
			assert.Equal(t, in.Plan, next.Plan)
			assert.Equal(t, in.Limits.WithDefaults(), next.Limits)

			// Second generation: numbering goes on at step 4.
			h2 := setup(t, calls...)
			h2.env.SetStartTime(t0.Add(time.Hour))
			st := h2.run(t, next)

			assert.Equal(t, []string{key(t, 4, "lookup_order"), key(t, 5, "lookup_order"), key(t, 6, "lookup_order")}, h2.stepKeys(t))
			plans := h2.planInputs()
			require.NotEmpty(t, plans)
			assert.Equal(t, 3, plans[0].Proposed)
			assert.Equal(t, int64(4), plans[0].FirstStep)
			assert.Len(t, plans[0].History, 3)
			nums = nil
			for _, s := range st.Steps {
				nums = append(nums, s.Step)
			}
			require.Equal(t, []int64{1, 2, 3, 4, 5, 6}, nums)
			assert.Equal(t, key(t, 4, "lookup_order"), st.Steps[3].Key)
			assert.Equal(t, 1, st.Generation)
			assert.Equal(t, t0, st.StartedAt, "a run started when its first generation did")
			assert.Equal(t, RunCompleted, st.State)
		})
	}
}
