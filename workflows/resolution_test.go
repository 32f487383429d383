package workflows

import (
	"cmp"
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/tools"
)

// resolutions fakes the activities of the unknown-outcome path and of the
// follow-on deliveries, and records their calls.
type resolutions struct {
	mu       sync.Mutex
	requests []activities.ResolutionRequest
	answers  []activities.ResolutionAnswer
	overdue  []activities.ResolutionOverdue
	delivers []activities.DeliverInput
	// deliverState is the state each delivery reports. Default delivered.
	// deliverTime is how long each delivery takes.
	deliverState string
	deliverTime  time.Duration
	// unknownKey makes CheckOutcome report the key's outcome unknown.
	unknownKey bool
	checks     int
}

func withResolutions(h *harness) *resolutions {
	r := &resolutions{}
	h.env.OnActivity(a.RequestResolution, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.ResolutionRequest) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.requests = append(r.requests, in)
			return nil
		})
	h.env.OnActivity(a.ApplyResolution, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.ResolutionAnswer) (activities.ApplyResolutionOutput, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.answers = append(r.answers, in)
			return activities.ApplyResolutionOutput{Result: in.Result}, nil
		})
	h.env.OnActivity(a.AlertResolutionOverdue, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.ResolutionOverdue) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.overdue = append(r.overdue, in)
			return nil
		})
	h.env.OnActivity(a.CheckOutcome, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.ToolInput) (activities.OutcomeCheck, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.checks++
			if !r.unknownKey {
				return activities.OutcomeCheck{}, nil
			}
			return activities.OutcomeCheck{Unknown: true, Resolution: activities.NeedsResolution{Key: "k", FirstSentAt: t0,
				Known: "the provider answered 503; the step's retries ran out"}}, nil
		})
	h.env.OnActivity(a.Deliver, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.DeliverInput) (activities.DeliverOutput, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.delivers = append(r.delivers, in)
			return activities.DeliverOutput{State: cmp.Or(r.deliverState, activities.DeliveryDelivered)}, nil
		}).AfterFn(func() time.Duration { return r.deliverTime })
	return r
}

// refund is an external call.
func refund(order string) activities.PlannedCall {
	return call("refund_payment", `{"order_id":"`+order+`","amount_cents":500}`, tools.ClassExternal)
}

// unknownOnce makes the first n attempts of RunTool end with an unknown
// outcome that nothing could resolve.
func unknownOnce(n int) func(*testsuite.TestWorkflowEnvironment, activities.ToolInput) error {
	var mu sync.Mutex
	return func(_ *testsuite.TestWorkflowEnvironment, in activities.ToolInput) error {
		mu.Lock()
		defer mu.Unlock()
		if n == 0 {
			return nil
		}
		n--
		return temporal.NewNonRetryableApplicationError("outcome unknown and unresolved: the paired read failed",
			activities.ErrTypeNeedsResolution, nil,
			activities.NeedsResolution{Key: "k", FirstSentAt: t0, Known: "the provider dropped the connection; the paired read failed"})
	}
}

func (h *harness) resolveAt(d time.Duration, r Resolution) {
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(SignalResolve, r) }, d)
}

func TestUnknownOutcomeWaitsForAPersonAndAppliedCompletesTheStep(t *testing.T) {
	t.Parallel()
	c := refund("o-1")
	h := setup(t, c)
	r := withResolutions(h)
	h.onTool = unknownOnce(1)
	h.resolveAt(2*day, Resolution{Step: 1, Outcome: OutcomeApplied, Result: json.RawMessage(`{"id":"re_1"}`),
		Resolver: "olga", Note: "the provider's dashboard shows re_1"})
	during := h.queryAt(t, day)

	st := h.run(t, modelRun())

	assert.Equal(t, RunNeedsResolution, during.State)
	require.Len(t, during.Steps, 1)
	assert.Equal(t, StepNeedsResolution, during.Steps[0].State)
	require.NotNil(t, during.Steps[0].Resolution)
	assert.Contains(t, during.Steps[0].Resolution.Known, "paired read failed")

	require.Len(t, h.toolCalls(), 1, "nothing is sent again while the outcome is unknown")
	s := st.Steps[0]
	assert.Equal(t, StepDone, s.State)
	assert.JSONEq(t, `{"id":"re_1"}`, string(s.Result))
	require.NotNil(t, s.Resolution)
	assert.Equal(t, StepResolution{Round: 1, Known: "the provider dropped the connection; the paired read failed",
		FirstSentAt: t0, RequestedAt: t0, Deadline: t0.Add(DefaultApprovalDeadline), Outcome: OutcomeApplied,
		Resolver: "olga", Note: "the provider's dashboard shows re_1", DecidedAt: t0.Add(2 * day),
		Result: json.RawMessage(`{"id":"re_1"}`)}, *s.Resolution)
	require.Len(t, r.requests, 1)
	assert.Equal(t, 1, r.requests[0].Round)
	assert.Equal(t, s.Key, r.requests[0].Key)
	require.Len(t, r.answers, 1)
	assert.True(t, r.answers[0].Applied)
	assert.Equal(t, "olga", r.answers[0].By)
	assert.Equal(t, RunCompleted, st.State)
}

func TestResolveNotAppliedRunsTheStepAgainUnderItsKey(t *testing.T) {
	t.Parallel()
	c := refund("o-1")
	h := setup(t, c)
	r := withResolutions(h)
	h.onTool = unknownOnce(1)
	h.resolveAt(time.Hour, Resolution{Step: 1, Outcome: OutcomeNotApplied, Resolver: "olga", Note: "not in the ledger"})

	st := h.run(t, modelRun())

	tc := h.toolCalls()
	require.Len(t, tc, 2)
	assert.Equal(t, tc[0].In, tc[1].In, "the same step, arguments and key")
	assert.Equal(t, time.Hour, tc[1].At.Sub(t0), "sent again only once a person answered")
	k := key(t, 1, "refund_payment")
	assert.Equal(t, []string{k, k + "#2"}, h.startedIDs("RunTool"))
	require.Len(t, r.answers, 1)
	assert.False(t, r.answers[0].Applied)
	assert.Equal(t, StepDone, st.Steps[0].State)
	assert.Equal(t, OutcomeNotApplied, st.Steps[0].Resolution.Outcome)
}

func TestUnresolvedPastTheDeadlineAlertsAndKeepsWaiting(t *testing.T) {
	t.Parallel()
	c := refund("o-1")
	h := setup(t, c)
	r := withResolutions(h)
	h.onTool = unknownOnce(1)
	later := h.queryAt(t, DefaultApprovalDeadline+day)
	h.resolveAt(DefaultApprovalDeadline+2*day, Resolution{Step: 1, Outcome: OutcomeApplied, Resolver: "olga"})

	st := h.run(t, modelRun())

	require.Len(t, r.overdue, 1, "one alert at the deadline")
	assert.Equal(t, t0.Add(DefaultApprovalDeadline), r.overdue[0].Deadline)
	assert.Equal(t, StepNeedsResolution, later.Steps[0].State, "nothing is guessed at the deadline")
	assert.True(t, later.Steps[0].Resolution.Overdue)
	assert.Len(t, h.toolCalls(), 1)
	assert.Equal(t, StepDone, st.Steps[0].State)
	assert.Equal(t, t0.Add(DefaultApprovalDeadline+2*day), st.Steps[0].Resolution.DecidedAt)
}

func TestResolveSignalsThatDoNotApplyChangeNothing(t *testing.T) {
	t.Parallel()
	c := refund("o-1")
	h := setup(t, lookup("o-1"), c)
	r := withResolutions(h)
	h.onTool = func(env *testsuite.TestWorkflowEnvironment, in activities.ToolInput) error {
		if in.Step == 2 && len(h.startedIDs("RunTool")) == 2 {
			return unknownOnce(1)(env, in)
		}
		return nil
	}
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(SignalResolve, Resolution{Step: 1, Outcome: OutcomeApplied, Resolver: "eve"})           // not unknown
		h.env.SignalWorkflow(SignalResolve, Resolution{Step: 3, Outcome: OutcomeApplied, Resolver: "eve"})           // no such step
		h.env.SignalWorkflow(SignalResolve, Resolution{Step: 2, Round: 2, Outcome: OutcomeApplied, Resolver: "eve"}) // other round
		h.env.SignalWorkflow(SignalResolve, Resolution{Step: 2, Outcome: "maybe", Resolver: "eve"})                  // invalid
	}, time.Hour)
	h.resolveAt(2*time.Hour, Resolution{Step: 2, Outcome: OutcomeNotApplied, Resolver: "olga"})
	h.resolveAt(2*time.Hour+time.Minute, Resolution{Step: 2, Outcome: OutcomeApplied, Resolver: "eve"}) // too late

	st := h.run(t, modelRun())

	require.Len(t, r.answers, 1)
	assert.Equal(t, "olga", r.answers[0].By)
	assert.Equal(t, StepDone, st.Steps[0].State)
	assert.Nil(t, st.Steps[0].Resolution)
	assert.Equal(t, OutcomeNotApplied, st.Steps[1].Resolution.Outcome)
	assert.Equal(t, "olga", st.Steps[1].Resolution.Resolver)
}

func TestFollowUpsAreDeliveredAfterTheStep(t *testing.T) {
	t.Parallel()
	c := credit("o-1")
	c.NeedsApproval = false
	h := setup(t, c)
	r := withResolutions(h)
	r.deliverState = activities.DeliveryUnknown
	msgs := []activities.FollowUpMessage{{Seq: 1, Tool: "send_email", Key: key(t, 1, "send_email.1")}}
	h.followUps = msgs

	st := h.run(t, modelRun())

	assert.Equal(t, []activities.DeliverInput{{Tenant: testTenant, RunID: testRunID, Step: 1, Seq: 1}}, r.delivers)
	assert.Equal(t, []string{msgs[0].Key}, h.startedIDs("Deliver"), "a delivery's activity ID is its key")
	s := st.Steps[0]
	assert.Equal(t, StepDone, s.State, "a delivery in doubt does not undo the step")
	assert.Equal(t, []FollowUp{{Seq: 1, Tool: "send_email", Key: msgs[0].Key, State: activities.DeliveryUnknown}}, s.FollowUps)
}

// An external step whose retries run out while its key says the effect may
// have happened waits for a person instead of failing: a failed step would
// be proposed again under a new key.
func TestExternalStepOutOfRetriesWithItsOutcomeInDoubtWaitsForAPerson(t *testing.T) {
	t.Parallel()
	for _, unknown := range []bool{true, false} {
		t.Run(map[bool]string{true: "outcome_unknown", false: "nothing_sent"}[unknown], func(t *testing.T) {
			t.Parallel()
			h := setup(t, refund("o-1"))
			r := withResolutions(h)
			r.unknownKey = unknown
			h.onTool = func(*testsuite.TestWorkflowEnvironment, activities.ToolInput) error {
				return temporal.NewApplicationError("provider answered 503", "ProviderDown")
			}
			h.resolveAt(3*time.Hour, Resolution{Step: 1, Outcome: OutcomeApplied, Resolver: "olga"})

			st := h.run(t, modelRun())

			assert.Equal(t, 1, r.checks, "the key is checked once the retries run out")
			if unknown {
				assert.Equal(t, StepDone, st.Steps[0].State)
				require.Len(t, r.requests, 1)
				assert.Contains(t, r.requests[0].Known, "retries ran out")
			} else {
				assert.Equal(t, StepFailed, st.Steps[0].State, "nothing was sent: the step failed")
				assert.Empty(t, r.requests)
			}
		})
	}
}
