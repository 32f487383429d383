package approvalstore_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/approvalstore"
)

// pendingStep records step n of run runID of tenant acme, waiting for
// approval.
func pendingStep(t *testing.T, pool *pgxpool.Pool, runID string, n int64) {
	t.Helper()
	require.NoError(t, approvalstore.RecordPending(context.Background(), pool, approvalstore.Request{
		Tenant: "acme", RunID: runID, Step: n, Tool: "issue_credit", Args: json.RawMessage(`{"order_id":"1001"}`),
		ArgsHash: hashA, RequestedAt: t0, Deadline: t0.Add(72 * time.Hour),
	}))
}

// row reads the state, decided_by, comment and decision_mismatch of step
// n of run runID.
func row(t *testing.T, pool *pgxpool.Pool, runID string, n int64) (state, by, comment string, mismatch bool) {
	t.Helper()
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT state, coalesce(decided_by, ''), comment, decision_mismatch
		FROM approvals WHERE tenant = 'acme' AND run_id = $1 AND step = $2`, runID, n).Scan(&state, &by, &comment, &mismatch))
	return state, by, comment, mismatch
}

// TestWithdrawRunWithdrawsTheStepsNamed: a cancel withdraws the pending
// approvals of the steps the run cancelled, and nothing else: not a step
// the run recorded otherwise, not another pending step, not another run's.
func TestWithdrawRunWithdrawsTheStepsNamed(t *testing.T) {
	t.Parallel()
	pool := setup(t) // r1 step 2
	ctx := context.Background()
	pendingStep(t, pool, "r1", 3)
	pendingStep(t, pool, "r1", 4)
	pendingStep(t, pool, "r2", 2)
	decided := t0.Add(time.Hour)
	_, err := approvalstore.RecordOutcome(ctx, pool, approvalstore.Approval{Request: approvalstore.Request{
		Tenant: "acme", RunID: "r1", Step: 3,
	}, State: approvalstore.StateApproved, DecidedBy: "dana", DecidedAt: &decided})
	require.NoError(t, err)

	n, err := approvalstore.WithdrawRun(ctx, pool, "acme", "r1", []int64{2, 3}, "ops", t0.Add(2*time.Hour), "wrong customer")
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "only step 2 was pending among those named")

	state, by, comment, mismatch := row(t, pool, "r1", 2)
	assert.Equal(t, []any{approvalstore.StateCancelled, "ops", "wrong customer", false}, []any{state, by, comment, mismatch})
	state, by, _, _ = row(t, pool, "r1", 3)
	assert.Equal(t, []any{approvalstore.StateApproved, "dana"}, []any{state, by}, "a step approved before the cancel stays approved")
	state, _, _, _ = row(t, pool, "r1", 4)
	assert.Equal(t, approvalstore.StatePending, state, "a step not named")
	state, _, _, _ = row(t, pool, "r2", 2)
	assert.Equal(t, approvalstore.StatePending, state, "another run's step")

	n, err = approvalstore.WithdrawRun(ctx, pool, "acme", "r1", []int64{2}, "ops", t0.Add(3*time.Hour), "again")
	require.NoError(t, err)
	assert.Zero(t, n, "a repeat changes nothing")
	_, _, comment, _ = row(t, pool, "r1", 2)
	assert.Equal(t, "wrong customer", comment)
}

// TestDecisionOnAWithdrawnStepIsRefused: once a cancel withdrew a step's
// approval, a decision is refused as withdrawn and audited, whether the
// step had a decision of record or not.
func TestDecisionOnAWithdrawnStepIsRefused(t *testing.T) {
	t.Parallel()
	for _, decidedFirst := range []bool{false, true} {
		pool := setup(t)
		ctx := context.Background()
		if decidedFirst {
			_, err := approvalstore.Decide(ctx, pool, request())
			require.NoError(t, err)
		}
		_, err := approvalstore.WithdrawRun(ctx, pool, "acme", "r1", []int64{2}, "ops", t0.Add(2*time.Hour), "wrong customer")
		require.NoError(t, err)

		_, err = approvalstore.Decide(ctx, pool, request())
		var refused *approvalstore.RefusedError
		require.ErrorAs(t, err, &refused, "decided first: %v", decidedFirst)
		assert.ErrorIs(t, err, approvalstore.ErrWithdrawn)
		assert.Equal(t, "step 2 of run r1 is not pending: its approval was withdrawn because the run was cancelled by ops at "+
			"2026-12-01T11:00:00Z (wrong customer); a decision can no longer be recorded", refused.Message)
		assert.Equal(t, 1, audited(t, pool, "outcome = 'not_pending' AND detail = 'the approval was withdrawn: the run was cancelled'"))
	}
}

// TestRecordOutcomeOfACancelledStep: the run records a withdrawal as
// cancelled, never as a mismatch with a decision of record (no person
// needs to look at it), and a row the service withdrew first is left as
// it was.
func TestRecordOutcomeOfACancelledStep(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := context.Background()
	pendingStep(t, pool, "r1", 3)
	_, err := approvalstore.Decide(ctx, pool, request())
	require.NoError(t, err, "a decision of record the run never applied")
	at := t0.Add(2 * time.Hour)
	cancelled := approvalstore.Approval{Request: approvalstore.Request{
		Tenant: "acme", RunID: "r1", Step: 2,
	}, State: approvalstore.StateCancelled, DecidedBy: "ops", DecidedAt: &at, Comment: "cancelled: wrong customer"}

	pending, err := approvalstore.RecordOutcome(ctx, pool, cancelled)
	require.NoError(t, err)
	assert.True(t, pending)
	state, by, _, mismatch := row(t, pool, "r1", 2)
	assert.Equal(t, []any{approvalstore.StateCancelled, "ops", false}, []any{state, by, mismatch})
	needs, err := approvalstore.ListNeedsResolution(ctx, pool, approvalstore.Page{Tenant: "acme", Now: at, Cutoff: at, Limit: 10})
	require.NoError(t, err)
	assert.Empty(t, needs)

	_, err = approvalstore.WithdrawRun(ctx, pool, "acme", "r1", []int64{3}, "ops", at, "wrong customer")
	require.NoError(t, err)
	cancelled.Step, cancelled.Comment = 3, "recorded by the run"
	pending, err = approvalstore.RecordOutcome(ctx, pool, cancelled)
	require.NoError(t, err)
	assert.False(t, pending, "the service withdrew it first")
	_, _, comment, _ := row(t, pool, "r1", 3)
	assert.Equal(t, "wrong customer", comment)
}

// TestListWithdrawn lists the approvals withdrawn since a time, newest
// first, with their decisions of record.
func TestListWithdrawn(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := context.Background()
	pendingStep(t, pool, "r2", 1)
	pendingStep(t, pool, "r3", 1)
	_, err := approvalstore.Decide(ctx, pool, request())
	require.NoError(t, err)
	_, err = approvalstore.WithdrawRun(ctx, pool, "acme", "r1", []int64{2}, "ops", t0.Add(2*time.Hour), "a")
	require.NoError(t, err)
	_, err = approvalstore.WithdrawRun(ctx, pool, "acme", "r2", []int64{1}, "ops", t0.Add(3*time.Hour), "b")
	require.NoError(t, err)
	_, err = approvalstore.WithdrawRun(ctx, pool, "acme", "r3", []int64{1}, "ops", t0.Add(-time.Hour), "too old")
	require.NoError(t, err)

	list, err := approvalstore.ListWithdrawn(ctx, pool, "acme", t0, 10)
	require.NoError(t, err)
	require.Len(t, list, 2)
	assert.Equal(t, []string{"r2", "r1"}, []string{list[0].RunID, list[1].RunID})
	assert.Nil(t, list[0].Record)
	require.NotNil(t, list[1].Record)
	assert.Equal(t, "dana", list[1].Record.Approver)

	other, err := approvalstore.ListWithdrawn(ctx, pool, "globex", t0, 10)
	require.NoError(t, err)
	assert.Empty(t, other)
}

// TestRecordControlKeepsEveryRequest: every request leaves its row, what
// it sent escaped and cut when it is not text within the bounds.
func TestRecordControlKeepsEveryRequest(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := context.Background()
	for _, c := range []approvalstore.Control{
		{Tenant: "acme", RunID: "r1", Action: approvalstore.ActionCancel, Actor: "ops", Reason: "wrong customer",
			Outcome: approvalstore.ControlAccepted, Detail: "1 pending approval withdrawn"},
		{Tenant: "acme", RunID: "r1", Action: approvalstore.ActionMessage, Actor: "ops", MessageID: "m1",
			Outcome: approvalstore.ControlRefused, Detail: "the run follows a script"},
		{Tenant: "acme", RunID: "r1", Action: approvalstore.ActionPause, Actor: "ops", Reason: "stop\x1b[2J\x00",
			Outcome: approvalstore.ControlInvalid},
	} {
		require.NoError(t, approvalstore.RecordControl(ctx, pool, c))
	}
	got, err := approvalstore.RunControls(ctx, pool, "acme", "r1")
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, []string{"cancel", "message", "pause"}, []string{got[0].Action, got[1].Action, got[2].Action})
	assert.Equal(t, "wrong customer", got[0].Reason)
	assert.Equal(t, "m1", got[1].MessageID)
	assert.Equal(t, `stop\u001b[2J\u0000`, got[2].Reason, "escaped, not refused")

	err = approvalstore.RecordControl(ctx, pool, approvalstore.Control{Tenant: "acme", RunID: "r1", Action: "delete", Actor: "ops",
		Outcome: approvalstore.ControlAccepted})
	require.Error(t, err, "the table knows its actions")
}
