package idempotency

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/pgtest"
)

// TestTakeoverIsFencedOnAttempt replays a race the public API cannot stage
// deterministically: callers A and B both read a key failed before its effect
// at attempt 1; B takes it over, calls the provider and fails after sending.
// A's takeover, still based on attempt 1, must then change nothing, or A would
// re-run an effect whose outcome is unknown.
func TestTakeoverIsFencedOnAttempt(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 2)
	ctx := context.Background()
	store, err := New(pool, Config{Owner: "worker-b"})
	require.NoError(t, err)
	k, err := keys.New("acme", "r1", 1, "refund_payment")
	require.NoError(t, err)
	a, err := store.prepare(Claim{Key: k, ArgsHash: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"})
	require.NoError(t, err)

	first, err := insertClaim(ctx, pool, a, "worker-0")
	require.NoError(t, err)
	require.NoError(t, store.Fail(ctx, first, Failure{Message: "refused", BeforeEffect: true}))

	b, err := takeover(ctx, pool, a, "worker-b", 1)
	require.NoError(t, err)
	require.NotNil(t, b)
	require.NoError(t, store.Fail(ctx, b, Failure{Message: "timed out after sending"}))

	stale, err := takeover(ctx, pool, a, "worker-a", 1)
	require.NoError(t, err)
	assert.Nil(t, stale, "a takeover based on a stale attempt changes nothing")
}

// TestTakeoverRestartsRetention checks that a lease taken over near the end
// of the key's retention cannot outlive the key.
func TestTakeoverRestartsRetention(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 2)
	ctx := context.Background()
	store, err := New(pool, Config{Owner: "worker-a", Retention: 24 * time.Hour, Lease: time.Hour})
	require.NoError(t, err)
	k, err := keys.New("acme", "r1", 1, "refund_payment")
	require.NoError(t, err)
	c := Claim{Key: k, ArgsHash: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	_, err = store.Begin(ctx, c)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE idempotency_keys SET lease_expiry = now() - interval '1 second',
		expires_at = now() + interval '1 minute'`)
	require.NoError(t, err)

	_, err = store.Begin(ctx, c)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	var leaseLeft, keyLeft time.Duration
	require.NoError(t, pool.QueryRow(ctx, `SELECT lease_expiry - now(), expires_at - now() FROM idempotency_keys`).
		Scan(&leaseLeft, &keyLeft))
	assert.Greater(t, keyLeft, leaseLeft, "the key outlives its lease")
	assert.InDelta(t, (24 * time.Hour).Hours(), keyLeft.Hours(), 0.01, "retention restarts at the takeover")
}
