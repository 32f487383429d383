package approvalstore

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/pgtest"
)

// TestHotStatementsUseTheirIndexes checks the plans PostgreSQL caches for
// the store's statements on filled tables: every statement of a run's
// pause, of a decision and of the inbox's lists finds its rows by an index,
// never by reading a whole table. A generic plan (the one a pooled
// connection keeps after five executions) that scans makes every call
// slower as the tables grow.
func TestHotStatementsUseTheirIndexes(t *testing.T) {
	t.Parallel()
	conn := pgtest.Connect(t, pgtest.NewDB(t))
	ctx := context.Background()
	const rows = 20_000
	for _, fill := range []string{`
INSERT INTO approvals (tenant, run_id, step, tool, args, args_hash, state, requested_at, deadline, decided_by, decided_at)
SELECT t, 'r' || g, 1, 'issue_credit', '{}', repeat('a', 64),
       CASE WHEN g % 10 = 0 THEN 'pending' ELSE 'approved' END,
       now() - make_interval(secs => g), now() + interval '7 days',
       CASE WHEN g % 10 = 0 THEN NULL ELSE 'dana' END,
       CASE WHEN g % 10 = 0 THEN NULL ELSE now() - make_interval(secs => g) + interval '1 minute' END
FROM generate_series(1, $1) g, unnest(ARRAY['acme', 'other']) t`, `
INSERT INTO approval_decisions (tenant, run_id, step, decision, outcome, args_hash, approver, role, remote_addr, via, decided_at)
SELECT tenant, run_id, step, 'approve', o, args_hash, 'dana', 'approver', '127.0.0.1', 'api', decided_at
FROM approvals, unnest(ARRAY['accepted', 'repeated']) o WHERE state = 'approved' AND $1 > 0`, `
INSERT INTO resolutions (tenant, run_id, step, round, tool, key, args, args_hash, first_sent_at, state, requested_at, deadline,
                         resolved_by, resolved_at)
SELECT t, 'r' || g, 2, 1, 'refund_payment', 'k' || g, '{}', repeat('a', 64), now(),
       CASE WHEN g % 10 = 0 THEN 'pending' ELSE 'applied' END, now() - make_interval(secs => g), now() + interval '1 day',
       CASE WHEN g % 10 = 0 THEN NULL ELSE 'dana' END, CASE WHEN g % 10 = 0 THEN NULL ELSE now() END
FROM generate_series(1, $1) g, unnest(ARRAY['acme', 'other']) t`, `
INSERT INTO resolution_decisions (tenant, run_id, step, round, decision, outcome, resolver, role, remote_addr, via)
SELECT tenant, run_id, step, round, 'applied', 'accepted', 'dana', 'approver', '127.0.0.1', 'api'
FROM resolutions WHERE state = 'applied' AND $1 > 0`,
	} {
		_, err := conn.Exec(ctx, fill, rows)
		require.NoError(t, err)
	}
	_, err := conn.Exec(ctx, "ANALYZE")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan")
	require.NoError(t, err)

	const (
		key     = "'acme', 'r10', 1"
		keyArgs = "text, text, bigint"
		decided = "'acme', 'r10', 1, 'approve', 'accepted', 'h', 'dana', 'approver', '', '127.0.0.1', '', 'api', ''"
		answer  = "'acme', 'r10', 2, 1, 'applied', 'accepted', NULL, 'dana', 'approver', '', '127.0.0.1', '', 'api', ''"
	)
	statements := []struct {
		name  string
		sql   string
		types string
		args  string
		// uses are the indexes the plan must use.
		uses []string
	}{
		// A run's pause and its outcome (the activities).
		{"record_pending", recordPendingSQL,
			keyArgs + ", text, jsonb, text, text, text, timestamptz, timestamptz, text, text, text, integer, text, jsonb, text",
			key + ", 'issue_credit', '{}', 'h', '', '', now(), now(), '', 'expire', 'rule', 1, '', '[]', ''", []string{"approvals_pkey"}},
		{"record_outcome", recordOutcomeSQL, keyArgs + ", text, text, timestamptz, text, jsonb, text, integer",
			key + ", 'approved', 'dana', now(), '', NULL, '', 1", []string{"approvals_pkey", "approval_decisions_accepted_round_idx"}},
		{"record_edit_refused", recordEditRefusedSQL, keyArgs + ", text, text", key + ", 'h', 'why'",
			[]string{"approval_decisions_accepted_round_idx"}},
		{"record_unresolved", recordUnresolvedSQL,
			keyArgs + ", integer, text, text, jsonb, text, text, timestamptz, text, timestamptz, timestamptz",
			"'acme', 'r10', 2, 1, 'refund_payment', 'k', '{}', 'h', '', now(), '', now(), now()", nil},
		{"record_resolved", recordResolvedSQL, keyArgs + ", integer, text, text, timestamptz, jsonb, text",
			"'acme', 'r10', 2, 1, 'applied', 'dana', now(), NULL, ''", []string{"resolutions_pkey"}},
		// A decision: the row's lock, the decision of record, the audit row.
		{"lock_step", lockStepForUpdateSQL, keyArgs, key, []string{"approvals_pkey"}},
		{"decision_of_record", decisionOfRecordSQL, keyArgs + ", integer", key + ", 1", []string{"approval_decisions_accepted_round_idx"}},
		{"insert_decision", insertDecisionSQL, keyArgs + strings.Repeat(", text", 10) + ", jsonb, text, integer, boolean", decided + ", NULL, '', 1, false", nil},
		{"lookup", lookupSQL, keyArgs, key, []string{"approvals_pkey", "approval_decisions_accepted_round_idx"}},
		// An answer about an unknown outcome.
		{"lock_round", lockRoundForUpdateSQL, keyArgs + ", integer", "'acme', 'r10', 2, 1", []string{"resolutions_pkey"}},
		{"answer_of_record", answerOfRecordSQL, keyArgs + ", integer", "'acme', 'r10', 2, 1", []string{"resolution_decisions_accepted_idx"}},
		{"insert_answer", insertResolutionDecisionSQL, keyArgs + ", integer, text, text, jsonb" + strings.Repeat(", text", 7), answer, nil},
		// The inbox's lists.
		{"list_pending", listPendingSQL, "text, timestamptz, integer", "'acme', now(), 100",
			[]string{"approvals_pending_by_deadline_idx", "approval_decisions_accepted_round_idx"}},
		{"list_needs_resolution", listNeedsResolutionSQL, "text, timestamptz, integer", "'acme', now(), 100",
			[]string{"approvals_mismatch_idx", "approvals_pending_by_deadline_idx", "approval_decisions_accepted_round_idx"}},
		{"list_decided", listDecidedSQL, "text, timestamptz, timestamptz, integer, integer", "'acme', now(), now(), 100, 50",
			[]string{"approvals_decided_idx", "approval_decisions_recent_idx", "approval_decisions_accepted_round_idx"}},
		{"list_unresolved", listUnresolvedSQL, "text, integer", "'acme', 100",
			[]string{"resolutions_pending_idx", "resolution_decisions_accepted_idx"}},
	}
	for _, st := range statements {
		_, err := conn.Exec(ctx, fmt.Sprintf("PREPARE %s (%s) AS %s", st.name, st.types, st.sql))
		require.NoError(t, err, st.name)
		rows, err := conn.Query(ctx, fmt.Sprintf("EXPLAIN EXECUTE %s (%s)", st.name, st.args))
		require.NoError(t, err, st.name)
		var lines []string
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			lines = append(lines, line)
		}
		require.NoError(t, rows.Err(), st.name)
		plan := strings.Join(lines, "\n")
		assert.NotContains(t, plan, "Seq Scan", "plan of %s:\n%s", st.name, plan)
		for _, index := range st.uses {
			// An index scan is "using" its index; a bitmap index scan is
			// "on" it.
			assert.Regexp(t, `(Scan( Backward)? using|Index Scan on) `+index+`\b`, plan, "plan of %s:\n%s", st.name, plan)
		}
	}
}
