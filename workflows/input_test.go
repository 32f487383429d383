package workflows

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/planner"
)

// TestScriptedRunSendsOnlyTheNextCall checks that a scripted run hands its
// planner the next call of its plan and nothing else, so that what a turn
// costs does not grow with the plan, and that the script planner of this
// release and of the one before (which reads Plan[Proposed]) both follow
// the plan from that input.
func TestScriptedRunSendsOnlyTheNextCall(t *testing.T) {
	t.Parallel()
	calls := []activities.PlannedCall{lookup("o-1"), invalid("nope"), lookup("o-2"), lookup("o-3")}
	in := scripted(calls...)
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(testLogger(t))
	env := suite.NewTestWorkflowEnvironment()
	var inputs []activities.PlanInput
	env.OnActivity(a.Plan, mock.Anything, mock.Anything).Return(func(ctx context.Context, pi activities.PlanInput) (activities.PlanOutput, error) {
		inputs = append(inputs, pi)
		prop, err := planner.Script{}.Next(ctx, planner.Request{Plan: pi.Plan, Proposed: pi.Proposed})
		if err != nil || prop.Done {
			return activities.PlanOutput{Done: prop.Done, Message: prop.Message}, err
		}
		require.Len(t, prop.Calls, 1)
		c := calls[pi.PlanOffset]
		require.Equal(t, c.Proposed, prop.Calls[0], "the script planner proposes the plan's call at PlanOffset")
		return activities.PlanOutput{Calls: []activities.PlannedCall{c}}, nil
	})
	env.OnActivity(a.RunTool, mock.Anything, mock.Anything).Return(func(_ context.Context, ti activities.ToolInput) (activities.ToolOutput, error) {
		return activities.ToolOutput{Result: result(ti.Step)}, nil
	})

	env.ExecuteWorkflow(AgentRun, in)

	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var st Status
	require.NoError(t, env.GetWorkflowResult(&st))
	assert.Equal(t, []StepState{StepDone, StepDone, StepDone}, states(st))
	require.Len(t, inputs, len(calls)+1, "one turn per call, and one that finds the plan done")
	for i, pi := range inputs {
		assert.Equal(t, i, pi.PlanOffset, "turn %d", i+1)
		assert.Zero(t, pi.Proposed, "turn %d: the next call is Plan[0]", i+1)
		assert.Empty(t, pi.History, "turn %d: a script needs no history", i+1)
		assert.Empty(t, pi.Goal, "turn %d", i+1)
		if i < len(calls) {
			assert.Equal(t, in.Plan[i:i+1], pi.Plan, "turn %d: the next call alone", i+1)
		} else {
			assert.Empty(t, pi.Plan, "the last turn: nothing left")
		}
	}
}

// TestScriptedRunCarriesNoHistory: what Continue-As-New carries of a
// scripted run is its steps, not observations no script reads.
func TestScriptedRunCarriesNoHistory(t *testing.T) {
	t.Parallel()
	calls := []activities.PlannedCall{lookup("o-1"), invalid("nope"), lookup("o-2"), lookup("o-3")}
	h := setup(t, calls...)
	h.onTool = func(env *testsuite.TestWorkflowEnvironment, in activities.ToolInput) error {
		env.SetContinueAsNewSuggested(in.Step == 2)
		return nil
	}
	h.env.ExecuteWorkflow(AgentRun, scripted(calls...))
	next := h.continuedAsNew(t)
	require.NotNil(t, next.Carry)
	assert.Len(t, next.Carry.Steps, 2)
	assert.Equal(t, 3, next.Carry.Proposed)
	assert.Empty(t, next.Carry.History)
}

// TestValidateBoundsWhatStartsARun: the check where runs start refuses,
// naming the field, what the workflow itself would accept and then handle
// badly: a MaxSteps whose double overflows, text PostgreSQL cannot store,
// run ids people misread, an input too large for a history.
func TestValidateBoundsWhatStartsARun(t *testing.T) {
	t.Parallel()
	valid := scripted(lookup("o-1"))
	require.NoError(t, valid.Validate())
	for _, tc := range []struct {
		name   string
		change func(*RunInput)
		want   string
	}{
		{"max_steps 2^62", func(in *RunInput) { in.Limits.MaxSteps = 1 << 62 }, "limits.max_steps 4611686018427387904 is more than 10000"},
		{"history limit too small", func(in *RunInput) { in.Limits.HistoryLimit = 1 }, "limits.history_limit 1 is not between 16 and 10000"},
		{"NUL in the goal", func(in *RunInput) { in.Goal = "refund\x00" }, "goal holds a NUL character"},
		{"run id ..", func(in *RunInput) { in.RunID = ".." }, `run_id ".." cannot be used`},
		{"run id /", func(in *RunInput) { in.RunID = "/" }, `run_id "/" cannot be used: a URL path cannot carry it alone`},
		{"tenant with a zero-width space", func(in *RunInput) { in.Tenant = "ac\u200bme" }, "tenant"},
		{"plan arguments with an escape", func(in *RunInput) { in.Plan[0].Args = []byte(`{"order_id":"\u001b"}`) }, "plan step 1 arguments holds the control character U+001B"},
		{"too many calls", func(in *RunInput) {
			in.Plan = make([]planner.Call, MaxPlanCalls+1)
			fill(in.Plan)
		}, "the plan has 10001 calls; at most 10000"},
		{"too large", func(in *RunInput) {
			in.Goal = ""
			in.Plan[0].Args = []byte(`{"t":"` + strings.Repeat("x", MaxRunInputBytes) + `"}`)
		}, "the run input (goal and plan included) is"},
		{"a carry from a caller", func(in *RunInput) { in.Carry = &Carry{} }, "carry is set only by Continue-As-New"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := scripted(lookup("o-1"))
			tc.change(&in)
			err := in.Validate()
			require.ErrorIs(t, err, ErrInvalidInput)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// fill names a tool in every call of plan.
func fill(plan []planner.Call) {
	for i := range plan {
		plan[i].Tool = "lookup_order"
	}
}

// TestApprovalThatCannotBeRecordedFailsTheRun: when the pending step's row
// cannot be written (PostgreSQL refused its values), the run fails at once
// and says why, and the step does not read as pending: no list shows it,
// so nobody could decide it.
func TestApprovalThatCannotBeRecordedFailsTheRun(t *testing.T) {
	t.Parallel()
	c := credit("o-1")
	h := setup(t, c)
	h.approvalErr = temporal.NewNonRetryableApplicationError("record pending approval of run r step 1: invalid byte sequence",
		activities.ErrTypeUnstorable, nil)

	h.env.ExecuteWorkflow(AgentRun, modelRun())

	require.True(t, h.env.IsWorkflowCompleted())
	require.Error(t, h.env.GetWorkflowError())
	assert.Len(t, h.approvalRequests(), 1, "not retried: the same values fail every time")
	v, err := h.env.QueryWorkflow(QueryStatus)
	require.NoError(t, err)
	var st Status
	require.NoError(t, v.Get(&st))
	assert.Equal(t, RunFailed, st.State)
	assert.Equal(t, "record pending approval of step 1: record pending approval of run r step 1: invalid byte sequence", st.Error)
	require.Len(t, st.Steps, 1)
	assert.Equal(t, StepFailed, st.Steps[0].State)
	assert.Contains(t, st.Steps[0].Error, "the approval request could not be recorded")
	assert.Empty(t, h.toolCalls())
}

// TestRecordedFailuresAreStableMessages: what a run records of a failure
// (the step's error, the run's, the planner's observation) is the failure's
// own message, not Temporal's wrapping with event ids and worker identity.
func TestRecordedFailuresAreStableMessages(t *testing.T) {
	t.Parallel()
	l1, l2 := lookup("o-1"), lookup("o-2")
	h := setup(t, l1, l2)
	h.onTool = func(_ *testsuite.TestWorkflowEnvironment, in activities.ToolInput) error {
		if in.Step == 1 {
			return temporal.NewNonRetryableApplicationError("order o-1 is archived", activities.ErrTypeToolFailed, errors.New("cause"))
		}
		return nil
	}

	st := h.run(t, modelRun())

	require.Equal(t, []StepState{StepFailed, StepDone}, states(st))
	assert.Equal(t, "order o-1 is archived", st.Steps[0].Error)
	plans := h.planInputs()
	require.Len(t, plans, 3)
	assert.Equal(t, "order o-1 is archived", plans[1].History[0].Error, "the planner is told the same")
	for _, internal := range []string{"scheduledEventID", "identity", "retryable", "ToolFailed"} {
		assert.NotContains(t, st.Steps[0].Error, internal)
	}
}

func TestFailureMessages(t *testing.T) {
	t.Parallel()
	app := temporal.NewApplicationError("the provider said no", "Refused")
	assert.Equal(t, "the provider said no", failure(app))
	assert.Equal(t, "plan turn 2: the provider said no", failureMessage(&runFailure{msg: "plan turn 2", err: app}))
	assert.Equal(t, "plain", failure(errors.New("plain")))
}

// TestApprovalSignalTextIsNotJudgedByTheRun: the run applies a decision
// whatever its comment holds, as it always did, so that the histories of
// runs decided before the API and the CLI checked comments replay the same;
// the approvals table's writer makes such text storable.
func TestApprovalSignalTextIsNotJudgedByTheRun(t *testing.T) {
	t.Parallel()
	c := credit("o-1")
	h := setup(t, c)
	ap := approve(1, c, "mallory")
	ap.Comment = "ok\x00\x1b[2J"
	h.signalAt(day, ap)

	st := h.run(t, modelRun())

	require.Equal(t, []StepState{StepDone}, states(st))
	assert.Equal(t, "mallory", approvalOf(t, st.Steps[0]).Approver)
	res := h.approvalResolutions()
	require.Len(t, res, 1)
	assert.Equal(t, ap.Comment, res[0].Comment)
}
