package cli

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/worker"
)

// run runs the CLI with args and returns what it printed.
func run(t *testing.T, env Env, args ...string) (string, error) {
	t.Helper()
	cmd := NewRoot(env)
	var out bytes.Buffer
	cmd.SetArgs(args)
	err := Execute(context.Background(), cmd, &out, &out)
	return out.String(), err
}

func TestMigrateCommand(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmptyDB(t)

	out, err := run(t, Env{DatabaseURL: db.URL}, "migrate")
	require.NoError(t, err, out)
	assert.Equal(t, "applied 001_idempotency_keys.sql, 002_credits.sql, 003_order_notes.sql, 004_orders.sql, 005_approvals.sql, 006_key_expiry_alerts.sql, 007_approval_decisions.sql, 008_audit_invalid_requests.sql, 009_external_effects.sql, 010_transactional_claim.sql, 011_validate_args_hash_check.sql, 012_cli_decisions.sql, 013_approval_edits.sql, 014_run_controls.sql, 015_spend_limits.sql, 016_approval_trace_and_lineage.sql, 017_questions.sql, 018_external_handles.sql, 019_live_question_holds.sql, 020_tree_intents.sql, 021_forbidden_controls.sql, 022_other_currencies.sql, 023_run_events.sql\nschema is at version 23\n", out)

	out, err = run(t, Env{}, "migrate", "--database-url", db.URL)
	require.NoError(t, err, out)
	assert.Equal(t, "schema is up to date at version 23\n", out)

	var n int
	require.NoError(t, pgtest.Connect(t, db).QueryRow(context.Background(),
		"SELECT count(*) FROM idempotency_keys").Scan(&n))
}

func TestMigrateCommandBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"malformed url", []string{"migrate", "--database-url", "::nope"}, "--database-url: cannot parse"},
		{"unreachable server", []string{"migrate", "--database-url", "postgres://postgres@127.0.0.1:1/x?connect_timeout=2"}, "connect to 127.0.0.1:1/x"},
		{"stray argument", []string{"migrate", "now"}, `unknown command "now"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := run(t, Env{}, tt.args...)
			require.Error(t, err)
			assert.Contains(t, out+err.Error(), tt.want)
		})
	}
}

func TestDatabaseURLDefault(t *testing.T) {
	t.Parallel()
	assert.Equal(t, worker.DefaultDatabaseURL, Env{}.databaseURL())
	assert.Equal(t, "postgres://x", Env{DatabaseURL: "postgres://x"}.databaseURL())
	assert.Equal(t, pgtest.DefaultURL, worker.DefaultDatabaseURL, "tests and the CLI default to the same server")
}
