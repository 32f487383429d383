package idempotency_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/idempotency"
)

// testKey is a row for insertKey: lease is an in-flight key's lease from
// now ("1 hour", "-1 minute"), expires the key's expiry from now.
type testKey struct {
	tenant, run string
	step        int64
	state       idempotency.State
	lease       string
	expires     string
}

func (r testKey) key() string {
	return "v1/" + r.tenant + "/" + r.run + "/" + strconv.FormatInt(r.step, 10) + "/add_order_note"
}

// insertKey writes r straight into the table, in the shape its state asks.
func (f fixture) insertKey(t *testing.T, r testKey) {
	t.Helper()
	_, err := f.pool.Exec(context.Background(), `
INSERT INTO idempotency_keys (tenant, key, run_id, step, tool, state, args_hash, result, failure, completed_at, lease_owner, lease_expiry, expires_at)
VALUES ($1, $2, $3, $4, 'add_order_note', $5, repeat('a', 64),
        CASE WHEN $5 = 'completed' THEN '{}'::jsonb END, CASE WHEN $5 = 'failed' THEN '{"message":"x"}'::jsonb END,
        CASE WHEN $5 = 'completed' THEN now() END,
        CASE WHEN $5 = 'in_flight' THEN 'w' END, CASE WHEN $5 = 'in_flight' THEN now() + $6::interval END,
        now() + $7::interval)`, r.tenant, r.key(), r.run, r.step, string(r.state), r.lease, r.expires)
	require.NoError(t, err)
}

func keysOf(ks []idempotency.ExpiringKey) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.Key
	}
	return out
}

func TestDueKeysLeaveOutKeysUnderALiveLease(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	rows := []testKey{
		{"acme", "r1", 1, idempotency.StateCompleted, "0s", "-3 hours"},
		{"acme", "r1", 2, idempotency.StateFailed, "0s", "-2 hours"},
		{"acme", "r1", 3, idempotency.StateInFlight, "-1 minute", "-1 hour"}, // lease expired: outcome unknown
		{"acme", "r1", 4, idempotency.StateInFlight, "1 hour", "-1 hour"},    // an attempt holds it now
		{"acme", "r1", 5, idempotency.StateCompleted, "0s", "1 hour"},        // not expired
	}
	for _, r := range rows {
		f.insertKey(t, r)
	}

	due, err := idempotency.DueKeys(ctx, f.pool, time.Now(), 10)
	require.NoError(t, err)
	assert.Equal(t, []string{rows[0].key(), rows[1].key(), rows[2].key()}, keysOf(due), "oldest first")
	assert.True(t, due[2].InFlight())
	assert.False(t, due[0].InFlight())

	first, err := idempotency.DueKeys(ctx, f.pool, time.Now(), 2)
	require.NoError(t, err)
	assert.Len(t, first, 2, "limit")
}

func TestLockDeleteAndHoldDueKeys(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	a := testKey{"acme", "r1", 1, idempotency.StateCompleted, "0s", "-1 hour"}
	b := testKey{"acme", "r1", 2, idempotency.StateCompleted, "0s", "-1 hour"}
	c := testKey{"other", "r2", 1, idempotency.StateCompleted, "0s", "-1 hour"}
	for _, r := range []testKey{a, b, c} {
		f.insertKey(t, r)
	}
	refs := []idempotency.KeyRef{{Tenant: "acme", Key: a.key()}, {Tenant: "acme", Key: b.key()}, {Tenant: "other", Key: c.key()}}
	cutoff := time.Now()

	// Another watchdog holds c.
	other, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	defer other.Rollback(ctx)
	locked, err := idempotency.LockDueKeys(ctx, other, cutoff, refs[2:])
	require.NoError(t, err)
	require.Len(t, locked, 1)

	err = pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		due, err := idempotency.LockDueKeys(ctx, tx, cutoff, refs)
		require.NoError(t, err)
		require.Equal(t, []string{a.key(), b.key()}, keysOf(due), "the key another transaction holds is skipped")
		n, err := idempotency.DeleteKeys(ctx, tx, []idempotency.KeyRef{due[0].Ref()})
		require.NoError(t, err)
		assert.EqualValues(t, 1, n)
		return idempotency.HoldKeys(ctx, tx, []idempotency.KeyHold{{KeyRef: due[1].Ref(), Until: cutoff.Add(24 * time.Hour)}})
	})
	require.NoError(t, err)
	require.NoError(t, other.Rollback(ctx))

	assert.Zero(t, f.count(t, `SELECT count(*) FROM idempotency_keys WHERE key = $1`, a.key()), "deleted")
	assert.Equal(t, 1, f.count(t, `SELECT count(*) FROM idempotency_keys WHERE key = $1 AND expires_at > now() + interval '23 hours'`, b.key()), "held")
	due, err := idempotency.DueKeys(ctx, f.pool, time.Now(), 10)
	require.NoError(t, err)
	assert.Equal(t, []string{c.key()}, keysOf(due), "a held key is no longer due")
}

func TestExpiringKeys(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	rows := []testKey{
		{"acme", "r1", 1, idempotency.StateCompleted, "0s", "2 hours"},
		{"acme", "r1", 2, idempotency.StateInFlight, "1 hour", "-1 hour"},
		{"acme", "r1", 3, idempotency.StateCompleted, "0s", "3 days"},
		{"other", "r2", 1, idempotency.StateCompleted, "0s", "1 hour"},
	}
	for _, r := range rows {
		f.insertKey(t, r)
	}

	all, err := idempotency.ExpiringKeys(ctx, f.pool, 24*time.Hour, "", 10)
	require.NoError(t, err)
	assert.Equal(t, []string{rows[1].key(), rows[3].key(), rows[0].key()}, keysOf(all), "soonest first, in any state")
	acme, err := idempotency.ExpiringKeys(ctx, f.pool, 24*time.Hour, "acme", 10)
	require.NoError(t, err)
	assert.Equal(t, []string{rows[1].key(), rows[0].key()}, keysOf(acme))
	one, err := idempotency.ExpiringKeys(ctx, f.pool, 24*time.Hour, "", 1)
	require.NoError(t, err)
	assert.Len(t, one, 1, "limit")

	run, err := idempotency.RunKeysExpiringBefore(ctx, f.pool, "acme", "r1", time.Now().Add(24*time.Hour))
	require.NoError(t, err)
	assert.Equal(t, []string{rows[0].key(), rows[1].key()}, keysOf(run), "by step, the run's only")
}

func TestKeyRecordReaders(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	rows := []testKey{
		{"acme", "r1", 1, idempotency.StateCompleted, "0s", "1 day"},
		{"acme", "r1", 2, idempotency.StateInFlight, "1 hour", "1 day"},
		{"acme", "r1", 3, idempotency.StateFailed, "0s", "1 day"},
		{"other", "r1", 1, idempotency.StateInFlight, "1 hour", "1 day"},
	}
	for _, r := range rows {
		f.insertKey(t, r)
	}

	got, err := idempotency.KeysOf(ctx, f.pool, []idempotency.KeyRef{
		{Tenant: "acme", Key: rows[0].key()}, {Tenant: "acme", Key: rows[2].key()}, {Tenant: "acme", Key: "v1/acme/none/1/x"},
		{Tenant: "acme", Key: rows[3].key()}, // another tenant's key, asked as acme's
	})
	require.NoError(t, err)
	require.Len(t, got, 2)
	byKey := map[string]idempotency.KeyRecord{got[0].Key: got[0], got[1].Key: got[1]}
	assert.Equal(t, idempotency.StateCompleted, byKey[rows[0].key()].State)
	assert.JSONEq(t, `{}`, string(byKey[rows[0].key()].Result))
	assert.NotNil(t, byKey[rows[0].key()].CompletedAt)
	assert.Equal(t, idempotency.StateFailed, byKey[rows[2].key()].State)
	assert.JSONEq(t, `{"message":"x"}`, string(byKey[rows[2].key()].Failure))

	run, err := idempotency.KeysOfRun(ctx, f.pool, "acme", "r1")
	require.NoError(t, err)
	require.Len(t, run, 3, "the tenant's run only")
	assert.Equal(t, []int64{1, 2, 3}, []int64{run[0].Step, run[1].Step, run[2].Step})
	assert.EqualValues(t, 1, run[0].Attempts)

	done, err := idempotency.CompletedKeys(ctx, f.pool, "add_order_note", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Len(t, done, 1)
	assert.Equal(t, rows[0].key(), done[0].Key)
	none, err := idempotency.CompletedKeys(ctx, f.pool, "add_order_note", time.Now().Add(time.Hour), time.Now().Add(2*time.Hour))
	require.NoError(t, err)
	assert.Empty(t, none, "created before the window")

	n, err := idempotency.CountInFlight(ctx, f.pool, []string{"r1"})
	require.NoError(t, err)
	assert.Equal(t, 2, n, "of every tenant")
	n, err = idempotency.CountInFlight(ctx, f.pool, []string{"r2"})
	require.NoError(t, err)
	assert.Zero(t, n)
}
