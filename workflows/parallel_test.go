package workflows

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/tools"
)

// payout is an external call for order, which runs as an activity.
func payout(order string) activities.PlannedCall {
	return call("send_refund", fmt.Sprintf(`{"order_id":%q}`, order), tools.ClassExternal)
}

// withID gives c the id a model gave it.
func withID(c activities.PlannedCall, id string) activities.PlannedCall {
	c.Proposed.ID = id
	return c
}

func TestParallelTurnMakesEveryCallAStepAtOnce(t *testing.T) {
	t.Parallel()
	calls := []activities.PlannedCall{
		withID(payout("o-1"), "call_a"), withID(invalid("nope"), "call_b"),
		withID(payout("o-2"), "call_c"), withID(payout("o-3"), "call_d"),
	}
	h := setup(t, calls...)
	h.batch, h.parallel = true, true
	h.toolTime = 10 * time.Second

	st := h.run(t, modelRun())

	require.Len(t, st.Steps, 4, "the refused call is a step too, in the order proposed")
	for i, s := range st.Steps {
		assert.Equal(t, int64(i+1), s.Step)
		assert.Equal(t, 1, s.Turn, "step %d", s.Step)
	}
	assert.Equal(t, []StepState{StepDone, StepFailed, StepDone, StepDone}, states(st))
	assert.True(t, st.Steps[1].Refused)
	assert.Equal(t, []string{"call_a", "call_b", "call_c", "call_d"},
		[]string{st.Steps[0].CallID, st.Steps[1].CallID, st.Steps[2].CallID, st.Steps[3].CallID})
	assert.Len(t, h.toolCalls(), 3)
	// All three ran at once, not one after another (the harness records
	// an attempt when its time has passed).
	for _, c := range h.toolCalls() {
		assert.Equal(t, t0.Add(h.toolTime), c.At.UTC(), "step %d ran late", c.In.Step)
	}
	plans := h.planInputs()
	require.Len(t, plans, 2, "one turn for the calls, one that ends the run")
	hist := plans[1].History
	require.Len(t, hist, 4, "every call of the turn, the invalid one too")
	assert.Equal(t, []planner.Outcome{planner.OutcomeDone, planner.OutcomeInvalid, planner.OutcomeDone, planner.OutcomeDone}, outcomes(hist))
	for i, id := range []string{"call_a", "call_b", "call_c", "call_d"} {
		assert.Equal(t, id, hist[i].ID)
		assert.Equal(t, 1, hist[i].Turn)
	}
}

func TestParallelTurnRunsAtMostLimitsParallelStepsAtOnce(t *testing.T) {
	t.Parallel()
	var calls []activities.PlannedCall
	for i := range 5 {
		calls = append(calls, payout(fmt.Sprintf("o-%d", i)))
	}
	h := setup(t, calls...)
	h.batch, h.parallel = true, true
	h.toolTime = 10 * time.Second
	in := modelRun()
	in.Limits.Parallel = 2

	st := h.run(t, in)

	assert.Equal(t, []StepState{StepDone, StepDone, StepDone, StepDone, StepDone}, states(st))
	starts := map[time.Duration]int{}
	for _, c := range h.toolCalls() {
		starts[c.At.Sub(t0.Add(h.toolTime)).Round(time.Second)]++
	}
	assert.Equal(t, map[time.Duration]int{0: 2, 10 * time.Second: 2, 20 * time.Second: 1}, starts)
}

func TestParallelTurnDecisionsApplyToTheirOwnStepsInAnyOrder(t *testing.T) {
	t.Parallel()
	var calls []activities.PlannedCall
	for i := range 10 {
		calls = append(calls, credit(fmt.Sprintf("o-%d", i)))
	}
	h := setup(t, calls...)
	h.batch, h.parallel = true, true
	// Each call's decision, in a random order, all at the same moment:
	// even steps approved, odd rejected.
	order := rand.Perm(10)
	t.Logf("decisions sent in the order of steps %v (0-based)", order)
	var sigs []Approval
	for _, i := range order {
		if i%2 == 0 {
			sigs = append(sigs, approve(int64(i+1), calls[i], fmt.Sprintf("approver-%d", i)))
		} else {
			sigs = append(sigs, reject(int64(i+1), calls[i], fmt.Sprintf("approver-%d", i)))
		}
	}
	h.signalAt(time.Minute, sigs...)
	during := h.queryAt(t, 30*time.Second)

	st := h.run(t, modelRun())

	require.Len(t, h.approvalRequests(), 10, "every approval of the turn is asked at once")
	for _, r := range h.approvalRequests() {
		assert.Equal(t, t0, r.RequestedAt.UTC())
	}
	assert.Equal(t, RunWaitingForApproval, during.State)
	require.Len(t, st.Steps, 10)
	var ran []int64
	for _, c := range h.toolCalls() {
		ran = append(ran, c.In.Step)
	}
	slices.Sort(ran)
	assert.Equal(t, []int64{1, 3, 5, 7, 9}, ran, "each approved step once, no rejected one")
	for i, s := range st.Steps {
		ap := approvalOf(t, s)
		assert.Equal(t, fmt.Sprintf("approver-%d", i), ap.Approver, "step %d", s.Step)
		if i%2 == 0 {
			assert.Equal(t, StepDone, s.State)
		} else {
			assert.Equal(t, StepRejected, s.State)
		}
	}
	hist := h.planInputs()[1].History
	require.Len(t, hist, 10)
	for i, o := range hist {
		assert.Equal(t, i+1, o.Step, "observations in the order proposed")
	}
}

func TestParallelTurnMakesTwoIdenticalKeyedCallsOneEffect(t *testing.T) {
	t.Parallel()
	c := call("issue_voucher", `{"amount_cents":500,"order_id":"o-1"}`, tools.ClassKeyed)
	c.OncePerRun = true
	h := setup(t, c, c, payout("o-2"))
	h.batch, h.parallel = true, true

	st := h.run(t, modelRun())

	assert.Equal(t, []StepState{StepDone, StepDuplicate, StepDone}, states(st))
	assert.Equal(t, int64(1), st.Steps[1].DuplicateOf)
	var voucher int
	for _, tc := range h.toolCalls() {
		if tc.In.Tool == "issue_voucher" {
			voucher++
		}
	}
	assert.Equal(t, 1, voucher, "one effect")
}

// Two identical calls of one parallel turn that each need approval: the
// second waits while the first is pending, and once the first is approved
// and applied it is a duplicate, never put to an approver.
func TestParallelTurnAsksForOneApprovalOfTwoIdenticalCalls(t *testing.T) {
	t.Parallel()
	c := call("issue_voucher", `{"amount_cents":500,"order_id":"o-1"}`, tools.ClassKeyed)
	c.OncePerRun, c.NeedsApproval, c.ApprovalReason = true, true, "vouchers need a person"
	h := setup(t, c, c)
	h.batch, h.parallel = true, true
	h.signalAt(time.Hour, approve(1, c, "alice"))

	st := h.run(t, modelRun())

	assert.Equal(t, []StepState{StepDone, StepDuplicate}, states(st))
	require.Len(t, h.approvalRequests(), 1, "one approval for one intent")
	assert.EqualValues(t, 1, h.approvalRequests()[0].Step)
}

func TestParallelTurnFailedCallDoesNotStopTheOthers(t *testing.T) {
	t.Parallel()
	h := setup(t, lookup("o-1"), payout("o-2"), credit("o-3"))
	h.batch, h.parallel = true, true
	h.onTool = func(_ *testsuite.TestWorkflowEnvironment, in activities.ToolInput) error {
		if in.Step == 1 {
			return temporal.NewNonRetryableApplicationError("arguments refused", activities.ErrTypeInvalidArgs, nil)
		}
		return nil
	}
	h.signalAt(time.Hour, reject(3, credit("o-3"), "ann"))

	st := h.run(t, modelRun())

	assert.Equal(t, []StepState{StepFailed, StepDone, StepRejected}, states(st))
	assert.Equal(t, []planner.Outcome{planner.OutcomeFailed, planner.OutcomeDone, planner.OutcomeRejected},
		outcomes(h.planInputs()[1].History))
}

func TestSequentialTurnStopsAtTheFirstCallThatIsNotDone(t *testing.T) {
	t.Parallel()
	// A model whose deployment turned parallel calls off: its batch runs
	// in order, as a script's does.
	h := setup(t, credit("o-1"), payout("o-2"))
	h.batch = true
	h.signalAt(time.Hour, reject(1, credit("o-1"), "ann"))

	st := h.run(t, modelRun())

	// The rejected call ended the batch; the next turn proposed o-2 again.
	require.Len(t, st.Steps, 2)
	assert.Equal(t, []StepState{StepRejected, StepDone}, states(st))
	assert.Equal(t, 2, st.Steps[1].Turn)
	assert.Len(t, h.planInputs(), 3)
}
