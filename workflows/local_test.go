package workflows

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/oncerun/oncerun/activities"
)

// lookups are n lookup calls of distinct orders.
func lookups(n int) []activities.PlannedCall {
	calls := make([]activities.PlannedCall, n)
	for i := range calls {
		calls[i] = lookup(fmt.Sprintf("o-%d", i))
	}
	return calls
}

// The markers of local steps count toward the history limit before their
// workflow task completes: a run of local steps continues as new when they
// would fill its history, as one of activities does.
func TestLocalStepsContinueAsNewWhenTheirMarkersFillTheHistory(t *testing.T) {
	t.Parallel()
	h := setup(t, lookups(60)...)
	in := scripted(lookups(60)...)
	in.Limits.HistoryLimit = 20
	h.env.ExecuteWorkflow(AgentRun, in)
	next := h.continuedAsNew(t)
	require.NotNil(t, next.Carry)
	steps := len(next.Carry.Steps)
	assert.Greater(t, steps, 10, "a marker a step, and one a turn of up to 32 calls")
	assert.Less(t, steps, maxScriptBatch, "the limit is reached within the first turn's batch")
	assert.Equal(t, steps, next.Carry.Proposed, "the next generation plans from the call after the last step")
}

// A workflow task's local activities are bounded: past maxLocalPerTask the
// run lets its task complete before the next local step.
func TestManyLocalStepsLetTheirWorkflowTaskComplete(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		steps  int
		timers bool
	}{{maxLocalPerTask - 10, false}, {maxLocalPerTask + 10, true}} {
		t.Run(fmt.Sprint(tc.steps), func(t *testing.T) {
			t.Parallel()
			h := setup(t, lookups(tc.steps)...)
			h.batch = true // one turn, a regular activity: only the steps are local
			var timers atomic.Int32
			h.env.SetOnTimerScheduledListener(func(_ string, d time.Duration) {
				if d == time.Millisecond {
					timers.Add(1)
				}
			})
			in := modelRun()
			in.Limits.MaxSteps, in.Limits.HistoryLimit = tc.steps, MaxHistoryLimit
			st := h.run(t, in)
			require.Len(t, st.Steps, tc.steps)
			assert.Equal(t, tc.timers, timers.Load() > 0)
		})
	}
}

// A run keeps its ways in every generation: one that began before
// bundledChanges (a carry that does not say Bundled) runs its database
// steps as activities after Continue-As-New too, and one that began under
// it carries that on.
func TestGenerationsKeepTheirRunsWays(t *testing.T) {
	t.Parallel()
	for _, bundled := range []bool{false, true} {
		t.Run(fmt.Sprintf("bundled=%t", bundled), func(t *testing.T) {
			t.Parallel()
			calls := lookups(2)
			h := setup(t, calls...)
			in := scripted(calls...)
			in.Carry = &Carry{Generation: 1, StartedAt: t0, Bundled: bundled}
			st := h.run(t, in)
			require.Len(t, st.Steps, 2)
			local := 0
			for _, info := range h.startedInfos("RunTool") {
				if info.IsLocalActivity {
					local++
				}
			}
			if bundled {
				assert.Equal(t, 2, local)
				assert.Empty(t, st.Steps[0].Summary)
			} else {
				assert.Zero(t, local, "steps stay activities")
				assert.NotEmpty(t, st.Steps[0].Summary, "the run keeps its summaries, as it did")
				assert.Len(t, h.planInputs(), 3, "one call a turn")
			}

			h = setup(t, lookups(3)...)
			h.onTool = func(env *testsuite.TestWorkflowEnvironment, in activities.ToolInput) error {
				env.SetContinueAsNewSuggested(in.Step == 1)
				return nil
			}
			in = scripted(lookups(3)...)
			in.Carry = &Carry{Generation: 1, StartedAt: t0, Bundled: bundled}
			h.env.ExecuteWorkflow(AgentRun, in)
			assert.Equal(t, bundled, h.continuedAsNew(t).Carry.Bundled, "the next generation is told")
		})
	}
}
