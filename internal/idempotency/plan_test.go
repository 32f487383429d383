package idempotency

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/pgtest"
)

// hotStatement is a statement of the store that runs on a call's path, in
// every watchdog batch or in a listing, with sample arguments and the index
// its plan must use.
type hotStatement struct {
	name  string
	sql   string
	types string
	args  string
	index string
	// byKey: the statement finds one row by tenant and key, and must do so
	// from the first call on an empty table (see
	// TestHotStatementsUsePrimaryKeyFromEmpty).
	byKey bool
}

const (
	pkeyIndex    = "idempotency_keys_pkey"
	expiresIndex = "idempotency_keys_expires_at_idx"
	runIndex     = "idempotency_keys_run_idx"
)

// hotStatements lists them all. Left out: the inserts (insertClaimSQL,
// insertCompletedInTxSQL, resolveAppliedSQL), which read no index but the
// primary key's uniqueness check, and completedKeysSQL, which reads the
// table once per reconciliation pass and tool, off every call's path.
var hotStatements = []hotStatement{
	{"load", loadRowSQL, "text, text", "'t', 'k'", pkeyIndex, true},
	{"takeover", takeoverSQL, "text, text, text, interval, text, integer, interval", "'t', 'k', 'o', '1 minute', 'h', 1, '1 day'", pkeyIndex, true},
	{"complete", completeSQL, "text, text, text, integer, jsonb", "'t', 'k', 'o', 1, '{}'", pkeyIndex, true},
	{"complete_in_tx", completeInTxSQL, "text, text, text, integer, jsonb", "'t', 'k', 'o', 1, '{}'", pkeyIndex, true},
	{"fail", failSQL, "text, text, text, integer, jsonb", "'t', 'k', 'o', 1, '{}'", pkeyIndex, true},
	{"record_handle", recordHandleSQL, "text, text, text, integer, jsonb", "'t', 'k', 'o', 1, '{}'", pkeyIndex, true},
	{"renew", renewSQL, "text, text, text, integer, interval", "'t', 'k', 'o', 1, '1 minute'", pkeyIndex, true},
	{"resolve_not_applied", resolveNotAppliedSQL, "text, text, text, jsonb", "'t', 'k', 'h', '{}'", pkeyIndex, true},
	// The watchdog's batch: read in expiry order, then lock, delete and
	// hold by primary key.
	{"due_keys", dueKeysSQL, "timestamptz, integer", "now(), 250", expiresIndex, false},
	{"lock_due_keys", lockDueKeysSQL, "timestamptz, text[], text[]", "now(), '{t1,t2}', '{k1,k2}'", pkeyIndex, false},
	{"delete_keys", deleteKeysSQL, "text[], text[]", "'{t1,t2}', '{k1,k2}'", pkeyIndex, false},
	{"hold_keys", holdKeysSQL, "text[], text[], timestamptz[]", "'{t1,t2}', '{k1,k2}', '{2030-01-01,2030-01-01}'", pkeyIndex, false},
	// oncerun keys --expiring, for every tenant and for one.
	{"expiring_keys", expiringKeysSQL, "interval, text, integer", "'24 hours', '', 10000", expiresIndex, false},
	{"expiring_keys_of_tenant", expiringKeysSQL, "interval, text, integer", "'24 hours', 't1', 10000", expiresIndex, false},
	// A run pausing for approval; a run's keys; keys a provider lists.
	{"run_keys_expiring", runKeysExpiringSQL, "text, text, timestamptz", "'r1', 't1', now()", runIndex, false},
	{"keys_of_run", keysOfRunSQL, "text, text", "'r1', 't1'", runIndex, false},
	{"keys_of", keysOfSQL, "text[], text[]", "'{t1,t2}', '{k1,k2}'", pkeyIndex, false},
	{"count_in_flight", countInFlightSQL, "text[]", "'{r1,r2}'", runIndex, false},
	// A run about to leave steps unmade reads which were made.
	{"completed_steps", completedStepsSQL, "text, text, bigint, bigint", "'r1', 't1', 1, 200", runIndex, false},
	// A run tree's claims on its intents read the holder's key by its
	// primary key.
	{"intent_holder", intentHolderSQL, "text, text, text, text", "'t1', 'r1', 'add_order_note', 'h'", pkeyIndex, false},
	{"take_over_intent", takeOverIntentSQL, "text, text, text, text, text, bigint, text, text", "'t1', 'r1', 'add_order_note', 'h', 'r1.2', 1, 'k2', 'k1'", pkeyIndex, false},
	{"release_intent", releaseIntentSQL, "text, text, text, text, text", "'t1', 'r1', 'add_order_note', 'h', 'k1'", pkeyIndex, false},
}

// explain prepares st under name on conn and returns the plan of executing
// it with its sample arguments.
func explain(t *testing.T, conn *pgx.Conn, name string, st hotStatement) string {
	t.Helper()
	ctx := context.Background()
	_, err := conn.Exec(ctx, fmt.Sprintf("PREPARE %s (%s) AS %s", name, st.types, st.sql))
	require.NoError(t, err, name)
	rows, err := conn.Query(ctx, fmt.Sprintf("EXPLAIN EXECUTE %s (%s)", name, st.args))
	require.NoError(t, err, name)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err, name)
	return strings.Join(plan, "\n")
}

// TestHotStatementsUsePrimaryKeyFromEmpty checks the plans PostgreSQL caches
// for the store's statements when a worker starts against an empty table.
// A generic plan that scans another index over the whole tenant makes every
// call slower as the table grows, for as long as the connection lives.
func TestHotStatementsUsePrimaryKeyFromEmpty(t *testing.T) {
	t.Parallel()
	conn := pgtest.Connect(t, pgtest.NewDB(t))
	_, err := conn.Exec(context.Background(), "SET plan_cache_mode = force_generic_plan")
	require.NoError(t, err)
	for _, st := range hotStatements {
		if !st.byKey {
			continue
		}
		assert.Contains(t, explain(t, conn, st.name, st), "Index Cond: ((tenant = $1) AND (key = $2))", "plan of %s", st.name)
	}
}

// TestHotStatementsUseIndexesOnAFilledTable checks every hot statement's
// plan, generic and custom, on a table of 50,000 keys of 50 tenants, a few
// of them expired: each must use its index and none may scan the table.
// A watchdog batch or a listing that scans the table takes the longer the
// more keys are kept, and holds its locks as long.
func TestHotStatementsUseIndexesOnAFilledTable(t *testing.T) {
	t.Parallel()
	conn := pgtest.Connect(t, pgtest.NewDB(t))
	ctx := context.Background()
	_, err := conn.Exec(ctx, `
INSERT INTO idempotency_keys (tenant, key, run_id, step, tool, state, args_hash, result, completed_at, expires_at)
SELECT 't' || (n % 50), 'v1/t' || (n % 50) || '/r' || (n / 10) || '/' || (n % 10 + 1) || '/add_order_note', 'r' || (n / 10),
       n % 10 + 1, 'add_order_note', 'completed', repeat('a', 64), '{}', now(),
       now() + (n % 1000) * interval '1 hour' - interval '2 hours'
FROM generate_series(0, 49999) AS n`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "ANALYZE idempotency_keys")
	require.NoError(t, err)
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		_, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode)
		require.NoError(t, err)
		for _, st := range hotStatements {
			plan := explain(t, conn, st.name+"_"+mode, st)
			assert.Contains(t, plan, st.index, "%s plan of %s:\n%s", mode, st.name, plan)
			assert.NotContains(t, plan, "Seq Scan on idempotency_keys", "%s plan of %s:\n%s", mode, st.name, plan)
		}
	}
}
