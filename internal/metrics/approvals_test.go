package metrics_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/metrics"
	"github.com/oncerun/oncerun/internal/pgtest"
)

// pause records step 1 of run runID of tenant, a call of tool, as waiting
// for a decision since ago before now, the way a run does.
func pause(t *testing.T, pool *pgxpool.Pool, tenant, runID, tool string, ago time.Duration) approvalstore.Approval {
	t.Helper()
	at := time.Now().Add(-ago)
	a := approvalstore.Approval{Request: approvalstore.Request{
		Tenant: tenant, RunID: runID, Step: 1, Tool: tool, Args: json.RawMessage(`{}`),
		ArgsHash: strings.Repeat("c", 64), RequestedAt: at, Deadline: at.Add(72 * time.Hour),
	}}
	require.NoError(t, approvalstore.RecordPending(context.Background(), pool, a.Request))
	return a
}

// scrape gathers reg once, as a scrape does, and returns the value of each
// series by "<name> <tenant>/<tool>", or "<name>" for a series with neither
// label.
func scrape(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var tenant, tool string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "tenant":
					tenant = l.GetValue()
				case "tool":
					tool = l.GetValue()
				}
			}
			key := f.GetName()
			if tenant != "" || tool != "" {
				key += " " + tenant + "/" + tool
			}
			// A series is a gauge or a counter; the getter of the other
			// is nil and reads 0.
			out[key] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return out
}

func TestPendingApprovalsExposesCountsAndOldestAges(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 2)
	pause(t, pool, "acme", "r1", "issue_credit", 3*time.Hour)
	pause(t, pool, "acme", "r2", "issue_credit", time.Hour)
	pause(t, pool, "globex", "r1", "refund_payment", 30*time.Minute)
	decided := pause(t, pool, "globex", "r0", "issue_credit", 50*time.Hour)
	now := time.Now()
	decided.State, decided.DecidedBy, decided.DecidedAt = approvalstore.StateApproved, "dana", &now
	_, err := approvalstore.RecordOutcome(context.Background(), pool, decided)
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewPendingApprovals(pool, 0, nil))

	got := scrape(t, reg)

	assert.InDelta(t, 2, got["oncerun_approvals_pending acme/issue_credit"], 0)
	assert.InDelta(t, 1, got["oncerun_approvals_pending globex/refund_payment"], 0)
	assert.InDelta(t, (3 * time.Hour).Seconds(), got["oncerun_approvals_oldest_pending_age_seconds acme/issue_credit"], 60)
	assert.InDelta(t, (30 * time.Minute).Seconds(), got["oncerun_approvals_oldest_pending_age_seconds globex/refund_payment"], 60)
	assert.NotContains(t, got, "oncerun_approvals_pending globex/issue_credit", "a decided step counts for nothing")
	assert.NotContains(t, got, "oncerun_approvals_oldest_pending_age_seconds globex/issue_credit")
	assert.Len(t, got, 5, "two tenant/tool pairs, two gauges each, and the errors counter: %v", got)
}

// TestPendingApprovalsExposesTheGaugesByName checks the exposition as a
// scraper reads it: names, labels, help and type.
func TestPendingApprovalsExposesTheGaugesByName(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 2)
	pause(t, pool, "acme", "r1", "issue_credit", time.Hour)
	pause(t, pool, "acme", "r2", "issue_credit", 2*time.Hour)

	err := testutil.CollectAndCompare(metrics.NewPendingApprovals(pool, 0, nil), strings.NewReader(`
# HELP oncerun_approvals_pending Steps waiting for an approval decision, by tenant and tool, read from the approvals table at scrape time.
# TYPE oncerun_approvals_pending gauge
oncerun_approvals_pending{tenant="acme",tool="issue_credit"} 2
`), "oncerun_approvals_pending")
	require.NoError(t, err)
	assert.Equal(t, 3, testutil.CollectAndCount(metrics.NewPendingApprovals(pool, 0, nil)),
		"pending, oldest age and the errors counter")
}

// TestPendingApprovalsFailingQueryCostsOnlyItsGauges: a query that cannot
// finish in time (the table is locked) is bounded by the timeout, counted
// and logged; /metrics still gathers, without the gauges.
func TestPendingApprovalsFailingQueryCostsOnlyItsGauges(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 2)
	pause(t, pool, "acme", "r1", "issue_credit", time.Hour)
	lock, err := pool.Begin(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = lock.Rollback(context.Background()) })
	_, err = lock.Exec(context.Background(), "LOCK TABLE approvals IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	m := metrics.New(reg)
	m.ToolCall("issue_credit", metrics.OutcomeExecuted)
	reg.MustRegister(metrics.NewPendingApprovals(pool, 200*time.Millisecond, nil))

	scraped := make(chan map[string]float64, 1)
	go func() { scraped <- scrape(t, reg) }()
	var got map[string]float64
	select {
	case got = <-scraped:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the scrape waits for the locked table: nothing bounds its query")
	}

	assert.Equal(t, map[string]float64{
		"oncerun_tool_calls_total /issue_credit": 1,
		"oncerun_approvals_stats_errors_total":   1,
	}, got, "the rest of /metrics, the failure counted, no approvals gauges")
}
