package watchdog_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/events"
	"github.com/oncerun/oncerun/internal/watchdog"
)

func TestPruneExpiredKeepsInFlightKeysAndSkipsUnknownRuns(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	f.acts.Runs = fakeRuns{"r-open": "open", "r-fail": "error"}
	insert := func(run string, step int, state, lease string) {
		t.Helper()
		sql := `INSERT INTO idempotency_keys (tenant, key, run_id, step, tool, state, args_hash, result, completed_at, lease_owner, lease_expiry, expires_at)
VALUES ('acme', 'v1/acme/' || $1 || '/' || $2::bigint || '/add_order_note', $1, $2::bigint, 'add_order_note', $3, repeat('a', 64),
        CASE WHEN $3 = 'completed' THEN '{}'::jsonb END, CASE WHEN $3 = 'completed' THEN now() END,
        CASE WHEN $3 = 'in_flight' THEN 'w' END, CASE WHEN $3 = 'in_flight' THEN now() + $4::interval END,
        now() - interval '1 hour')`
		_, err := f.pool.Exec(ctx, sql, run, step, state, lease)
		require.NoError(t, err)
	}
	insert("r-closed", 1, "completed", "0s")
	insert("r-open", 1, "completed", "0s")
	insert("r-open", 2, "in_flight", "-1 minute") // lease expired: outcome unknown
	insert("r-open", 3, "in_flight", "1 hour")    // an attempt holds it right now
	insert("r-fail", 1, "completed", "0s")
	// The closed run's story, and the open one's.
	for _, run := range []string{"r-closed", "r-open"} {
		facts := []events.Fact{{RunID: run, Source: "started", Type: "run.started"}}
		if run == "r-closed" {
			facts = append(facts, events.Fact{RunID: run, Source: "ended", Type: events.RunCompleted})
		}
		require.NoError(t, events.Record(ctx, f.pool, "acme", facts))
	}

	out, err := f.acts.PruneExpired(ctx, watchdog.PruneInput{Cutoff: time.Now(), BatchSize: 100, Policy: watchdog.PolicyPrune})
	require.NoError(t, err)

	assert.Equal(t, 4, out.Selected, "the key under a live lease is not even selected")
	assert.Equal(t, 1, out.Pruned)
	assert.Equal(t, 1, out.PrunedAlive)
	assert.Equal(t, 1, out.Held, "an in-flight key is held whatever the policy")
	assert.Equal(t, 1, out.Skipped)
	assert.Positive(t, out.DBTime, "the watchdog sizes its pause before the next batch from it")
	assert.EqualValues(t, 3, out.Events, "the closed run's story (started, applied, completed) goes with its last key")
	for run, want := range map[string]int{"r-closed": 0, "r-open": 2} {
		evs, err := events.ReadRun(ctx, f.pool, events.RunQuery{Tenant: "acme", Run: run, Limit: 10})
		require.NoError(t, err)
		assert.Len(t, evs, want, "%s's story", run)
	}
	exists := func(run string, step int) bool {
		var n int
		require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE run_id = $1 AND step = $2`, run, step).Scan(&n))
		return n == 1
	}
	assert.False(t, exists("r-closed", 1))
	assert.False(t, exists("r-open", 1))
	assert.True(t, exists("r-open", 2))
	assert.True(t, exists("r-open", 3))
	assert.True(t, exists("r-fail", 1), "left for a later pass")
	var policy string
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT policy FROM key_expiry_alerts WHERE step = 2`).Scan(&policy))
	assert.Equal(t, watchdog.PolicyHold, policy)

	f.acts.Runs = fakeRuns{"r-fail": "error", "r-open": "error"}
	_, err = f.acts.PruneExpired(ctx, watchdog.PruneInput{Cutoff: time.Now().Add(40 * 24 * time.Hour), BatchSize: 100, Policy: watchdog.PolicyHold})
	require.ErrorContains(t, err, "Temporal may be unreachable", "a batch no run of which can be described fails, to be retried")
}
