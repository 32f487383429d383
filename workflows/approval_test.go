package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/planner"
)

const day = 24 * time.Hour

func TestApprovalAfterThreeDaysRunsToolOnce(t *testing.T) {
	t.Parallel()
	c := credit("o-1")
	h := setup(t, c)
	ap := approve(1, c, "alice")
	ap.Comment = "customer is right"
	h.signalAt(3*day, ap)

	st := h.run(t, modelRun())

	tc := h.toolCalls()
	require.Len(t, tc, 1)
	assert.Equal(t, activities.ToolInput{
		Tenant: testTenant, RunID: testRunID, Step: 1, Tool: "issue_credit", Args: c.Args, ArgsHash: c.ArgsHash,
		Spend: &activities.SpendInput{},
	}, tc[0].In)
	assert.Equal(t, 3*day, tc[0].At.Sub(t0), "the tool runs when the approval arrives")
	assert.Equal(t, []string{key(t, 1, "issue_credit")}, h.stepKeys(t))

	require.Len(t, st.Steps, 1)
	s := st.Steps[0]
	assert.Equal(t, StepDone, s.State)
	assert.JSONEq(t, string(result(1)), string(s.Result))
	assert.Equal(t, StepApproval{
		Reason: c.ApprovalReason, RequestedAt: t0, Deadline: t0.Add(DefaultApprovalDeadline),
		Decision: DecisionApprove, Approver: "alice", Comment: "customer is right", DecidedAt: t0.Add(3 * day),
	}, approvalOf(t, s))
	assert.Equal(t, RunCompleted, st.State)

	assert.Equal(t, []activities.ApprovalRequest{{
		Tenant: testTenant, RunID: testRunID, Step: 1, Tool: "issue_credit", Args: c.Args, ArgsHash: c.ArgsHash,
		Goal: "refund order 1", Reason: c.ApprovalReason, RequestedAt: t0, Deadline: t0.Add(DefaultApprovalDeadline),
		OnExpiry: ExpiryExpire,
	}}, h.approvalRequests())
	assert.Equal(t, []activities.ApprovalResolution{{
		Tenant: testTenant, RunID: testRunID, Step: 1, State: activities.ApprovalApproved,
		DecidedBy: "alice", DecidedAt: t0.Add(3 * day), Comment: "customer is right",
	}}, h.approvalResolutions())
}

func TestApprovalThatNeverArrivesExpires(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		deadline time.Duration // of the run's limits
		want     time.Duration // when the step expires
	}{
		{"default deadline", 0, DefaultApprovalDeadline},
		{"custom deadline", 2 * day, 2 * day},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, next := credit("o-1"), lookup("o-2")
			h := setup(t, c, next)
			in := modelRun()
			in.Limits.ApprovalDeadline = tc.deadline

			st := h.run(t, in)

			require.Equal(t, []StepState{StepExpired, StepDone}, states(st))
			assert.NotEmpty(t, st.Steps[0].Error)
			assert.Equal(t, t0.Add(tc.want), approvalOf(t, st.Steps[0]).DecidedAt)
			assert.Equal(t, t0.Add(tc.want), st.Steps[0].FinishedAt)
			tools := h.toolCalls()
			require.Len(t, tools, 1, "only the step after the expired one runs")
			assert.Equal(t, int64(2), tools[0].In.Step)
			assert.GreaterOrEqual(t, h.env.Now().Sub(t0), tc.want)
			requests := h.approvalRequests()
			require.Len(t, requests, 1)
			assert.Equal(t, t0.Add(tc.want), requests[0].Deadline)
			assert.Equal(t, []activities.ApprovalResolution{{
				Tenant: testTenant, RunID: testRunID, Step: 1, State: activities.ApprovalExpired, DecidedAt: t0.Add(tc.want),
			}}, h.approvalResolutions())
			plans := h.planInputs()
			require.Len(t, plans, 3)
			require.Len(t, plans[1].History, 1)
			assert.Equal(t, planner.Observation{
				Step: 1, Turn: 1, Call: planner.Call{Tool: "issue_credit", Args: c.Args, ID: "call_1_1"},
				Outcome: planner.OutcomeExpired, Error: st.Steps[0].Error,
			}, plans[1].History[0])
		})
	}
}

func TestApprovalSecondDecisionChangesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		second func(c activities.PlannedCall) Approval
		at     time.Duration // 3 days: with the first; 4 days: after the step ran
	}{
		{"duplicate with the first", func(c activities.PlannedCall) Approval { return approve(1, c, "mallory") }, 3 * day},
		{"conflict with the first", func(c activities.PlannedCall) Approval { return reject(1, c, "mallory") }, 3 * day},
		{"duplicate after the step ran", func(c activities.PlannedCall) Approval { return approve(1, c, "mallory") }, 4 * day},
		{"conflict after the step ran", func(c activities.PlannedCall) Approval { return reject(1, c, "mallory") }, 4 * day},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c1, c2 := credit("o-1"), credit("o-2") // step 2 keeps the run open
			h := setup(t, c1, c2)
			if tc.at == 3*day {
				h.signalAt(3*day, approve(1, c1, "alice"), tc.second(c1))
			} else {
				h.signalAt(3*day, approve(1, c1, "alice"))
				h.signalAt(tc.at, tc.second(c1))
			}
			h.signalAt(5*day, approve(2, c2, "alice"))

			st := h.run(t, modelRun())

			require.Equal(t, []StepState{StepDone, StepDone}, states(st))
			ap := approvalOf(t, st.Steps[0])
			assert.Equal(t, DecisionApprove, ap.Decision)
			assert.Equal(t, "alice", ap.Approver)
			assert.Equal(t, t0.Add(3*day), ap.DecidedAt)
			steps := []int64{}
			for _, c := range h.toolCalls() {
				steps = append(steps, c.In.Step)
			}
			assert.Equal(t, []int64{1, 2}, steps, "each step runs once")
			res := h.approvalResolutions()
			require.Len(t, res, 2)
			assert.Equal(t, activities.ApprovalApproved, res[0].State)
			assert.Equal(t, "alice", res[0].DecidedBy)
		})
	}
}

func TestApprovalForOtherArgumentsDoesNotApply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		correctAt time.Duration // 0: no correct approval follows
		want      StepState
	}{
		{"then expires", 0, StepExpired},
		{"then a correct approval applies", 2 * day, StepDone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := credit("o-1")
			h := setup(t, c)
			wrong := approve(1, c, "mallory")
			wrong.ArgsHash = credit("o-2").ArgsHash
			h.signalAt(day, wrong)
			if tc.correctAt > 0 {
				h.signalAt(tc.correctAt, approve(1, c, "alice"))
			}
			after := h.queryAt(t, day+time.Hour)

			st := h.run(t, modelRun())

			require.Len(t, after.Steps, 1)
			assert.Equal(t, StepPendingApproval, after.Steps[0].State)
			assert.Empty(t, approvalOf(t, after.Steps[0]).Approver)
			assert.Equal(t, []StepState{tc.want}, states(st))
			tools := h.toolCalls()
			if tc.correctAt == 0 {
				assert.Empty(t, tools)
				return
			}
			require.Len(t, tools, 1)
			assert.Equal(t, tc.correctAt, tools[0].At.Sub(t0))
			assert.Equal(t, "alice", approvalOf(t, st.Steps[0]).Approver)
		})
	}
}

func TestApprovalForStepNotPendingChangesNothing(t *testing.T) {
	t.Parallel()
	done, c1, c2 := lookup("o-1"), credit("o-1"), credit("o-2")
	for _, tc := range []struct {
		name  string
		calls []activities.PlannedCall // the last one waits for approval at `at`
		at    time.Duration
		sig   Approval
	}{
		{"no such step", []activities.PlannedCall{done, c1}, day, approve(3, c1, "mallory")},
		{"step zero", []activities.PlannedCall{done, c1}, day, approve(0, c1, "mallory")},
		{"step done without approval", []activities.PlannedCall{done, c1}, day, approve(1, done, "mallory")},
		{"step expired", []activities.PlannedCall{c1, c2}, 8 * day, approve(1, c1, "mallory")},
		{"not a decision", []activities.PlannedCall{done, c1}, day,
			Approval{Step: 2, Decision: "maybe", Approver: "mallory", ArgsHash: c1.ArgsHash}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, tc.calls...)
			before := h.queryAt(t, tc.at-time.Hour)
			h.signalAt(tc.at, tc.sig)
			after := h.queryAt(t, tc.at+time.Hour)

			st := h.run(t, modelRun())

			require.Equal(t, RunWaitingForApproval, before.State)
			assert.Equal(t, *before, *after)
			for _, c := range h.toolCalls() {
				assert.Less(t, c.At.Sub(t0), tc.at, "no tool runs after the signal")
			}
			require.NotEmpty(t, st.Steps)
			assert.Equal(t, StepExpired, st.Steps[len(st.Steps)-1].State)
		})
	}
}

func TestApprovalRejectedStepNeverRuns(t *testing.T) {
	t.Parallel()
	c := credit("o-1")
	h := setup(t, c)
	h.signalAt(3*day, reject(1, c, "bob"))

	st := h.run(t, modelRun())

	assert.Empty(t, h.toolCalls())
	require.Len(t, st.Steps, 1)
	assert.Equal(t, StepRejected, st.Steps[0].State)
	assert.Equal(t, "rejected by bob", st.Steps[0].Error)
	assert.Equal(t, "bob", approvalOf(t, st.Steps[0]).Approver)
	assert.Equal(t, []activities.ApprovalResolution{{
		Tenant: testTenant, RunID: testRunID, Step: 1, State: activities.ApprovalRejected,
		DecidedBy: "bob", DecidedAt: t0.Add(3 * day),
	}}, h.approvalResolutions())
	plans := h.planInputs()
	require.Len(t, plans, 2)
	require.Equal(t, []planner.Outcome{planner.OutcomeRejected}, outcomes(plans[1].History))
	assert.Equal(t, 1, plans[1].History[0].Step)
}

func TestStatusQueryWhileWaitingAndAfter(t *testing.T) {
	t.Parallel()
	l, c := lookup("o-1"), credit("o-1")
	h := setup(t, l, c)
	h.toolTime = time.Minute
	h.signalAt(3*day, approve(2, c, "alice"))
	waiting := h.queryAt(t, day)
	running := h.queryAt(t, 3*day+30*time.Second) // step 2 runs for a minute

	h.run(t, modelRun())

	assert.Equal(t, RunWaitingForApproval, waiting.State)
	require.Equal(t, []StepState{StepDone, StepPendingApproval}, states(*waiting))
	assert.Equal(t, c.ArgsHash, waiting.Steps[1].ArgsHash)
	assert.Equal(t, key(t, 2, "issue_credit"), waiting.Steps[1].Key)
	assert.Equal(t, t0.Add(time.Minute+DefaultApprovalDeadline), approvalOf(t, waiting.Steps[1]).Deadline)

	assert.Equal(t, RunRunning, running.State)
	require.Equal(t, []StepState{StepDone, StepRunning}, states(*running))
	assert.Equal(t, t0.Add(3*day), running.Steps[1].StartedAt)

	v, err := h.env.QueryWorkflow(QueryStatus)
	require.NoError(t, err)
	var final Status
	require.NoError(t, v.Get(&final))
	assert.Equal(t, RunCompleted, final.State)
	assert.Equal(t, []StepState{StepDone, StepDone}, states(final))
	assert.Equal(t, "all done", final.Message)
}

// A planner that proposed a note to follow a credit must not see the note
// made when the credit was rejected: the rest of its batch is dropped and it
// plans again, knowing the outcome.
func TestRejectedStepStopsTheRestOfTheBatch(t *testing.T) {
	t.Parallel()
	c, l := credit("o-1"), lookup("o-1")
	h := setup(t, c, l)
	h.batch = true
	h.signalAt(time.Hour, reject(1, c, "bob"))

	st := h.run(t, modelRun())

	require.Len(t, st.Steps, 2)
	assert.Equal(t, []StepState{StepRejected, StepDone}, states(st))
	plans := h.planInputs()
	require.Len(t, plans, 3, "the planner is asked again after the rejection")
	assert.Equal(t, 1, plans[1].Proposed, "only the rejected call was taken from the first batch")
	assert.Equal(t, []planner.Outcome{planner.OutcomeRejected}, outcomes(plans[1].History))
}
