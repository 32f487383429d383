package watchdog_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/watchdog"
)

func TestExpiringListsOnlyKeysOfOpenRuns(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	insert := func(tenant, run string, step int, expiresIn string) {
		t.Helper()
		_, err := f.pool.Exec(ctx, `
INSERT INTO idempotency_keys (tenant, key, run_id, step, tool, state, args_hash, result, completed_at, expires_at)
VALUES ($1, 'v1/' || $1 || '/' || $2 || '/' || $3::bigint || '/add_order_note', $2, $3::bigint, 'add_order_note', 'completed',
        repeat('a', 64), '{}', now(), now() + $4::interval)`, tenant, run, step, expiresIn)
		require.NoError(t, err)
	}
	insert("acme", "r-open", 1, "-1 hour") // expired, not pruned yet
	insert("acme", "r-open", 2, "2 hours")
	insert("acme", "r-open", 3, "3 days") // beyond the horizon
	insert("acme", "r-done", 1, "1 hour")
	insert("other", "r-open", 1, "1 hour")
	runs := fakeRuns{"r-open": "open"}

	list, complete, err := watchdog.Expiring(ctx, f.pool, runs, 24*time.Hour, "acme")

	require.NoError(t, err)
	assert.True(t, complete)
	require.Len(t, list, 2, "%+v", list)
	assert.Equal(t, "v1/acme/r-open/1/add_order_note", list[0].Key, "soonest first")
	assert.Equal(t, "v1/acme/r-open/2/add_order_note", list[1].Key)
	assert.Equal(t, "running", list[1].RunState)

	all, _, err := watchdog.Expiring(ctx, f.pool, runs, 24*time.Hour, "")
	require.NoError(t, err)
	assert.Len(t, all, 3, "every tenant's")

	_, _, err = watchdog.Expiring(ctx, f.pool, fakeRuns{"r-open": "error"}, 24*time.Hour, "acme")
	assert.Error(t, err, "a run that cannot be described is an error, not a closed run")
}
