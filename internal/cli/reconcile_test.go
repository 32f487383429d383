package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/reconcile"
)

// reconcileEnv is a migrated database holding one undelivered message, and
// an Env whose ledger lists one refund oncerun has no record of.
func reconcileEnv(t *testing.T) (Env, *pgxpool.Pool) {
	t.Helper()
	db := pgtest.NewDB(t)
	pool, err := pgxpool.New(context.Background(), db.URL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(context.Background(), `
INSERT INTO outbox (tenant, run_id, step, seq, key, tool, args, args_hash, state, created_at)
VALUES ('acme', 'r1', 4, 1, 'v1/acme/r1/4/send_email', 'send_email', '{}', repeat('b', 64), 'failed', now() - interval '2 hours')`)
	require.NoError(t, err)
	ledger := reconcile.Source{
		Tool: "refund_payment",
		List: func(context.Context, time.Time) ([]reconcile.Entry, error) {
			return []reconcile.Entry{{Key: "v1/acme/r1/3/refund_payment", ProviderID: "re_1", Amount: 2500, Currency: "eur",
				Created: time.Now().Add(-time.Hour), Raw: json.RawMessage(`{"id":"re_1"}`)}}, nil
		},
		Record: func(json.RawMessage) (reconcile.Entry, error) { return reconcile.Entry{}, nil },
	}
	return Env{DatabaseURL: db.URL, User: "alice", Reconcile: func() ([]reconcile.Source, error) {
		return []reconcile.Source{ledger}, nil
	}}, pool
}

func TestReconcileCommandJSON(t *testing.T) {
	t.Parallel()
	env, _ := reconcileEnv(t)

	out, err := run(t, env, "reconcile", "--json")
	require.NoError(t, err, out)

	var rep struct {
		DriftCount  *int              `json:"drift_count"`
		DriftAmount map[string]int64  `json:"drift_amount"`
		OldestAge   *float64          `json:"oldest_unreconciled_age_seconds"`
		Findings    []json.RawMessage `json:"findings"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.NotNil(t, rep.DriftCount, out)
	require.NotNil(t, rep.OldestAge, out)
	assert.Equal(t, 2, *rep.DriftCount)
	assert.Equal(t, map[string]int64{"eur": 2500}, rep.DriftAmount)
	assert.InDelta(t, 7200, *rep.OldestAge, 60, "the undelivered message is two hours old")
	require.Len(t, rep.Findings, 2)
	var first map[string]any
	require.NoError(t, json.Unmarshal(rep.Findings[0], &first))
	assert.Equal(t, "undelivered", first["kind"])
	for _, name := range []string{"id", "kind", "tenant", "tool", "key", "run_id", "step", "provider_id", "amount",
		"currency", "detail", "effect_at", "found_at", "acked_at", "acked_by", "ack_note"} {
		assert.Contains(t, first, name)
	}
}

func TestReconcileCommandAcknowledges(t *testing.T) {
	t.Parallel()
	env, pool := reconcileEnv(t)
	out, err := run(t, env, "reconcile")
	require.NoError(t, err, out)
	assert.Contains(t, out, "open findings: 2; drift: 2500 eur")
	assert.Contains(t, out, "+2500 eur")
	var id int64
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT id FROM reconciliation_findings WHERE kind = 'under_recorded'`).Scan(&id))

	out, err = run(t, env, "reconcile", "--ack", fmt.Sprint(id), "--note", "refunded by hand")
	require.NoError(t, err, out)
	assert.Contains(t, out, fmt.Sprintf("acknowledged finding %d (under_recorded", id))
	assert.Contains(t, out, "as alice")

	out, err = run(t, env, "reconcile", "--json")
	require.NoError(t, err, out)
	var rep reconcile.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.Equal(t, 1, rep.DriftCount)
	assert.Empty(t, rep.DriftAmount)
}

func TestReconcileCommandBadInput(t *testing.T) {
	t.Parallel()
	env, _ := reconcileEnv(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"reconcile", "--ack", "1"}, "give --note"},
		{[]string{"reconcile", "--ack", "0", "--note", "x"}, "ids start at 1"},
		{[]string{"reconcile", "--ack", "999", "--note", "x"}, "no such finding"},
		{[]string{"reconcile", "--note", "x"}, "go with --ack"},
		{[]string{"reconcile", "--settlement", "1h", "--lookback", "1m"}, "Lookback"},
	}
	for _, tt := range tests {
		out, err := run(t, env, tt.args...)
		require.Error(t, err, tt.args)
		assert.Contains(t, out+err.Error(), tt.want)
	}
}
