package workflows

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/tools"
)

// scriptedTurns runs calls as a scripted run whose planner is the script
// planner of this release, checking each call it proposes, and returns
// what each turn sent it. before makes the run one that began before
// bundledChanges.
func scriptedTurns(t *testing.T, calls []activities.PlannedCall, before bool) (Status, []activities.PlanInput) {
	t.Helper()
	in := scripted(calls...)
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(testLogger(t))
	env := suite.NewTestWorkflowEnvironment()
	if before {
		env.OnGetVersion(bundledChanges, workflow.DefaultVersion, runEvents).Return(workflow.DefaultVersion)
	}
	var inputs []activities.PlanInput
	env.OnActivity(a.Plan, mock.Anything, mock.Anything).Return(func(ctx context.Context, pi activities.PlanInput) (activities.PlanOutput, error) {
		pi.Facts = nil
		inputs = append(inputs, pi)
		prop, err := planner.Script{}.Next(ctx, planner.Request{Plan: pi.Plan, Proposed: pi.Proposed})
		if err != nil || prop.Done {
			return activities.PlanOutput{Done: prop.Done, Message: prop.Message}, err
		}
		var out activities.PlanOutput
		for i, c := range prop.Calls {
			want := calls[pi.PlanOffset+i]
			require.Equal(t, want.Proposed, c, "the script planner proposes the plan's calls from PlanOffset on")
			out.Calls = append(out.Calls, want)
		}
		return out, nil
	})
	env.OnActivity(a.RunTool, mock.Anything, mock.Anything).Return(func(_ context.Context, ti activities.ToolInput) (activities.ToolOutput, error) {
		return activities.ToolOutput{Result: result(ti.Step)}, nil
	})
	env.ExecuteWorkflow(AgentRun, in)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var st Status
	require.NoError(t, env.GetWorkflowResult(&st))
	for i, pi := range inputs {
		assert.Zero(t, pi.Proposed, "turn %d: the next call is Plan[0]", i+1)
		assert.Empty(t, pi.History, "turn %d: a script needs no history", i+1)
		assert.Empty(t, pi.Goal, "turn %d", i+1)
	}
	return st, inputs
}

// offsets lists where each turn's calls begin in the plan, and how many
// calls each turn sent.
func offsets(inputs []activities.PlanInput) (at, sent []int) {
	for _, pi := range inputs {
		at, sent = append(at, pi.PlanOffset), append(sent, len(pi.Plan))
	}
	return at, sent
}

// TestScriptedRunSendsItsNextCallsInBatches checks that a scripted run
// hands its planner the next calls of its plan, up to maxScriptBatch of
// them, and nothing else, so that what a turn costs does not grow with the
// plan; that it plans again after a call that is not done, from the call
// after it; and that a run begun before bundledChanges still sends one call
// a turn.
func TestScriptedRunSendsItsNextCallsInBatches(t *testing.T) {
	t.Parallel()
	calls := []activities.PlannedCall{lookup("o-1"), invalid("nope"), lookup("o-2"), lookup("o-3")}
	t.Run("batches", func(t *testing.T) {
		t.Parallel()
		st, inputs := scriptedTurns(t, calls, false)
		assert.Equal(t, []StepState{StepDone, StepFailed, StepDone, StepDone}, states(st), "the refused call is step 2")
		at, sent := offsets(inputs)
		assert.Equal(t, []int{0, 2, 4}, at, "the whole plan; after the invalid call, the rest; then the turn that finds it done")
		assert.Equal(t, []int{4, 2, 0}, sent)
		assert.Equal(t, scripted(calls...).Plan, inputs[0].Plan)
	})
	t.Run("bounded", func(t *testing.T) {
		t.Parallel()
		st, inputs := scriptedTurns(t, lookups(maxScriptBatch+8), false)
		assert.Len(t, st.Steps, maxScriptBatch+8)
		at, sent := offsets(inputs)
		assert.Equal(t, []int{0, maxScriptBatch, maxScriptBatch + 8}, at)
		assert.Equal(t, []int{maxScriptBatch, 8, 0}, sent)
	})
	t.Run("bounded by bytes", func(t *testing.T) {
		t.Parallel()
		big := make([]activities.PlannedCall, 5)
		for i := range big {
			big[i] = call("lookup_order", fmt.Sprintf(`{"order_id":"o-%d","note":%q}`, i, strings.Repeat("x", maxScriptBatchBytes/2)), tools.ClassRead)
		}
		st, inputs := scriptedTurns(t, big, false)
		assert.Len(t, st.Steps, 5)
		_, sent := offsets(inputs)
		assert.Equal(t, []int{1, 1, 1, 1, 1, 0}, sent, "a call of half the bound and the next one exceed it")
	})
	t.Run("before the change", func(t *testing.T) {
		t.Parallel()
		st, inputs := scriptedTurns(t, calls, true)
		assert.Equal(t, []StepState{StepDone, StepDone, StepDone}, states(st))
		at, sent := offsets(inputs)
		assert.Equal(t, []int{0, 1, 2, 3, 4}, at, "one turn per call, and one that finds the plan done")
		assert.Equal(t, []int{1, 1, 1, 1, 0}, sent)
	})
}

// TestScriptedRunCarriesNoHistory: what Continue-As-New carries of a
// scripted run is its steps, not observations no script reads.
func TestScriptedRunCarriesNoHistory(t *testing.T) {
	t.Parallel()
	calls := []activities.PlannedCall{lookup("o-1"), invalid("nope"), lookup("o-2"), lookup("o-3")}
	h := setup(t, calls...)
	h.onTool = func(env *testsuite.TestWorkflowEnvironment, in activities.ToolInput) error {
		env.SetContinueAsNewSuggested(in.Step == 3)
		return nil
	}
	h.env.ExecuteWorkflow(AgentRun, scripted(calls...))
	next := h.continuedAsNew(t)
	require.NotNil(t, next.Carry)
	assert.Len(t, next.Carry.Steps, 3, "the refused call is step 2")
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
		{"a child run's id", func(in *RunInput) { in.RunID = "r1.3" }, `run_id "r1.3" ends in .<number>, which names child runs`},
		{"a grant from a caller", func(in *RunInput) { in.Grant = []string{"lookup_order"} }, "grant is set only by the run that delegates"},
		{"a parent from a caller", func(in *RunInput) { in.Parent = &Parent{RunID: "r0", Step: 1, BudgetRun: "r0"} }, "parent is set only by the run that delegates"},
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
