package runs_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"
	"go.temporal.io/sdk/temporal"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/internal/sdkfake"
	"github.com/oncerun/oncerun/workflows"
)

var (
	wid      = workflows.WorkflowID("acme", "r1")
	cancelAt = time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)
)

// waiting is run r1 with step 2 waiting for approval; cancelled is the
// same run once ops cancelled it.
func waiting() workflows.Status {
	return workflows.Status{Tenant: "acme", RunID: "r1", Planner: "script", State: workflows.RunWaitingForApproval,
		Steps: []workflows.Step{
			{Step: 1, Tool: "lookup_order", State: workflows.StepDone},
			{Step: 2, Tool: "issue_credit", State: workflows.StepPendingApproval, ArgsHash: hashA,
				Approval: &workflows.StepApproval{Reason: "amount"}},
		}}
}

func cancelled() workflows.Status {
	st := waiting()
	st.State = workflows.RunCancelled
	st.Cancel = &workflows.ControlRecord{By: "ops", Reason: "wrong customer", At: cancelAt}
	st.Steps[1].State = workflows.StepCancelled
	st.Receipt = &workflows.Receipt{State: workflows.RunCancelled, CancelledBy: "ops", CancelledAt: cancelAt, Reason: "wrong customer",
		Steps: []workflows.ReceiptStep{{Step: 1, Tool: "lookup_order", State: workflows.StepDone, Ended: "done"},
			{Step: 2, Tool: "issue_credit", State: workflows.StepCancelled, Ended: "cancelled"}}}
	return st
}

func cancelRequest() runs.ControlRequest {
	return runs.ControlRequest{Tenant: "acme", RunID: "r1", Action: approvalstore.ActionCancel, By: "ops", Reason: "wrong customer"}
}

// onUpdate expects the update name with its argument, answered by h.
func onUpdate(tc *mocks.Client, name string, arg any, h sdkfake.Update) *mock.Call {
	return tc.On("UpdateWorkflow", mock.Anything, mock.MatchedBy(func(o client.UpdateWorkflowOptions) bool {
		return o.WorkflowID == wid && o.UpdateName == name && len(o.Args) == 1 && o.Args[0] == arg &&
			o.WaitForStage == client.WorkflowUpdateStageCompleted
	})).Return(h, nil)
}

// onDescribe answers whether run r1 exists: running, or unknown to
// Temporal.
func onDescribe(tc *mocks.Client, exists bool) *mock.Call {
	if !exists {
		return tc.On("DescribeWorkflowExecution", mock.Anything, wid, "").Return(nil, serviceerror.NewNotFound("no such workflow"))
	}
	return tc.On("DescribeWorkflowExecution", mock.Anything, wid, "").Return(&workflowservice.DescribeWorkflowExecutionResponse{
		WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}}, nil)
}

func onStatus(tc *mocks.Client, st workflows.Status) *mock.Call {
	return tc.On("QueryWorkflow", mock.Anything, wid, "", workflows.QueryStatus).Return(sdkfake.Value{V: st}, nil)
}

// controls reads run r1's audit rows.
func controls(t *testing.T, pool *pgxpool.Pool) []approvalstore.Control {
	t.Helper()
	rows, err := approvalstore.RunControls(context.Background(), pool, "acme", "r1")
	require.NoError(t, err)
	return rows
}

func approvalState(t *testing.T, pool *pgxpool.Pool) (state, by, comment string) {
	t.Helper()
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT state, coalesce(decided_by, ''), comment FROM approvals
		WHERE tenant = 'acme' AND run_id = 'r1' AND step = 2`).Scan(&state, &by, &comment))
	return state, by, comment
}

// TestOperateCancelWithdrawsAndAudits: a cancel the run takes withdraws,
// in the approvals table, the approval it withdrew, and leaves an
// accepted audit row; the same cancel again is audited as repeated.
func TestOperateCancelWithdrawsAndAudits(t *testing.T) {
	t.Parallel()
	pool, tc, rc := setup(t)
	ctx := context.Background()
	onStatus(tc, waiting()).Once()
	onUpdate(tc, workflows.UpdateCancel, workflows.Control{By: "ops", Reason: "wrong customer"}, sdkfake.Update{V: cancelled()}).Once()

	res, err := rc.Operate(ctx, pool, cancelRequest())
	require.NoError(t, err)
	require.NoError(t, res.Unrecorded)
	assert.False(t, res.Repeated)
	assert.EqualValues(t, 1, res.Withdrawn)
	assert.Equal(t, workflows.RunCancelled, res.Status.State)
	require.NotNil(t, res.Status.Receipt)
	state, by, comment := approvalState(t, pool)
	assert.Equal(t, []string{approvalstore.StateCancelled, "ops", "wrong customer"}, []string{state, by, comment})

	// Again, by someone else: the run answers its first cancel.
	onStatus(tc, cancelled()).Once()
	onUpdate(tc, workflows.UpdateCancel, workflows.Control{By: "vic", Reason: "me too"}, sdkfake.Update{V: cancelled()}).Once()
	again := cancelRequest()
	again.By, again.Reason = "vic", "me too"
	res, err = rc.Operate(ctx, pool, again)
	require.NoError(t, err)
	assert.True(t, res.Repeated)
	assert.Zero(t, res.Withdrawn)

	rows := controls(t, pool)
	require.Len(t, rows, 2)
	assert.Equal(t, []string{"cancel", "ops", "wrong customer", approvalstore.ControlAccepted, "1 pending approval withdrawn"},
		[]string{rows[0].Action, rows[0].Actor, rows[0].Reason, rows[0].Outcome, rows[0].Detail})
	assert.Equal(t, []string{"vic", approvalstore.ControlRepeated}, []string{rows[1].Actor, rows[1].Outcome})
	tc.AssertExpectations(t)
}

// TestOperateRefusals: each refusal is its error, is audited with its
// outcome, and what is forbidden or malformed never reaches the run.
func TestOperateRefusals(t *testing.T) {
	t.Parallel()
	known := func(c *mocks.Client) { onDescribe(c, true) }
	for _, tc := range []struct {
		name     string
		change   func(*runs.ControlRequest)
		temporal func(*mocks.Client)
		want     error
		message  string
		outcome  string
	}{
		{"a reason with an escape", func(r *runs.ControlRequest) { r.Reason = "wrong\x1b[2J" }, known,
			runs.ErrInvalidRequest, "reason holds the control character U+001B", approvalstore.ControlInvalid},
		{"a cancel that says not why", func(r *runs.ControlRequest) { r.Reason = "" }, known,
			runs.ErrInvalidRequest, "reason is required", approvalstore.ControlInvalid},
		{"a cancel whose reason is blank", func(r *runs.ControlRequest) { r.Reason = " \t\n " }, known,
			runs.ErrInvalidRequest, "reason is required", approvalstore.ControlInvalid},
		{"a message without its id", func(r *runs.ControlRequest) { r.Action, r.Text = approvalstore.ActionMessage, "hello" }, known,
			runs.ErrInvalidRequest, "message_id is required", approvalstore.ControlInvalid},
		{"what the caller found wrong", func(r *runs.ControlRequest) { r.Invalid = assert.AnError }, known,
			runs.ErrInvalidRequest, assert.AnError.Error(), approvalstore.ControlInvalid},
		{"a sender who may not", func(r *runs.ControlRequest) { r.Forbidden, r.Reason = assert.AnError, "" }, known,
			runs.ErrForbidden, assert.AnError.Error(), approvalstore.ControlForbidden},
		{"a sender who may not, Temporal out of reach", func(r *runs.ControlRequest) { r.Forbidden = assert.AnError }, func(c *mocks.Client) {
			c.On("DescribeWorkflowExecution", mock.Anything, wid, "").Return(nil, serviceerror.NewUnavailable("connection refused"))
		}, runs.ErrForbidden, assert.AnError.Error(), approvalstore.ControlForbidden},
		{"Temporal out of reach", nil, func(c *mocks.Client) {
			c.On("QueryWorkflow", mock.Anything, wid, "", workflows.QueryStatus).Return(nil, serviceerror.NewUnavailable("connection refused"))
		}, nil, "connection refused", approvalstore.ControlUnavailable},
		{"a pause of a cancelled run", func(r *runs.ControlRequest) { r.Action = approvalstore.ActionPause }, func(c *mocks.Client) {
			onStatus(c, cancelled())
			onUpdate(c, workflows.UpdatePause, workflows.Control{By: "ops", Reason: "wrong customer"}, sdkfake.Update{
				Err: temporal.NewApplicationError("the run is cancelled by ops; it can no longer be paused", workflows.ErrTypeUpdateConflict)})
		}, runs.ErrRefused, "refused by the run: the run is cancelled by ops; it can no longer be paused", approvalstore.ControlRefused},
		{"a cancel of a completed run", nil, func(c *mocks.Client) {
			done := waiting()
			done.State = workflows.RunCompleted
			onStatus(c, done)
			onUpdate(c, workflows.UpdateCancel, workflows.Control{By: "ops", Reason: "wrong customer"}, sdkfake.Update{
				Err: serviceerror.NewNotFound("workflow execution already completed")})
			c.On("DescribeWorkflowExecution", mock.Anything, wid, "").Return(&workflowservice.DescribeWorkflowExecutionResponse{
				WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED}}, nil)
		}, runs.ErrRefused, "run r1 has ended: it is completed", approvalstore.ControlRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, temporal, err := operate(t, tc.change, tc.temporal)
			require.Error(t, err)
			if tc.want != nil {
				assert.ErrorIs(t, err, tc.want)
			}
			assert.Contains(t, err.Error(), tc.message)
			rows := controls(t, pool)
			require.Len(t, rows, 1, "one audit row")
			assert.Equal(t, tc.outcome, rows[0].Outcome)
			assert.Contains(t, rows[0].Detail, tc.message)
			state, _, _ := approvalState(t, pool)
			assert.Equal(t, approvalstore.StatePending, state, "nothing withdrawn")
			temporal.AssertExpectations(t)
		})
	}
}

// operate sends run r1's cancel, changed by change when given, to a
// Temporal that given sets up.
func operate(t *testing.T, change func(*runs.ControlRequest), given func(*mocks.Client)) (*pgxpool.Pool, *mocks.Client, error) {
	t.Helper()
	pool, temporal, rc := setup(t)
	if given != nil {
		given(temporal)
	}
	r := cancelRequest()
	if change != nil {
		change(&r)
	}
	_, err := rc.Operate(context.Background(), pool, r)
	return pool, temporal, err
}

// TestOperateLeavesNoRowForAnUnknownRun: a request naming a run Temporal
// does not know is ErrNotFound and leaves no row, whether it would have
// been sent, refused for its values or refused to its sender.
func TestOperateLeavesNoRowForAnUnknownRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		change   func(*runs.ControlRequest)
		temporal func(*mocks.Client)
	}{
		{"a cancel", nil, func(c *mocks.Client) {
			c.On("QueryWorkflow", mock.Anything, wid, "", workflows.QueryStatus).Return(nil, serviceerror.NewNotFound("no such workflow"))
		}},
		{"a message", func(r *runs.ControlRequest) {
			r.Action, r.MessageID, r.Text = approvalstore.ActionMessage, "m1", "hello"
		}, func(c *mocks.Client) {
			c.On("UpdateWorkflow", mock.Anything, mock.Anything).Return(nil, serviceerror.NewNotFound("no such workflow"))
			onDescribe(c, false)
			c.On("QueryWorkflow", mock.Anything, wid, "", workflows.QueryStatus).Return(nil, serviceerror.NewNotFound("no such workflow"))
		}},
		{"a cancel that says not why", func(r *runs.ControlRequest) { r.Reason = " " }, func(c *mocks.Client) { onDescribe(c, false) }},
		{"a sender who may not", func(r *runs.ControlRequest) { r.Forbidden = assert.AnError }, func(c *mocks.Client) { onDescribe(c, false) }},
		{"a run id no run can have", func(r *runs.ControlRequest) { r.RunID = "" }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, temporal, err := operate(t, tc.change, tc.temporal)
			require.ErrorIs(t, err, runs.ErrNotFound)
			var n int
			require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM run_controls`).Scan(&n))
			assert.Zero(t, n, "no audit row")
			temporal.AssertExpectations(t)
		})
	}
}

// TestOperateMessage: a message goes to the run as its update without
// asking its status first; a repeat is audited as repeated.
func TestOperateMessage(t *testing.T) {
	t.Parallel()
	pool, tc, rc := setup(t)
	m := workflows.Message{MessageID: "m1", Text: "the customer called back", By: "ops"}
	accepted := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	onUpdate(tc, workflows.UpdateMessage, m, sdkfake.Update{V: workflows.MessageReceipt{MessageID: "m1", Position: 1, AcceptedAt: accepted}}).Once()
	onUpdate(tc, workflows.UpdateMessage, m, sdkfake.Update{V: workflows.MessageReceipt{MessageID: "m1", Position: 1, AcceptedAt: accepted,
		Duplicate: true}}).Once()
	r := runs.ControlRequest{Tenant: "acme", RunID: "r1", Action: approvalstore.ActionMessage, By: "ops", MessageID: "m1",
		Text: "the customer called back"}

	res, err := rc.Operate(context.Background(), pool, r)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Receipt.Position)
	assert.False(t, res.Repeated)
	res, err = rc.Operate(context.Background(), pool, r)
	require.NoError(t, err)
	assert.True(t, res.Repeated)

	rows := controls(t, pool)
	require.Len(t, rows, 2)
	assert.Equal(t, []string{"message", "m1", approvalstore.ControlAccepted}, []string{rows[0].Action, rows[0].MessageID, rows[0].Outcome})
	assert.Equal(t, approvalstore.ControlRepeated, rows[1].Outcome)
	tc.AssertExpectations(t)
}
