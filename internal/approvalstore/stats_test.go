package approvalstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/pgtest"
)

// statsT0 is when the first step of the stats tests paused.
var statsT0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// pauseStep records step 1 of run runID of tenant, a call of tool, as
// pending since requestedAt, the way a run does.
func pauseStep(t *testing.T, pool *pgxpool.Pool, tenant, runID, tool string, requestedAt time.Time) Approval {
	t.Helper()
	a := Approval{Request: Request{
		Tenant: tenant, RunID: runID, Step: 1, Tool: tool, Args: json.RawMessage(`{}`),
		ArgsHash: strings.Repeat("c", 64), RequestedAt: requestedAt, Deadline: requestedAt.Add(72 * time.Hour),
	}}
	require.NoError(t, RecordPending(context.Background(), pool, a.Request))
	return a
}

// decideStep records that the run applied state to the pending step a at
// decidedAt.
func decideStep(t *testing.T, pool *pgxpool.Pool, a Approval, state string, decidedAt time.Time) {
	t.Helper()
	a.State, a.DecidedBy, a.DecidedAt = state, "dana", &decidedAt
	pending, err := RecordOutcome(context.Background(), pool, a)
	require.NoError(t, err)
	require.True(t, pending, "step of run %s was pending", a.RunID)
}

// TestPendingStatsCountsWaitingStepsByTenantAndTool: each tenant's tool
// gets its count of pending steps and the age of the oldest at the time
// given; decided steps, however old, count for nothing.
func TestPendingStatsCountsWaitingStepsByTenantAndTool(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 2)
	pauseStep(t, pool, "acme", "r1", "issue_credit", statsT0)
	pauseStep(t, pool, "acme", "r2", "issue_credit", statsT0.Add(time.Hour))
	pauseStep(t, pool, "acme", "r3", "refund_payment", statsT0.Add(2*time.Hour))
	pauseStep(t, pool, "globex", "r1", "issue_credit", statsT0.Add(30*time.Minute))
	// Older than every pending step: they would change the ages if counted.
	decideStep(t, pool, pauseStep(t, pool, "acme", "r0", "issue_credit", statsT0.Add(-48*time.Hour)),
		StateApproved, statsT0.Add(-47*time.Hour))
	decideStep(t, pool, pauseStep(t, pool, "globex", "r0", "refund_payment", statsT0.Add(-96*time.Hour)),
		StateExpired, statsT0.Add(-24*time.Hour))

	now := statsT0.Add(3 * time.Hour)
	got, err := PendingStats(context.Background(), pool, now)
	require.NoError(t, err)
	for i := range got {
		got[i].OldestRequestedAt = got[i].OldestRequestedAt.UTC()
	}
	assert.Equal(t, []PendingStat{
		{Tenant: "acme", Tool: "issue_credit", Pending: 2, OldestRequestedAt: statsT0, OldestAge: 3 * time.Hour},
		{Tenant: "acme", Tool: "refund_payment", Pending: 1, OldestRequestedAt: statsT0.Add(2 * time.Hour), OldestAge: time.Hour},
		{Tenant: "globex", Tool: "issue_credit", Pending: 1, OldestRequestedAt: statsT0.Add(30 * time.Minute), OldestAge: 150 * time.Minute},
	}, got)
}

// TestPendingStatsNeverReportsANegativeAge: a step stamped by a clock
// ahead of the reader's has waited no time, not less than none.
func TestPendingStatsNeverReportsANegativeAge(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 2)
	pauseStep(t, pool, "acme", "r1", "issue_credit", statsT0)

	got, err := PendingStats(context.Background(), pool, statsT0.Add(-time.Second))
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, time.Duration(0), got[0].OldestAge)
}

// TestPendingStatsReadsOnlyThePendingIndex checks the plan of the scrape's
// statement on a table of mostly decided steps: it reads the pending rows
// through a partial index, never the whole table, so every scrape does not
// get slower as decided steps pile up.
func TestPendingStatsReadsOnlyThePendingIndex(t *testing.T) {
	t.Parallel()
	conn := pgtest.Connect(t, pgtest.NewDB(t))
	ctx := context.Background()
	_, err := conn.Exec(ctx, `
INSERT INTO approvals (tenant, run_id, step, tool, args, args_hash, state, requested_at, deadline, decided_by, decided_at)
SELECT t, 'r' || g, 1, CASE WHEN g % 3 = 0 THEN 'refund_payment' ELSE 'issue_credit' END, '{}', repeat('a', 64),
       CASE WHEN g % 100 = 0 THEN 'pending' ELSE 'approved' END,
       now() - make_interval(secs => g), now() + interval '7 days',
       CASE WHEN g % 100 = 0 THEN NULL ELSE 'dana' END,
       CASE WHEN g % 100 = 0 THEN NULL ELSE now() - make_interval(secs => g) + interval '1 minute' END
FROM generate_series(1, 20000) g, unnest(ARRAY['acme', 'other']) t`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "ANALYZE approvals")
	require.NoError(t, err)

	rows, err := conn.Query(ctx, "EXPLAIN "+pendingStatsSQL)
	require.NoError(t, err)
	var lines []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		lines = append(lines, line)
	}
	require.NoError(t, rows.Err())
	plan := strings.Join(lines, "\n")
	assert.NotContains(t, plan, "Seq Scan", "plan:\n%s", plan)
	// Either partial index on state = 'pending' holds exactly the rows.
	assert.Regexp(t, `(Scan using|Index Scan on) approvals_pending(_deadline)?_idx\b`, plan, fmt.Sprintf("plan:\n%s", plan))
}
