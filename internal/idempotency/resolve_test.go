package idempotency_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/idempotency"
)

// applied is a person's answer that the effect happened with result.
func applied(result string) idempotency.Answer {
	return idempotency.Answer{Applied: true, Result: json.RawMessage(result), By: "ops@acme", Note: "seen in the provider's dashboard"}
}

// notApplied is a person's answer that the effect did not happen.
var notApplied = idempotency.Answer{By: "ops@acme", Note: "absent from the provider's dashboard"}

func TestResolveAppliedCompletesUnknownKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":500}`)
	f.leaveUnknown(t, &provider{}, c)

	out, err := f.store.Resolve(ctx, c, applied(`{"refund_id":"re_1"}`))
	require.NoError(t, err)
	assert.False(t, out.Replayed)
	assert.JSONEq(t, `{"refund_id":"re_1"}`, string(out.Result))
	state, failure := f.failure(t, c)
	assert.Equal(t, "completed", state)
	assert.Nil(t, failure)

	replay, err := f.store.Begin(ctx, c)
	require.NoError(t, err)
	assert.True(t, replay.Outcome.Replayed)
	assert.Equal(t, string(out.Result), string(replay.Outcome.Result))
}

func TestResolveNotAppliedFreesKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":500}`)
	f.leaveUnknown(t, &provider{}, c)

	out, err := f.store.Resolve(ctx, c, notApplied)
	require.NoError(t, err)
	assert.Nil(t, out.Result)
	state, failure := f.failure(t, c)
	assert.Equal(t, "failed", state)
	require.NotNil(t, failure)
	assert.True(t, failure.BeforeEffect)
	assert.Contains(t, failure.Message, "ops@acme")

	b, err := f.store.Begin(ctx, c)
	require.NoError(t, err, "the key is claimed afresh, not an unknown outcome")
	require.NotNil(t, b.Lease)
	assert.EqualValues(t, 2, b.Lease.Attempt)
}

func TestResolveLiveLeaseIsInFlight(t *testing.T) {
	t.Parallel()
	for name, ans := range map[string]idempotency.Answer{"applied": applied(`{}`), "not applied": notApplied} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			ctx := context.Background()
			c := claim(t, "acme", "r1", 2, "refund_payment", `{}`)
			_, err := f.store.Begin(ctx, c)
			require.NoError(t, err)

			_, err = f.store.Resolve(ctx, c, ans)
			require.ErrorIs(t, err, idempotency.ErrInFlight, "the attempt is still running")
			state, owner, attempts := f.state(t, c)
			assert.Equal(t, []any{"in_flight", "worker-a", 1}, []any{state, owner, attempts})
		})
	}
}

func TestResolveAppliedCompletesExpiredLease(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{}`)
	b, err := f.store.Begin(ctx, c)
	require.NoError(t, err)
	f.expireLease(t, c)

	out, err := f.store.Resolve(ctx, c, applied(`{"refund_id":"re_1"}`))
	require.NoError(t, err)
	assert.JSONEq(t, `{"refund_id":"re_1"}`, string(out.Result))
	state, _ := f.failure(t, c)
	assert.Equal(t, "completed", state)

	_, err = f.store.Complete(ctx, b.Lease, json.RawMessage(`{"refund_id":"late"}`))
	require.ErrorIs(t, err, idempotency.ErrLeaseLost, "the stalled attempt cannot overwrite the answer")
}

func TestResolveAppliedOnCompletedKeyKeepsStoredResult(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{}`)
	_, err := f.store.External(ctx, c, new(provider).external(`{"refund_id":"re_1"}`, nil))
	require.NoError(t, err)

	out, err := f.store.Resolve(ctx, c, applied(`{"refund_id":"re_other"}`))
	require.NoError(t, err)
	assert.True(t, out.Replayed)
	assert.JSONEq(t, `{"refund_id":"re_1"}`, string(out.Result))
}

func TestResolveNotAppliedOnCompletedKeyIsResolvedOtherwise(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{}`)
	_, err := f.store.External(ctx, c, new(provider).external(`{"refund_id":"re_1"}`, nil))
	require.NoError(t, err)

	_, err = f.store.Resolve(ctx, c, notApplied)
	require.ErrorIs(t, err, idempotency.ErrResolvedOtherwise)
	replay, err := f.store.Begin(ctx, c)
	require.NoError(t, err)
	assert.JSONEq(t, `{"refund_id":"re_1"}`, string(replay.Outcome.Result), "the key keeps its result")
}

func TestResolveAppliedWithoutRowInsertsCompletedKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{}`)

	out, err := f.store.Resolve(ctx, c, applied(`{"refund_id":"re_1"}`))
	require.NoError(t, err)
	assert.JSONEq(t, `{"refund_id":"re_1"}`, string(out.Result))
	var runID, tool, hash string
	var step int64
	require.NoError(t, f.pool.QueryRow(ctx, "SELECT run_id, step, tool, args_hash FROM idempotency_keys WHERE state = 'completed'").
		Scan(&runID, &step, &tool, &hash))
	assert.Equal(t, []any{"r1", int64(2), "refund_payment", c.ArgsHash}, []any{runID, step, tool, hash})

	replay, err := f.store.Begin(ctx, c)
	require.NoError(t, err)
	assert.True(t, replay.Outcome.Replayed)
	assert.Equal(t, string(out.Result), string(replay.Outcome.Result))
}

func TestResolveNotAppliedWithoutRowChangesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := claim(t, "acme", "r1", 2, "refund_payment", `{}`)

	out, err := f.store.Resolve(context.Background(), c, notApplied)
	require.NoError(t, err)
	assert.Nil(t, out.Result)
	assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM idempotency_keys"))
}

func TestResolveOtherArgsIsKeyReuse(t *testing.T) {
	t.Parallel()
	for name, ans := range map[string]idempotency.Answer{"applied": applied(`{}`), "not applied": notApplied} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			c := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":500}`)
			f.leaveUnknown(t, &provider{}, c)

			other := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":900}`)
			_, err := f.store.Resolve(context.Background(), other, ans)
			require.ErrorIs(t, err, idempotency.ErrKeyReuse)
			state, failure := f.failure(t, c)
			assert.Equal(t, "failed", state)
			require.NotNil(t, failure)
			assert.False(t, failure.BeforeEffect, "the key stays unknown")
		})
	}
}

func TestResolveRejectsInvalidResult(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := claim(t, "acme", "r1", 2, "refund_payment", `{}`)
	f.leaveUnknown(t, &provider{}, c)

	_, err := f.store.Resolve(context.Background(), c, applied(`{"refund_id":`))
	require.ErrorContains(t, err, "result is not valid JSON")
	state, _ := f.failure(t, c)
	assert.Equal(t, "failed", state)
}
