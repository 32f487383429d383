package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/idempotency"
)

// expireLease moves the key's lease into the past, as if its holder had
// stalled past the lease.
func (f fixture) expireLease(t *testing.T, c idempotency.Claim) {
	t.Helper()
	tag, err := f.pool.Exec(context.Background(),
		"UPDATE idempotency_keys SET lease_expiry = now() - interval '1 second' WHERE tenant = $1 AND key = $2",
		c.Key.Tenant, c.Key.String())
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

func (f fixture) state(t *testing.T, c idempotency.Claim) (state, owner string, attempts int) {
	t.Helper()
	require.NoError(t, f.pool.QueryRow(context.Background(),
		"SELECT state, lease_owner, attempts FROM idempotency_keys WHERE tenant = $1 AND key = $2",
		c.Key.Tenant, c.Key.String()).Scan(&state, &owner, &attempts))
	return state, owner, attempts
}

func TestBeginCompleteReplay(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":500}`)

	b, err := f.store.Begin(ctx, c)
	require.NoError(t, err)
	require.NotNil(t, b.Lease)
	assert.EqualValues(t, 1, b.Lease.Attempt)
	assert.Equal(t, "worker-a", b.Lease.Owner)
	state, _, _ := f.state(t, c)
	assert.Equal(t, "in_flight", state, "the claim is committed before the effect")

	out, err := f.store.Complete(ctx, b.Lease, json.RawMessage(`{"refund_id":"re_1"}`))
	require.NoError(t, err)
	assert.JSONEq(t, `{"refund_id":"re_1"}`, string(out.Result))

	again, err := f.store.Begin(ctx, c)
	require.NoError(t, err)
	assert.Nil(t, again.Lease, "a completed key hands out no lease")
	assert.True(t, again.Outcome.Replayed)
	assert.Equal(t, string(out.Result), string(again.Outcome.Result))
}

func TestBeginLiveLeaseIsInFlight(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	other := newStore(t, f.pool, "worker-b")
	c := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":500}`)
	b, err := f.store.Begin(ctx, c)
	require.NoError(t, err)

	_, err = other.Begin(ctx, c)
	require.ErrorIs(t, err, idempotency.ErrInFlight)
	var inFlight *idempotency.InFlightError
	require.ErrorAs(t, err, &inFlight)
	assert.Equal(t, "worker-a", inFlight.Owner)
	assert.WithinDuration(t, b.Lease.Expiry, inFlight.LeaseExpiry, 0)

	_, err = other.Do(ctx, c, nil)
	require.ErrorIs(t, err, idempotency.ErrInFlight, "a transactional duplicate does not run either")
	_, _, attempts := f.state(t, c)
	assert.Equal(t, 1, attempts)
}

func TestExpiredLeaseIsTakenOverAndStaleOwnerFenced(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	stale := f.store
	fresh := newStore(t, f.pool, "worker-b")
	c := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":500}`)

	first, err := stale.Begin(ctx, c)
	require.NoError(t, err)
	f.expireLease(t, c)

	_, err = fresh.Begin(ctx, c)
	require.ErrorIs(t, err, idempotency.ErrOutcomeUnknown, "an expired lease is never a silent re-run")
	var unknown *idempotency.OutcomeUnknownError
	require.ErrorAs(t, err, &unknown)
	require.NotNil(t, unknown.Lease, "the caller takes the lease over to resolve it")
	assert.Nil(t, unknown.Previous)
	assert.Equal(t, "worker-b", unknown.Lease.Owner)
	assert.EqualValues(t, 2, unknown.Lease.Attempt)

	_, err = stale.Complete(ctx, first.Lease, json.RawMessage(`{"refund_id":"stale"}`))
	require.ErrorIs(t, err, idempotency.ErrLeaseLost)
	require.ErrorIs(t, stale.Fail(ctx, first.Lease, idempotency.Failure{Message: "late"}), idempotency.ErrLeaseLost)
	state, owner, attempts := f.state(t, c)
	assert.Equal(t, []any{"in_flight", "worker-b", 2}, []any{state, owner, attempts}, "the stale owner changed nothing")

	// The new owner resolved the outcome (say, by the paired read) and records it.
	out, err := fresh.Complete(ctx, unknown.Lease, json.RawMessage(`{"refund_id":"re_1"}`))
	require.NoError(t, err)
	replay, err := stale.Begin(ctx, c)
	require.NoError(t, err)
	assert.True(t, replay.Outcome.Replayed)
	assert.Equal(t, string(out.Result), string(replay.Outcome.Result))
}

func TestConcurrentTakeoverHasOneWinner(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":500}`)
	_, err := f.store.Begin(ctx, c)
	require.NoError(t, err)
	f.expireLease(t, c)

	const callers = 16
	errs := make(chan error, callers)
	for i := range callers {
		s := newStore(t, f.pool, "taker-"+string(rune('a'+i)))
		go func() { _, err := s.Begin(ctx, c); errs <- err }()
	}
	var unknown, inFlight int
	for range callers {
		switch err := <-errs; {
		case errors.Is(err, idempotency.ErrOutcomeUnknown):
			unknown++
		case errors.Is(err, idempotency.ErrInFlight):
			inFlight++
		default:
			t.Errorf("Begin on an expired lease returned %v", err)
		}
	}
	assert.Equal(t, 1, unknown, "exactly one caller takes the lease over")
	assert.Equal(t, callers-1, inFlight)
	_, _, attempts := f.state(t, c)
	assert.Equal(t, 2, attempts)
}

func TestFailBeforeEffectMayBeClaimedAgain(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "send_email", `{"to":"a@example.com"}`)
	b, err := f.store.Begin(ctx, c)
	require.NoError(t, err)
	require.NoError(t, f.store.Fail(ctx, b.Lease, idempotency.Failure{Message: "connection refused", BeforeEffect: true}))
	state, _, _ := f.state(t, c)
	assert.Equal(t, "failed", state)

	retry, err := f.store.Begin(ctx, c)
	require.NoError(t, err, "a failure before the effect is a plain retry")
	require.NotNil(t, retry.Lease)
	assert.EqualValues(t, 2, retry.Lease.Attempt)
}

func TestDoReclaimsFailureBeforeEffect(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "add_order_note", `{}`)
	b, err := f.store.Begin(ctx, c)
	require.NoError(t, err)
	require.NoError(t, f.store.Fail(ctx, b.Lease, idempotency.Failure{Message: "invalid order", BeforeEffect: true}))

	out, err := f.store.Do(ctx, c, func(context.Context, pgx.Tx) (json.RawMessage, error) { return nil, nil })
	require.NoError(t, err)
	assert.False(t, out.Replayed)
	assert.Equal(t, "null", string(out.Result), "a nil result is stored as JSON null")
	state, _, attempts := f.state(t, c)
	assert.Equal(t, "completed", state)
	assert.Equal(t, 2, attempts)
}

func TestFailAfterEffectMayHaveBegunIsUnknown(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":500}`)
	b, err := f.store.Begin(ctx, c)
	require.NoError(t, err)
	require.NoError(t, f.store.Fail(ctx, b.Lease, idempotency.Failure{Message: "provider timed out"}))

	_, err = f.store.Do(ctx, c, nil)
	require.ErrorIs(t, err, idempotency.ErrOutcomeUnknown, "the transactional path cannot resolve it")
	var fromDo *idempotency.OutcomeUnknownError
	require.ErrorAs(t, err, &fromDo)
	assert.Nil(t, fromDo.Lease)

	_, err = f.store.Begin(ctx, c)
	var unknown *idempotency.OutcomeUnknownError
	require.ErrorAs(t, err, &unknown)
	require.NotNil(t, unknown.Previous)
	assert.Equal(t, "provider timed out", unknown.Previous.Message)
	assert.EqualValues(t, 2, unknown.Lease.Attempt)
	assert.Contains(t, err.Error(), "provider timed out")
}

func TestCompleteRejectsInvalidResult(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{}`)
	b, err := f.store.Begin(ctx, c)
	require.NoError(t, err)
	_, err = f.store.Complete(ctx, b.Lease, json.RawMessage(`{"refund_id":`))
	require.ErrorContains(t, err, "result is not valid JSON")
	state, _, _ := f.state(t, c)
	assert.Equal(t, "in_flight", state)
	require.ErrorContains(t, f.store.Fail(ctx, b.Lease, idempotency.Failure{}), "Failure.Message is empty")
}

func TestCompleteTwiceKeepsFirstResult(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{}`)
	b, err := f.store.Begin(ctx, c)
	require.NoError(t, err)
	first, err := f.store.Complete(ctx, b.Lease, json.RawMessage(`{"refund_id":"re_1"}`))
	require.NoError(t, err)

	_, err = f.store.Complete(ctx, b.Lease, json.RawMessage(`{"refund_id":"re_2"}`))
	require.ErrorIs(t, err, idempotency.ErrLeaseLost, "a completed key is not completed again")
	require.ErrorIs(t, f.store.Fail(ctx, b.Lease, idempotency.Failure{Message: "late"}), idempotency.ErrLeaseLost)
	replay, err := f.store.Begin(ctx, c)
	require.NoError(t, err)
	assert.Equal(t, string(first.Result), string(replay.Outcome.Result))
}

func TestUnknownOutcomeReportsOnlyTheLatestFailure(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{}`)
	b, err := f.store.Begin(ctx, c)
	require.NoError(t, err)
	require.NoError(t, f.store.Fail(ctx, b.Lease, idempotency.Failure{Message: "connection refused", BeforeEffect: true}))
	retry, err := f.store.Begin(ctx, c)
	require.NoError(t, err)
	require.NotNil(t, retry.Lease)
	f.expireLease(t, c) // attempt 2 went silent

	_, err = f.store.Begin(ctx, c)
	var unknown *idempotency.OutcomeUnknownError
	require.ErrorAs(t, err, &unknown)
	assert.Nil(t, unknown.Previous, "attempt 1's failure before the effect says nothing about attempt 2")
	assert.Contains(t, err.Error(), "lease expired without an outcome")
}
