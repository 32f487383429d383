package approvalstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/workflows"
)

var (
	hashA = strings.Repeat("a", 64)
	hashB = strings.Repeat("b", 64)
	t0    = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
)

// setup returns a pool on a database of the test's own holding the pending
// step 2 of run r1 of tenant acme (args hash hashA, deadline t0 + 72h).
func setup(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.NewPool(t, 4)
	require.NoError(t, approvalstore.RecordPending(context.Background(), pool, approvalstore.Request{
		Tenant: "acme", RunID: "r1", Step: 2, Tool: "issue_credit", Args: json.RawMessage(`{"order_id":"1001"}`),
		ArgsHash: hashA, Goal: "refund", Reason: "amount", RequestedBy: "ops", RequestedAt: t0,
		Deadline: t0.Add(72 * time.Hour),
	}))
	return pool
}

// request is dana's approval of the pending step, made an hour after it
// paused.
func request() approvalstore.DecisionRequest {
	return approvalstore.DecisionRequest{
		StepRequest: approvalstore.StepRequest{Tenant: "acme", RunID: "r1", Step: 2, By: "dana", Role: "approver", May: true,
			RemoteAddr: "127.0.0.1", UserAgent: "test", Via: approvalstore.ViaAPI},
		Decision: approvalstore.DecisionApprove, ArgsHash: hashA, Comment: "ok", Now: t0.Add(time.Hour),
	}
}

// audited counts the audit rows of run r1 that match where.
func audited(t *testing.T, pool *pgxpool.Pool, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM approval_decisions WHERE run_id = 'r1' AND `+where, args...).Scan(&n))
	return n
}

// TestDecideRefusals: each refusal is its sentinel error, says why, and
// leaves the audit row the order of the checks calls for (none for a step
// the tenant does not have).
func TestDecideRefusals(t *testing.T) {
	t.Parallel()
	invalid := errors.New("comment holds the control character U+001B")
	for _, tc := range []struct {
		name    string
		change  func(*approvalstore.DecisionRequest)
		want    error
		message string
		outcome string // "" for no row
	}{
		{"a run id no key can hold", func(r *approvalstore.DecisionRequest) { r.RunID = "" }, approvalstore.ErrNotFound, "has no step 2", ""},
		{"another tenant's step", func(r *approvalstore.DecisionRequest) { r.Tenant = "globex" }, approvalstore.ErrNotFound, `run "r1" has no step 2`, ""},
		{"a step with no row", func(r *approvalstore.DecisionRequest) { r.Step = 3 }, approvalstore.ErrNotFound, "has no step 3", ""},
		{"a role that may not decide", func(r *approvalstore.DecisionRequest) { r.May, r.Role = false, "viewer" },
			approvalstore.ErrForbidden, "dana is a viewer", approvalstore.OutcomeForbidden},
		{"what the caller found wrong", func(r *approvalstore.DecisionRequest) { r.Invalid = invalid },
			approvalstore.ErrInvalid, invalid.Error(), approvalstore.OutcomeInvalid},
		{"a decision that is neither", func(r *approvalstore.DecisionRequest) { r.Decision = "maybe" },
			approvalstore.ErrInvalid, `decision "maybe" is not approve, reject or edit`, approvalstore.OutcomeInvalid},
		{"a viewer's decision that is neither", func(r *approvalstore.DecisionRequest) {
			r.Decision, r.May, r.Role = "", false, "viewer"
		}, approvalstore.ErrForbidden, "dana is a viewer", approvalstore.OutcomeInvalid},
		{"another args hash", func(r *approvalstore.DecisionRequest) { r.ArgsHash = hashB },
			approvalstore.ErrArgsHashMismatch, "is not the pending step's " + hashA, approvalstore.OutcomeArgsMismatch},
		{"the deadline passed", func(r *approvalstore.DecisionRequest) { r.Now = t0.Add(72 * time.Hour) },
			approvalstore.ErrNotPending, "its deadline 2026-12-04T09:00:00Z has passed", approvalstore.OutcomeNotPending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := setup(t)
			r := request()
			tc.change(&r)
			_, err := approvalstore.Decide(context.Background(), pool, r)
			require.ErrorIs(t, err, tc.want)
			var refused *approvalstore.RefusedError
			require.ErrorAs(t, err, &refused)
			assert.Contains(t, err.Error(), tc.message)
			if tc.want == approvalstore.ErrInvalid && r.Invalid != nil {
				assert.ErrorIs(t, err, invalid, "the caller's own error stays in the chain")
			}
			if tc.outcome == "" {
				assert.Zero(t, audited(t, pool, "true"), "no row for a step the tenant does not have")
				return
			}
			assert.Equal(t, 1, audited(t, pool, "true"))
			assert.Equal(t, 1, audited(t, pool, "outcome = $1 AND approver = 'dana' AND via = 'api'", tc.outcome))
			assert.Zero(t, audited(t, pool, "outcome = 'accepted'"))
		})
	}
}

// TestDecideRecordsOneDecisionOfRecord: the first decision is accepted and
// is to be delivered; the same again is a repeat of it, delivered again
// while the step is pending; another is a conflict naming the first.
func TestDecideRecordsOneDecisionOfRecord(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := context.Background()

	d, err := approvalstore.Decide(ctx, pool, request())
	require.NoError(t, err)
	assert.True(t, d.Deliver)
	assert.False(t, d.Repeated)
	rec := d.Decision
	assert.NotZero(t, rec.ID)
	assert.Equal(t, []string{"acme", "r1", "approve", "accepted", hashA, "dana", "approver", "ok", "api"},
		[]string{rec.Tenant, rec.RunID, rec.Decision, rec.Outcome, rec.ArgsHash, rec.Approver, rec.Role, rec.Comment, rec.Via})
	assert.EqualValues(t, 2, rec.Step)

	again := request()
	again.By, again.Via = "olga", approvalstore.ViaCLI
	d, err = approvalstore.Decide(ctx, pool, again)
	require.NoError(t, err)
	assert.True(t, d.Repeated)
	assert.True(t, d.Deliver, "the step is still pending: send it again")
	assert.Equal(t, rec, d.Decision, "the decision of record is dana's")

	other := request()
	other.Decision, other.By = approvalstore.DecisionReject, "olga"
	_, err = approvalstore.Decide(ctx, pool, other)
	require.ErrorIs(t, err, approvalstore.ErrConflict)
	assert.Contains(t, err.Error(), "was already approved by dana at ")

	stale := request()
	stale.ArgsHash = hashB
	_, err = approvalstore.Decide(ctx, pool, stale)
	require.ErrorIs(t, err, approvalstore.ErrArgsHashMismatch, "a repeat must name the same arguments")

	assert.Equal(t, 1, audited(t, pool, "outcome = 'accepted'"))
	assert.Equal(t, 1, audited(t, pool, "outcome = 'repeated' AND approver = 'olga' AND via = 'cli'"))
	assert.Equal(t, 1, audited(t, pool, "outcome = 'conflict' AND decision = 'reject'"))
	assert.Equal(t, 1, audited(t, pool, "outcome = 'args_mismatch'"))

	// Once the run has applied it, a repeat is not sent again.
	applied, err := approvalstore.RecordOutcome(ctx, pool, approvalstore.Approval{Request: approvalstore.Request{
		Tenant: "acme", RunID: "r1", Step: 2,
	}, State: approvalstore.StateApproved, DecidedBy: "dana", DecidedAt: &rec.DecidedAt, Comment: "ok"})
	require.NoError(t, err)
	require.True(t, applied)
	d, err = approvalstore.Decide(ctx, pool, request())
	require.NoError(t, err)
	assert.True(t, d.Repeated)
	assert.False(t, d.Deliver)
}

// TestDecideAfterTheRunRecordedAnotherOutcome: a decision of record the
// run recorded otherwise (its deadline came first) is neither repeated nor
// changed; the row is marked for needs_resolution.
func TestDecideAfterTheRunRecordedAnotherOutcome(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := context.Background()
	_, err := approvalstore.Decide(ctx, pool, request())
	require.NoError(t, err)
	expired := t0.Add(72 * time.Hour)
	_, err = approvalstore.RecordOutcome(ctx, pool, approvalstore.Approval{Request: approvalstore.Request{
		Tenant: "acme", RunID: "r1", Step: 2,
	}, State: approvalstore.StateExpired, DecidedAt: &expired})
	require.NoError(t, err)

	l, err := approvalstore.Lookup(ctx, pool, "acme", "r1", 2)
	require.NoError(t, err)
	assert.True(t, l.DecisionMismatch)
	require.NotNil(t, l.Record)
	assert.Equal(t, "dana", l.Record.Approver)

	for _, decision := range []string{approvalstore.DecisionApprove, approvalstore.DecisionReject} {
		r := request()
		r.Decision = decision
		_, err = approvalstore.Decide(ctx, pool, r)
		require.ErrorIs(t, err, approvalstore.ErrResolvedOtherwise, decision)
		assert.Contains(t, err.Error(), "the run recorded it as expired")
	}
	assert.Equal(t, 2, audited(t, pool, "outcome = 'not_pending'"))
}

// TestDecideAStepDecidedWithoutARecord: a step the run recorded as
// decided with no decision of record (decided by a release before every
// decision was recorded) is not pending; nothing adopts the run's record.
func TestDecideAStepDecidedWithoutARecord(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := context.Background()
	at := t0.Add(time.Hour)
	_, err := approvalstore.RecordOutcome(ctx, pool, approvalstore.Approval{Request: approvalstore.Request{
		Tenant: "acme", RunID: "r1", Step: 2,
	}, State: approvalstore.StateApproved, DecidedBy: "sam", DecidedAt: &at})
	require.NoError(t, err)

	_, err = approvalstore.Decide(ctx, pool, request())
	require.ErrorIs(t, err, approvalstore.ErrNotPending)
	assert.Contains(t, err.Error(), "is not pending: it is approved")
	assert.Equal(t, 1, audited(t, pool, "outcome = 'not_pending'"))
	assert.Zero(t, audited(t, pool, "outcome = 'accepted'"))
}

// TestDecideTwoApproversAtOnce: however many decide at once, one decision
// is accepted; the others are repeats of it or conflicts with it.
func TestDecideTwoApproversAtOnce(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	const n = 8
	results := make([]approvalstore.Decided, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := request()
			if i%2 == 1 {
				r.Decision = approvalstore.DecisionReject
			}
			results[i], errs[i] = approvalstore.Decide(context.Background(), pool, r)
		})
	}
	wg.Wait()
	accepted := 0
	for i := range n {
		if errs[i] != nil {
			require.ErrorIs(t, errs[i], approvalstore.ErrConflict)
			continue
		}
		if !results[i].Repeated {
			accepted++
		}
	}
	assert.Equal(t, 1, accepted)
	assert.Equal(t, 1, audited(t, pool, "outcome = 'accepted'"))
	assert.Equal(t, n, audited(t, pool, "true"))
}

// TestBoundsAreTheClients: what the tables record of people's text is
// bounded as the clients bound it.
func TestBoundsAreTheClients(t *testing.T) {
	t.Parallel()
	assert.Equal(t, workflows.MaxApproverBytes, approvalstore.MaxNameBytes)
	assert.Equal(t, workflows.MaxCommentBytes, approvalstore.MaxCommentBytes)
	assert.Equal(t, workflows.MaxResultBytes, approvalstore.MaxResultBytes)
}
