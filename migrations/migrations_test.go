package migrations_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/migrations"
)

func TestMigrateConcurrentProcessesApplyEachMigrationOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmptyDB(t)
	ctx := context.Background()
	const starters = 4
	results := make([]migrations.Result, starters)
	errs := make([]error, starters)
	var wg sync.WaitGroup
	for i := range starters {
		conn := pgtest.Connect(t, db)
		wg.Go(func() { results[i], errs[i] = migrations.Migrate(ctx, conn) })
	}
	wg.Wait()

	var applied []string
	for i := range starters {
		require.NoError(t, errs[i], "starter %d", i)
		assert.EqualValues(t, 23, results[i].Version, "starter %d", i)
		applied = append(applied, results[i].Applied...)
	}
	assert.ElementsMatch(t, []string{"001_idempotency_keys.sql", "002_credits.sql", "003_order_notes.sql",
		"004_orders.sql", "005_approvals.sql", "006_key_expiry_alerts.sql", "007_approval_decisions.sql", "008_audit_invalid_requests.sql", "009_external_effects.sql", "010_transactional_claim.sql", "011_validate_args_hash_check.sql", "012_cli_decisions.sql", "013_approval_edits.sql", "014_run_controls.sql", "015_spend_limits.sql", "016_approval_trace_and_lineage.sql", "017_questions.sql", "018_external_handles.sql", "019_live_question_holds.sql", "020_tree_intents.sql", "021_forbidden_controls.sql", "022_other_currencies.sql", "023_run_events.sql"}, applied,
		"every migration is applied by exactly one starter")

	conn := pgtest.Connect(t, db)
	var tables int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'
		AND tablename IN ('idempotency_keys', 'credits', 'order_notes', 'orders', 'approvals', 'key_expiry_alerts', 'approval_decisions')`).Scan(&tables))
	assert.Equal(t, 7, tables)
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t) // already migrated from the template
	res, err := migrations.Migrate(context.Background(), pgtest.Connect(t, db))
	require.NoError(t, err)
	assert.Empty(t, res.Applied)
	assert.EqualValues(t, 23, res.Version)
}

func TestStateCheckRejectsUnknownState(t *testing.T) {
	t.Parallel()
	conn := pgtest.Connect(t, pgtest.NewDB(t))
	_, err := conn.Exec(context.Background(), `INSERT INTO idempotency_keys
		(tenant, key, run_id, step, tool, state, args_hash, lease_owner, lease_expiry, expires_at)
		VALUES ('t', 'k', 'r', 1, 'tool', 'done', repeat('a', 64), 'o', now(), now())`)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "idempotency_keys_state_check")
}

func TestStateColumnsMustMatchState(t *testing.T) {
	t.Parallel()
	conn := pgtest.Connect(t, pgtest.NewDB(t))
	// A completed key without a result would replay nothing.
	_, err := conn.Exec(context.Background(), `INSERT INTO idempotency_keys
		(tenant, key, run_id, step, tool, state, args_hash, expires_at)
		VALUES ('t', 'k', 'r', 1, 'tool', 'completed', repeat('a', 64), now())`)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "idempotency_keys_state_columns")
}

func TestArgsHashCheckAcceptsOnlyLowerCaseHexOf64(t *testing.T) {
	t.Parallel()
	conn := pgtest.Connect(t, pgtest.NewDB(t))
	insert := func(key, hash string) error {
		_, err := conn.Exec(context.Background(), `INSERT INTO idempotency_keys
			(tenant, key, run_id, step, tool, state, args_hash, result, completed_at, expires_at)
			VALUES ('t', $1, 'r', 1, 'tool', 'completed', $2, '{}', now(), now())`, key, hash)
		return err
	}
	require.NoError(t, insert("ok", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"))
	for name, hash := range map[string]string{
		"63 digits":        strings.Repeat("a", 63),
		"65 digits":        strings.Repeat("a", 65),
		"upper case":       strings.Repeat("A", 64),
		"not hex":          strings.Repeat("a", 63) + "g",
		"a space":          strings.Repeat("a", 63) + " ",
		"a multibyte rune": strings.Repeat("a", 63) + "é",
		"empty":            "",
	} {
		err := insert(name, hash)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "idempotency_keys_args_hash_check", name)
	}
}

// TestDecisionViaCheck: an approval decision records where it came from,
// the CLI without ONCERUN_API included (migration 012), and nothing else.
func TestDecisionViaCheck(t *testing.T) {
	t.Parallel()
	conn := pgtest.Connect(t, pgtest.NewDB(t))
	insert := func(via string) error {
		_, err := conn.Exec(context.Background(), `INSERT INTO approval_decisions
			(tenant, run_id, step, decision, outcome, args_hash, approver, role, remote_addr, via)
			VALUES ('t', 'r', 1, 'approve', 'repeated', repeat('a', 64), 'dana', 'local', 'local', $1)`, via)
		return err
	}
	for _, via := range []string{"api", "inbox", "cli"} {
		require.NoError(t, insert(via), via)
	}
	for _, via := range []string{"run", "", "CLI"} {
		err := insert(via)
		require.Error(t, err, via)
		assert.Contains(t, err.Error(), "approval_decisions_via_check", via)
	}
}

// TestRunControlsChecks: an approval may be cancelled (migration 014),
// and run_controls holds the actions and outcomes of operators' requests,
// and nothing else.
func TestRunControlsChecks(t *testing.T) {
	t.Parallel()
	conn := pgtest.Connect(t, pgtest.NewDB(t))
	ctx := context.Background()
	_, err := conn.Exec(ctx, `INSERT INTO approvals (tenant, run_id, step, tool, args, args_hash, goal, reason, requested_at, deadline, state, decided_at)
		VALUES ('t', 'r', 1, 'tool', '{}', repeat('a', 64), '', '', now(), now(), 'cancelled', now())`)
	require.NoError(t, err, "a withdrawn approval")
	_, err = conn.Exec(ctx, `INSERT INTO approvals (tenant, run_id, step, tool, args, args_hash, goal, reason, requested_at, deadline, state, decided_at)
		VALUES ('t', 'r', 2, 'tool', '{}', repeat('a', 64), '', '', now(), now(), 'withdrawn', now())`)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "approvals_state_check")

	insert := func(action, outcome string) error {
		_, err := conn.Exec(ctx, `INSERT INTO run_controls (tenant, run_id, action, actor, outcome) VALUES ('t', 'r', $1, 'ops', $2)`,
			action, outcome)
		return err
	}
	for _, action := range []string{"cancel", "pause", "resume", "message"} {
		for _, outcome := range []string{"accepted", "repeated", "refused", "invalid", "forbidden", "not_found", "unavailable"} {
			require.NoError(t, insert(action, outcome), action+" "+outcome)
		}
	}
	err = insert("delete", "accepted")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "run_controls_action_check")
	err = insert("cancel", "denied")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "run_controls_outcome_check")
}

func TestFingerprintNamesContent(t *testing.T) {
	t.Parallel()
	fp := migrations.Fingerprint()
	assert.Len(t, fp, 64)
	assert.Equal(t, fp, migrations.Fingerprint())
}
