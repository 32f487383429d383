package workflows

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/tools"
)

func cancelBy(by, reason string) Control { return Control{By: by, Reason: reason} }

// refusedAs requires u to have been refused by the run's validator with
// an error of type errType, and returns its message.
func refusedAs(t *testing.T, u *updated, errType string) string {
	t.Helper()
	require.True(t, u.Done, "the update was never answered")
	require.Error(t, u.Rejected, "the update was accepted")
	var app *temporal.ApplicationError
	require.True(t, errors.As(u.Rejected, &app), "got %v", u.Rejected)
	assert.Equal(t, errType, app.Type())
	return app.Message()
}

func TestCancelWithdrawsApprovalsLetsRunningStepsEndAndStartsNothing(t *testing.T) {
	t.Parallel()
	// One parallel turn: a slow external step, a step waiting for
	// approval, and (the limit being 2) a step waiting for a slot.
	h := setup(t, payout("o-1"), credit("o-2"), payout("o-3"))
	h.batch, h.parallel = true, true
	h.toolTime = time.Minute
	in := modelRun()
	in.Limits.Parallel = 2
	// The credit holds no slot while it waits, so o-3 starts at once; the
	// cancel comes while both run.
	first := h.updateAt(10*time.Second, UpdateCancel, cancelBy("olga", "customer withdrew the claim"))
	again := h.updateAt(30*time.Second, UpdateCancel, cancelBy("pat", "twice"))
	late := h.updateAt(40*time.Second, UpdatePause, cancelBy("pat", ""))
	h.signalAt(20*time.Second, approve(2, credit("o-2"), "ann"))

	st := h.run(t, in)

	assert.Equal(t, RunCancelled, st.State)
	require.True(t, first.Done)
	require.NoError(t, first.Err)
	during := first.Value.(Status)
	assert.Equal(t, RunCancelling, during.State, "two steps still ran")
	require.NotNil(t, during.Receipt)
	assert.Equal(t, []int64{1, 3}, during.Receipt.InFlight)
	assert.Equal(t, StepCancelled, during.Steps[1].State, "the approval is withdrawn at once")

	assert.Equal(t, []StepState{StepDone, StepCancelled, StepDone}, states(st))
	assert.Len(t, h.toolCalls(), 2, "the cancelled step never ran")
	assert.Len(t, h.planInputs(), 1, "no planner is asked after the cancel")
	res := h.approvalResolutions()
	require.Len(t, res, 1)
	assert.Equal(t, activities.ApprovalCancelled, res[0].State)
	assert.Equal(t, "olga", res[0].DecidedBy)
	assert.Equal(t, t0.Add(10*time.Second), res[0].DecidedAt.UTC())

	rc := st.Receipt
	require.NotNil(t, rc)
	assert.Equal(t, RunCancelled, rc.State)
	assert.Equal(t, "olga", rc.CancelledBy)
	assert.Equal(t, "customer withdrew the claim", rc.Reason)
	require.Len(t, rc.Steps, 3)
	assert.Contains(t, rc.Steps[1].Ended, "approval withdrawn")
	assert.Empty(t, rc.Unresolved)
	assert.Empty(t, rc.InFlight)

	// A second cancel changes nothing and answers the same receipt; a
	// pause after it is refused, naming the state.
	require.True(t, again.Done)
	require.NoError(t, again.Err)
	assert.Equal(t, "olga", again.Value.(Status).Receipt.CancelledBy)
	assert.Contains(t, refusedAs(t, late, ErrTypeUpdateConflict), "cancelled by olga")
}

func TestCancelLeavesAnUnknownOutcomeToAPersonAndNeverSendsItAgain(t *testing.T) {
	t.Parallel()
	h := setup(t, payout("o-1"))
	withResolutions(h)
	h.onTool = unknownOnce(1)
	h.updateAt(time.Minute, UpdateCancel, cancelBy("olga", "stop"))
	mid := h.queryAt(t, 2*time.Minute)
	h.resolveAt(time.Hour, Resolution{Step: 1, Outcome: OutcomeNotApplied, Resolver: "pat"})

	st := h.run(t, modelRun())

	// While it waited, the run read cancelled and listed the step for a
	// person.
	assert.Equal(t, RunCancelled, mid.State)
	require.NotNil(t, mid.Receipt)
	require.Len(t, mid.Receipt.Unresolved, 1)
	assert.Equal(t, int64(1), mid.Receipt.Unresolved[0].Step)
	// Not applied, a person said: the step is not sent again.
	assert.Equal(t, RunCancelled, st.State)
	assert.Equal(t, []StepState{StepCancelled}, states(st))
	assert.Contains(t, st.Steps[0].Error, "pat answered")
	assert.Len(t, h.toolCalls(), 1)
}

func TestPausedRunStartsNothingAndCarriesOutDecisionsOnResume(t *testing.T) {
	t.Parallel()
	h := setup(t, lookup("o-1"), credit("o-2"), lookup("o-3"))
	h.updateAt(time.Second, UpdatePause, Control{By: "olga", Reason: "audit"})
	// The first call's turn is planned at once; the pause comes before
	// the credit's approval is decided.
	h.signalAt(time.Hour, approve(2, credit("o-2"), "ann"))
	paused := h.queryAt(t, 2*time.Hour)
	resumed := h.updateAt(3*time.Hour, UpdateResume, Control{By: "olga"})

	st := h.run(t, modelRun())

	assert.Equal(t, RunPaused, paused.State)
	require.NotNil(t, paused.Paused)
	assert.Equal(t, "olga", paused.Paused.By)
	require.Len(t, paused.Steps, 2)
	assert.Equal(t, StepApproved, paused.Steps[1].State, "decided while paused, not run")
	require.NoError(t, resumed.Err)
	assert.Equal(t, RunCompleted, st.State)
	assert.Equal(t, []StepState{StepDone, StepDone, StepDone}, states(st))
	calls := h.toolCalls()
	require.Len(t, calls, 3)
	assert.False(t, calls[1].At.Before(t0.Add(3*time.Hour)), "the approved step ran only on resume")
	assert.Len(t, h.planInputs(), 4)
}

func TestPauseLetsTheApprovalDeadlineRunOn(t *testing.T) {
	t.Parallel()
	h := setup(t, credit("o-1"))
	in := modelRun()
	in.Limits.ApprovalDeadline = time.Hour
	h.updateAt(time.Minute, UpdatePause, Control{By: "olga"})
	h.updateAt(5*time.Hour, UpdateResume, Control{By: "olga"})

	st := h.run(t, in)

	assert.Equal(t, StepExpired, st.Steps[0].State)
	assert.Equal(t, t0.Add(time.Hour), st.Steps[0].FinishedAt.UTC())
}

func TestMessagesReachTheNextTurnOnceInTheOrderAccepted(t *testing.T) {
	t.Parallel()
	h := setup(t, payout("o-1"), payout("o-2"))
	h.toolTime = time.Minute
	var sent []*updated
	for i := range 5 {
		sent = append(sent, h.updateAt(10*time.Second, UpdateMessage,
			Message{MessageID: fmt.Sprintf("m-%d", i), Text: fmt.Sprintf("also check order %d", i), By: "olga"}))
	}
	dup := h.updateAt(20*time.Second, UpdateMessage, Message{MessageID: "m-1", Text: "also check order 1", By: "olga"})
	other := h.updateAt(20*time.Second, UpdateMessage, Message{MessageID: "m-1", Text: "something else", By: "olga"})
	bad := h.updateAt(20*time.Second, UpdateMessage, Message{MessageID: "m-9", Text: "", By: "olga"})

	st := h.run(t, modelRun())

	assert.Equal(t, RunCompleted, st.State)
	for i, u := range sent {
		require.NoError(t, u.Err)
		assert.Equal(t, i+1, u.Value.(MessageReceipt).Position)
	}
	require.NoError(t, dup.Err)
	assert.True(t, dup.Value.(MessageReceipt).Duplicate)
	assert.Equal(t, 2, dup.Value.(MessageReceipt).Position)
	assert.Contains(t, refusedAs(t, other, ErrTypeUpdateConflict), "another text")
	assert.Contains(t, refusedAs(t, bad, ErrTypeUpdateInvalid), "text")

	plans := h.planInputs()
	require.Len(t, plans, 3)
	assert.Empty(t, plans[0].History)
	var said []string
	for _, o := range plans[1].History {
		if o.Outcome == planner.OutcomeMessage {
			said = append(said, o.Message)
		}
	}
	assert.Equal(t, []string{"also check order 0", "also check order 1", "also check order 2", "also check order 3", "also check order 4"}, said)
	n := 0
	for _, o := range plans[2].History {
		if o.Outcome == planner.OutcomeMessage {
			n++
		}
	}
	assert.Equal(t, 5, n, "each message once")
	require.Len(t, st.Messages, 5)
	for _, m := range st.Messages {
		assert.Equal(t, 2, m.DeliveredTurn)
	}
}

func TestAMessageThatComesWhileThePlannerEndsTheRunIsRead(t *testing.T) {
	t.Parallel()
	h := setup(t)
	// The planner's only turn says done; a message arrives while it
	// thinks.
	h.planTime = time.Minute
	h.updateAt(time.Second, UpdateMessage, Message{MessageID: "m-1", Text: "wait, refund o-9 too", By: "olga"})

	st := h.run(t, modelRun())

	plans := h.planInputs()
	require.Len(t, plans, 2, "asked again, with the message")
	require.Len(t, plans[1].History, 1)
	assert.Equal(t, "wait, refund o-9 too", plans[1].History[0].Message)
	assert.Equal(t, RunCompleted, st.State)
}

func TestScriptedRunRefusesMessages(t *testing.T) {
	t.Parallel()
	h := setup(t, lookup("o-1"))
	h.toolTime = time.Minute
	u := h.updateAt(time.Second, UpdateMessage, Message{MessageID: "m-1", Text: "hello", By: "olga"})

	h.run(t, scripted(lookup("o-1")))

	assert.Contains(t, refusedAs(t, u, ErrTypeUpdateConflict), "script")
}

func TestControlsNameWhoAsks(t *testing.T) {
	t.Parallel()
	h := setup(t, credit("o-1"))
	u := h.updateAt(time.Second, UpdateCancel, Control{})
	h.signalAt(time.Hour, reject(1, credit("o-1"), "ann"))

	st := h.run(t, modelRun())

	assert.Contains(t, refusedAs(t, u, ErrTypeUpdateInvalid), "by")
	assert.Equal(t, RunCompleted, st.State)
	assert.Nil(t, st.Receipt)
}

func TestADecisionThatComesWhileTheRequestIsRecordedApplies(t *testing.T) {
	t.Parallel()
	h := setup(t, credit("o-1"))
	h.requestTime = 10 * time.Second
	h.signalAt(5*time.Second, approve(1, credit("o-1"), "ann"))
	during := h.queryAt(t, 2*time.Second)

	st := h.run(t, modelRun())

	assert.Equal(t, RunRunning, during.State, "the run reads waiting only once the request is recorded")
	assert.Equal(t, StepDone, st.Steps[0].State)
	assert.Equal(t, "ann", st.Steps[0].Approval.Approver)
}

func TestAnEditThatMakesAParallelStepRepeatARunningOneIsADuplicate(t *testing.T) {
	t.Parallel()
	once := func(c activities.PlannedCall) activities.PlannedCall {
		c.Class, c.Local, c.OncePerRun = tools.ClassExternal, false, true
		return c
	}
	big, small := once(edited("refund", 25900)), once(edited("refund", 10000))
	small.NeedsApproval = false
	h := setup(t, big, small)
	h.batch, h.parallel = true, true
	h.edits = editRegistry(t)
	h.toolTime = time.Minute
	// Step 2 runs at once; step 1 is edited down to step 2's arguments
	// while step 2 still runs.
	h.signalAt(10*time.Second, edit(1, big, "alice", `{"amount_cents": 10000, "order_id": "o-1", "currency": "EUR"}`))

	st := h.run(t, modelRun())

	assert.Equal(t, []StepState{StepDuplicate, StepDone}, states(st))
	assert.Equal(t, int64(2), st.Steps[0].DuplicateOf)
	assert.Len(t, h.toolCalls(), 1, "one refund")
}

func TestCancelEndsQueuedStepsAtOnceAndWaitsForDeliveries(t *testing.T) {
	t.Parallel()
	h := setup(t, payout("o-1"), payout("o-2"), payout("o-3"))
	r := withResolutions(h)
	r.deliverTime = time.Minute
	h.batch, h.parallel = true, true
	h.toolTime = 10 * time.Second
	h.followUps = []activities.FollowUpMessage{{Seq: 1, Tool: "send_email", Key: "k-mail"}}
	in := modelRun()
	in.Limits.Parallel = 1
	// Step 1 runs, then delivers its follow-up; steps 2 and 3 wait for the
	// slot. The cancel comes during the delivery.
	u := h.updateAt(30*time.Second, UpdateCancel, cancelBy("olga", "stop"))

	st := h.run(t, in)

	require.NoError(t, u.Err)
	at := u.Value.(Status)
	assert.Equal(t, RunCancelling, at.State, "a delivery is still under way")
	assert.Equal(t, []int64{1}, at.Receipt.InFlight, "the queued steps never started")
	assert.Equal(t, []StepState{StepDone, StepCancelled, StepCancelled}, states(at))
	assert.Equal(t, RunCancelled, st.State)
	assert.Len(t, h.toolCalls(), 1)
	assert.Empty(t, at.Steps[0].Args, "an update's answer leaves the arguments out")
}

func TestAStepThatFailsTheRunLetsItsTurnEndFirst(t *testing.T) {
	t.Parallel()
	h := setup(t, payout("o-1"), credit("o-2"), credit("o-3"))
	h.batch, h.parallel = true, true
	h.toolTime = time.Minute
	h.requestErr = func(step int64) error {
		if step == 3 {
			return temporal.NewNonRetryableApplicationError("refused", activities.ErrTypeUnstorable, nil)
		}
		return nil
	}

	h.env.ExecuteWorkflow(AgentRun, modelRun())

	require.True(t, h.env.IsWorkflowCompleted())
	require.Error(t, h.env.GetWorkflowError())
	assert.Len(t, h.toolCalls(), 1, "the running step ended on its own terms")
	res := h.approvalResolutions()
	require.Len(t, res, 1, "step 2's approval is withdrawn")
	assert.Equal(t, activities.ApprovalCancelled, res[0].State)
	assert.Equal(t, int64(2), res[0].Step)
}
