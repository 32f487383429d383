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
	"github.com/oncerun/oncerun/internal/pgtest"
)

// setupUnresolved returns a pool on a database of the test's own holding
// round 1 of step 2 of run r1 of tenant acme, pending resolution.
func setupUnresolved(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.NewPool(t, 4)
	require.NoError(t, approvalstore.RecordUnresolved(context.Background(), pool, approvalstore.Resolution{
		Tenant: "acme", RunID: "r1", Step: 2, Round: 1, Tool: "refund_payment", Key: "k", Args: json.RawMessage(`{}`),
		ArgsHash: hashA, FirstSentAt: t0, Known: "the provider did not answer", RequestedAt: t0, Deadline: t0.Add(time.Hour),
	}))
	return pool
}

// answer is dana's answer that the refund was applied.
func answer() approvalstore.ResolveRequest {
	return approvalstore.ResolveRequest{
		StepRequest: approvalstore.StepRequest{Tenant: "acme", RunID: "r1", Step: 2, By: "dana", Role: "approver", May: true,
			RemoteAddr: "127.0.0.1", Via: approvalstore.ViaAPI},
		Outcome: approvalstore.ResolutionApplied, Result: json.RawMessage(`{"refund_id": "re_1", "amount": 5}`), Note: "in the dashboard",
	}
}

func answers(t *testing.T, pool *pgxpool.Pool, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM resolution_decisions WHERE run_id = 'r1' AND `+where, args...).Scan(&n))
	return n
}

// TestResolveRefusals: each refusal is its sentinel error and leaves the
// row the order of the checks calls for.
func TestResolveRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		change  func(*approvalstore.ResolveRequest)
		want    error
		outcome string // "" for no row
	}{
		{"another tenant's step", func(r *approvalstore.ResolveRequest) { r.Tenant = "globex" }, approvalstore.ErrNotFound, ""},
		{"a step with no round", func(r *approvalstore.ResolveRequest) { r.Step = 3 }, approvalstore.ErrNotFound, ""},
		{"a role that may not answer", func(r *approvalstore.ResolveRequest) { r.May = false }, approvalstore.ErrForbidden, approvalstore.OutcomeForbidden},
		{"an outcome that is neither", func(r *approvalstore.ResolveRequest) { r.Outcome = "maybe" }, approvalstore.ErrInvalid, approvalstore.OutcomeInvalid},
		{"a round the step does not have", func(r *approvalstore.ResolveRequest) { r.Round = 7 }, approvalstore.ErrNotPending, approvalstore.OutcomeNotPending},
		{"a round past the highest", func(r *approvalstore.ResolveRequest) { r.Round = approvalstore.MaxRound + 1 }, approvalstore.ErrInvalid, approvalstore.OutcomeInvalid},
		{"a round past the highest, another tenant's step", func(r *approvalstore.ResolveRequest) {
			r.Round, r.Tenant = approvalstore.MaxRound+1, "globex"
		}, approvalstore.ErrNotFound, ""},
		{"a round past the highest, a missing step", func(r *approvalstore.ResolveRequest) {
			r.Round, r.Step = approvalstore.MaxRound+1, 3
		}, approvalstore.ErrNotFound, ""},
		{"a result beyond the range of a double", func(r *approvalstore.ResolveRequest) {
			r.Result = json.RawMessage(`{"amount":1e400}`)
		}, approvalstore.ErrInvalid, approvalstore.OutcomeInvalid},
		{"a result too small for a double", func(r *approvalstore.ResolveRequest) {
			r.Result = json.RawMessage(`{"amount":1e-400}`)
		}, approvalstore.ErrInvalid, approvalstore.OutcomeInvalid},
		{"a result with a number PostgreSQL cannot hold", func(r *approvalstore.ResolveRequest) {
			r.Result = json.RawMessage(`{"amount":1e200000}`)
		}, approvalstore.ErrInvalid, approvalstore.OutcomeInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := setupUnresolved(t)
			r := answer()
			tc.change(&r)
			_, err := approvalstore.Resolve(context.Background(), pool, r)
			require.ErrorIs(t, err, tc.want)
			if tc.outcome == "" {
				assert.Zero(t, answers(t, pool, "true"))
				return
			}
			assert.Equal(t, 1, answers(t, pool, "true"))
			assert.Equal(t, 1, answers(t, pool, "outcome = $1", tc.outcome))
		})
	}
}

// TestResolveRecordsOneAnswerOfRecord: the first answer is accepted; the
// same one again (the same JSON, spelled otherwise) is a repeat; another
// result is a conflict. Once the run has recorded the round, a repeat is
// not sent again.
func TestResolveRecordsOneAnswerOfRecord(t *testing.T) {
	t.Parallel()
	pool := setupUnresolved(t)
	ctx := context.Background()

	res, err := approvalstore.Resolve(ctx, pool, answer())
	require.NoError(t, err)
	assert.True(t, res.Deliver)
	assert.False(t, res.Repeated)
	rec := res.Decision
	assert.Equal(t, 1, rec.Round, "the latest round")
	assert.JSONEq(t, `{"refund_id":"re_1","amount":5}`, string(rec.Result))

	again := answer()
	again.Result, again.Note, again.By = json.RawMessage(`{"amount":5,"refund_id":"re_1"}`), "me too", "olga"
	res, err = approvalstore.Resolve(ctx, pool, again)
	require.NoError(t, err)
	assert.True(t, res.Repeated)
	assert.True(t, res.Deliver)
	assert.Equal(t, "dana", res.Decision.Resolver)

	other := answer()
	other.Result = json.RawMessage(`{"refund_id":"re_2"}`)
	_, err = approvalstore.Resolve(ctx, pool, other)
	require.ErrorIs(t, err, approvalstore.ErrConflict)
	assert.Contains(t, err.Error(), "already answered applied with another result by dana")

	at := t0.Add(time.Hour)
	require.NoError(t, approvalstore.RecordResolved(ctx, pool, approvalstore.Resolution{Tenant: "acme", RunID: "r1", Step: 2, Round: 1,
		State: approvalstore.ResolutionApplied, ResolvedBy: "dana", ResolvedAt: &at, Result: rec.Result}))
	res, err = approvalstore.Resolve(ctx, pool, answer())
	require.NoError(t, err)
	assert.True(t, res.Repeated)
	assert.False(t, res.Deliver)

	assert.Equal(t, 1, answers(t, pool, "outcome = 'accepted'"))
	assert.Equal(t, 2, answers(t, pool, "outcome = 'repeated'"))
	assert.Equal(t, 1, answers(t, pool, "outcome = 'conflict'"))
}

// TestResolveRepeatsAnAnswerWithAnIntegerBeyondDoubles: provider ids are
// often 64-bit integers; the same answer again is a repeat, and a
// neighbouring id, which a double cannot tell apart, is another result.
func TestResolveRepeatsAnAnswerWithAnIntegerBeyondDoubles(t *testing.T) {
	t.Parallel()
	pool := setupUnresolved(t)
	ctx := context.Background()
	first := answer()
	first.Result = json.RawMessage(`{"id":9007199254740993}`)
	res, err := approvalstore.Resolve(ctx, pool, first)
	require.NoError(t, err)
	assert.Contains(t, string(res.Decision.Result), "9007199254740993", "stored with its digits")

	res, err = approvalstore.Resolve(ctx, pool, first)
	require.NoError(t, err)
	assert.True(t, res.Repeated)

	neighbour := answer()
	neighbour.Result = json.RawMessage(`{"id":9007199254740992}`)
	_, err = approvalstore.Resolve(ctx, pool, neighbour)
	require.ErrorIs(t, err, approvalstore.ErrConflict)
	assert.Equal(t, 1, answers(t, pool, "outcome = 'repeated'"))
	assert.Equal(t, 1, answers(t, pool, "outcome = 'conflict'"))
}

// TestResolveARoundRecordedWithoutAnAnswer: a round the run recorded with
// no answer of record (answered by a release before every answer was
// recorded) is not pending; nothing adopts the run's record.
func TestResolveARoundRecordedWithoutAnAnswer(t *testing.T) {
	t.Parallel()
	pool := setupUnresolved(t)
	ctx := context.Background()
	at := t0.Add(time.Hour)
	require.NoError(t, approvalstore.RecordResolved(ctx, pool, approvalstore.Resolution{Tenant: "acme", RunID: "r1", Step: 2, Round: 1,
		State: approvalstore.ResolutionNotApplied, ResolvedBy: "sre", ResolvedAt: &at}))

	_, err := approvalstore.Resolve(ctx, pool, answer())
	require.ErrorIs(t, err, approvalstore.ErrNotPending)
	assert.Contains(t, err.Error(), "the run recorded it as not_applied")
	assert.Equal(t, 1, answers(t, pool, "outcome = 'not_pending'"))
}
