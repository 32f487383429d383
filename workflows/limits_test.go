package workflows

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/tools"
)

// capLevel is the daily cap a parked step of the tests below meets.
var capLevel = SpendLevel{Cap: "issue_credit", Period: "utc_day", Tools: []string{"issue_credit"},
	Currency: "EUR", Limit: 200000, Spent: 195000, This: 15000, Over: true}

const capReason = "over the daily cap for issue_credit: 1,950.00 of 2,000.00 EUR spent, this call 150.00"

// parkUnlessException parks each attempt of step n that is not an
// exception, as the activity does at a cap.
func parkUnlessException(n int64) func(activities.ToolInput) *activities.Parked {
	return func(in activities.ToolInput) *activities.Parked {
		if in.Step != n || (in.Spend != nil && in.Spend.Exception) {
			return nil
		}
		return &activities.Parked{Reason: capReason, Level: capLevel}
	}
}

// small is an issue_credit call below the approval threshold.
func small(order string) activities.PlannedCall {
	return call("issue_credit", `{"amount":"150.00","order_id":"`+order+`"}`, tools.ClassNatural)
}

func TestAStepAtALimitWaitsAndRunsOnceAsAnException(t *testing.T) {
	t.Parallel()
	c := small("o-1")
	h := setup(t, c)
	h.park = parkUnlessException(1)
	h.signalAt(day, approve(1, c, "alice"))
	waiting := h.queryAt(t, day/2)

	st := h.run(t, modelRun())

	require.Equal(t, []StepState{StepPendingApproval}, states(*waiting))
	assert.Equal(t, ApprovalKindLimit, approvalOf(t, waiting.Steps[0]).Kind)
	assert.Equal(t, capReason, approvalOf(t, waiting.Steps[0]).Reason)

	tc := h.toolCalls()
	require.Len(t, tc, 2, "parked, then run as an exception")
	assert.Equal(t, &activities.SpendInput{}, tc[0].In.Spend)
	assert.Equal(t, &activities.SpendInput{Exception: true}, tc[1].In.Spend)
	assert.Equal(t, day, tc[1].At.Sub(t0))

	require.Equal(t, []StepState{StepDone}, states(st))
	s := st.Steps[0]
	require.NotNil(t, s.Limit)
	assert.Equal(t, capReason, s.Limit.Reason)
	assert.Equal(t, capLevel, s.Limit.Level)
	assert.True(t, s.Limit.Exception)
	assert.Nil(t, s.Limit.Prior, "no rule approved it before")
	ap := approvalOf(t, s)
	assert.Equal(t, DecisionApprove, ap.Decision)
	assert.Equal(t, "alice", ap.Approver)
	assert.Equal(t, 1, ap.Round)

	requests := h.approvalRequests()
	require.Len(t, requests, 1)
	assert.Equal(t, ApprovalKindLimit, requests[0].Kind)
	assert.Equal(t, 1, requests[0].Round)
	assert.Equal(t, capReason, requests[0].Reason)
	res := h.approvalResolutions()
	require.Len(t, res, 1)
	assert.Equal(t, activities.ApprovalApproved, res[0].State)
	assert.Equal(t, 1, res[0].Round)
}

func TestAStepApprovedBeforeTheCapWaitsAgainInARoundOfItsOwn(t *testing.T) {
	t.Parallel()
	c := credit("o-1")
	h := setup(t, c)
	h.park = parkUnlessException(1)
	h.signalAt(day, approve(1, c, "alice"))
	// A second approve of round 1, sent late, is no approval of round 2.
	h.signalAt(2*day, approve(1, c, "mallory"))
	round2 := approve(1, c, "bob")
	round2.Round = 2
	h.signalAt(3*day, round2)

	st := h.run(t, modelRun())

	tc := h.toolCalls()
	require.Len(t, tc, 2)
	assert.Equal(t, day, tc[0].At.Sub(t0), "checked again when it runs")
	assert.False(t, tc[0].In.Spend.Exception)
	assert.Equal(t, 3*day, tc[1].At.Sub(t0), "the stale round-1 signal let nothing past")
	assert.True(t, tc[1].In.Spend.Exception)

	require.Equal(t, []StepState{StepDone}, states(st))
	s := st.Steps[0]
	ap := approvalOf(t, s)
	assert.Equal(t, "bob", ap.Approver)
	assert.Equal(t, 2, ap.Round)
	assert.Equal(t, ApprovalKindLimit, ap.Kind)
	require.NotNil(t, s.Limit)
	require.NotNil(t, s.Limit.Prior)
	assert.Equal(t, "alice", s.Limit.Prior.Approver, "the rule's decision is kept beside the limit's")
	assert.True(t, s.Limit.Exception)

	requests := h.approvalRequests()
	require.Len(t, requests, 2)
	assert.Equal(t, []string{"", ApprovalKindLimit}, []string{requests[0].Kind, requests[1].Kind})
	assert.Equal(t, 2, requests[1].Round)
	res := h.approvalResolutions()
	require.Len(t, res, 2)
	assert.Equal(t, "alice", res[0].DecidedBy)
	assert.Equal(t, "bob", res[1].DecidedBy)
	assert.Equal(t, 2, res[1].Round)
}

func TestAStepEditedDownToFitRunsWithTheEditedAmountAndNoException(t *testing.T) {
	t.Parallel()
	c := edited("refund", 25900)
	c.NeedsApproval, c.ApprovalReason = false, ""
	h := setup(t, c)
	h.edits = editRegistry(t)
	h.park = func(in activities.ToolInput) *activities.Parked {
		if string(in.Args) == string(c.Args) {
			return &activities.Parked{Reason: capReason, Level: capLevel}
		}
		return nil
	}
	h.signalAt(day, edit(1, c, "alice", `{"amount_cents": 5000, "order_id": "o-1", "currency": "EUR"}`))

	st := h.run(t, modelRun())

	want := edited("refund", 5000)
	tc := h.toolCalls()
	require.Len(t, tc, 2)
	assert.Equal(t, string(want.Args), string(tc[1].In.Args))
	assert.False(t, tc[1].In.Spend.Exception, "an edit is checked against the limits again")
	require.Equal(t, []StepState{StepDone}, states(st))
	s := st.Steps[0]
	require.NotNil(t, s.Edit)
	assert.Equal(t, string(c.Args), string(s.Edit.OriginalArgs))
	require.NotNil(t, s.Limit)
	assert.False(t, s.Limit.Exception)
}

func TestARejectedStepAtALimitNeverRuns(t *testing.T) {
	t.Parallel()
	c, next := small("o-1"), lookup("o-2")
	h := setup(t, c, next)
	h.park = parkUnlessException(1)
	h.signalAt(day, reject(1, c, "alice"))

	st := h.run(t, modelRun())

	require.Equal(t, []StepState{StepRejected, StepDone}, states(st))
	var steps []int64
	for _, tc := range h.toolCalls() {
		steps = append(steps, tc.In.Step)
	}
	assert.Equal(t, []int64{1, 2}, steps, "the parked step is not tried again")
	plans := h.planInputs()
	require.Len(t, plans, 3)
	assert.Equal(t, []planner.Outcome{planner.OutcomeRejected}, outcomes(plans[1].History))
}

// A cancel that comes while a step's attempt runs, and the attempt then
// parks at a limit: nobody is asked to approve an exception for a run
// that will never start the step again, and the run ends at once.
func TestACancelWhileTheCallRunsWithdrawsItsLimitWait(t *testing.T) {
	t.Parallel()
	c := small("o-1")
	h := setup(t, c)
	h.park = parkUnlessException(1)
	h.toolTime = time.Hour
	h.updateAt(time.Minute, UpdateCancel, Control{By: "ops@acme", Reason: "customer left"})

	st := h.run(t, modelRun())

	require.Equal(t, RunCancelled, st.State)
	s := st.Steps[0]
	assert.Equal(t, StepCancelled, s.State)
	assert.Contains(t, s.Error, "stopped at a money limit: ")
	require.NotNil(t, s.Limit, "the step says where it stopped")
	assert.Equal(t, capReason, s.Limit.Reason)
	assert.Empty(t, h.approvalRequests(), "nobody was asked")
	assert.Len(t, h.toolCalls(), 1)
	assert.Less(t, st.UpdatedAt.Sub(t0), 2*time.Hour, "the run did not wait out an approval deadline")
}

// A run recorded before the change replays as it ran: its cancelled step
// asked for the limit's approval and waited for it.
func TestARunBeforeTheChangeKeepsItsLimitWaitAfterACancel(t *testing.T) {
	t.Parallel()
	c := small("o-1")
	h := setup(t, c)
	h.env.OnGetVersion(limitWithdrawnWhenHalted, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	h.park = parkUnlessException(1)
	h.toolTime = time.Hour
	h.updateAt(time.Minute, UpdateCancel, Control{By: "ops@acme", Reason: "customer left"})

	st := h.run(t, modelRun())

	assert.Equal(t, StepExpired, st.Steps[0].State)
	assert.Len(t, h.approvalRequests(), 1)
}

func TestAParkedStepOfAParallelTurnWaitsWhileTheOthersRun(t *testing.T) {
	t.Parallel()
	c1, c2 := small("o-1"), small("o-2")
	h := setup(t, c1, c2)
	h.batch, h.parallel = true, true
	h.park = parkUnlessException(2)
	h.signalAt(day, approve(2, c2, "alice"))
	mid := h.queryAt(t, day/2)

	st := h.run(t, modelRun())

	require.Equal(t, []StepState{StepDone, StepPendingApproval}, states(*mid))
	require.Equal(t, []StepState{StepDone, StepDone}, states(st))
	var exceptions []bool
	for _, tc := range h.toolCalls() {
		exceptions = append(exceptions, tc.In.Spend.Exception)
	}
	assert.ElementsMatch(t, []bool{false, false, true}, exceptions)
}

func TestARunsBudgetGoesToEveryStep(t *testing.T) {
	t.Parallel()
	c := small("o-1")
	h := setup(t, c)
	in := modelRun()
	in.Limits.Spend = map[string]int64{"EUR": 50000}

	h.run(t, in)

	tc := h.toolCalls()
	require.Len(t, tc, 1)
	assert.Equal(t, &activities.SpendInput{Budget: map[string]int64{"EUR": 50000}}, tc[0].In.Spend)
}

// A step sent again after a person answered not_applied may meet a limit
// that filled while they looked: it waits at the limit, and runs only once
// let past; it is never reported done without running.
func TestAStepSentAgainAfterAResolutionCanParkAtALimit(t *testing.T) {
	t.Parallel()
	c := refund("o-1")
	h := setup(t, c)
	withResolutions(h)
	h.onTool = unknownOnce(1)
	attempts := 0
	h.park = func(in activities.ToolInput) *activities.Parked {
		attempts++
		if attempts == 1 && !in.Spend.Exception { // the attempt after the resolution (the first fails before)
			return &activities.Parked{Reason: capReason, Level: capLevel}
		}
		return nil
	}
	h.resolveAt(time.Hour, Resolution{Step: 1, Outcome: OutcomeNotApplied, Resolver: "olga", Note: "not in the ledger"})
	h.signalAt(day, approve(1, c, "alice"))
	waiting := h.queryAt(t, day/2)

	st := h.run(t, modelRun())

	require.Equal(t, []StepState{StepPendingApproval}, states(*waiting), "parked, not done")
	tc := h.toolCalls()
	require.Len(t, tc, 3)
	assert.True(t, tc[2].In.Spend.Exception)
	assert.Equal(t, day, tc[2].At.Sub(t0))
	k := key(t, 1, "refund_payment")
	assert.Equal(t, []string{k, k + "#2", k + "#limit1"}, h.startedIDs("RunTool"))
	require.Equal(t, []StepState{StepDone}, states(st))
	assert.JSONEq(t, string(result(1)), string(st.Steps[0].Result))
}

// An approver's edit at a limit that makes the call an intent an earlier
// step applied is a duplicate: it is not executed again.
func TestAnEditAtALimitIntoAnAppliedIntentIsADuplicate(t *testing.T) {
	t.Parallel()
	first, second := edited("refund", 5000), edited("refund", 9000)
	first.NeedsApproval, first.ApprovalReason = false, ""
	second.NeedsApproval, second.ApprovalReason = false, ""
	first.OncePerRun, second.OncePerRun = true, true
	h := setup(t, first, second)
	h.edits = editRegistry(t)
	h.park = func(in activities.ToolInput) *activities.Parked {
		if in.Step == 2 && string(in.Args) == string(second.Args) {
			return &activities.Parked{Reason: capReason, Level: capLevel}
		}
		return nil
	}
	h.signalAt(day, edit(2, second, "alice", `{"amount_cents": 5000, "order_id": "o-1", "currency": "EUR"}`))

	st := h.run(t, modelRun())

	require.Equal(t, []StepState{StepDone, StepDuplicate}, states(st))
	assert.Equal(t, int64(1), st.Steps[1].DuplicateOf)
	assert.Len(t, h.toolCalls(), 2, "step 1, and step 2's parked attempt")
}

// A run that began before limits keeps not parking after Continue-As-New;
// one that began with them keeps them, and tells the next generation.
func TestGenerationsKeepTheirRunsAnswerOnLimits(t *testing.T) {
	t.Parallel()
	for _, limits := range []bool{false, true} {
		t.Run(fmt.Sprintf("limits=%t", limits), func(t *testing.T) {
			t.Parallel()
			c := small("o-1")
			h := setup(t, c)
			in := modelRun()
			in.Carry = &Carry{Generation: 1, StartedAt: t0, Bundled: true, Limits: limits}
			h.run(t, in)
			tc := h.toolCalls()
			require.Len(t, tc, 1)
			assert.Equal(t, limits, tc[0].In.Spend != nil, "Spend is sent only by a run with limits")

			h = setup(t, small("o-1"), small("o-2"))
			h.onTool = func(env *testsuite.TestWorkflowEnvironment, in activities.ToolInput) error {
				env.SetContinueAsNewSuggested(in.Step == 1)
				return nil
			}
			in = modelRun()
			in.Carry = &Carry{Generation: 1, StartedAt: t0, Bundled: true, Limits: limits}
			h.env.ExecuteWorkflow(AgentRun, in)
			assert.Equal(t, limits, h.continuedAsNew(t).Carry.Limits, "the next generation is told")
		})
	}
}
