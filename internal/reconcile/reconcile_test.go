package reconcile_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/reconcile"
)

const tool = "refund_payment"

// fixture is a migrated database, a ledger the test fills and the clock
// of the pass.
type fixture struct {
	pool   *pgxpool.Pool
	now    time.Time
	ledger []reconcile.Entry
}

func setup(t *testing.T) *fixture {
	t.Helper()
	return &fixture{pool: pgtest.NewPool(t, 4), now: time.Now().UTC().Truncate(time.Millisecond)}
}

// key is the key of step step of run run of tenant acme calling
// refund_payment.
func key(t *testing.T, run string, step int64) string {
	t.Helper()
	k, err := keys.New("acme", run, step, tool)
	require.NoError(t, err)
	return k.String()
}

// refund is the provider's record of a refund, and our stored result of it.
func refund(id, k string, amount int64, cur string, created time.Time) reconcile.Entry {
	raw := fmt.Sprintf(`{"id":%q,"payment_id":"pay_1","amount":%d,"currency":%q,"status":"succeeded","idempotency_key":%q,"created":%d}`,
		id, amount, cur, k, created.Unix())
	return reconcile.Entry{Key: k, ProviderID: id, Amount: amount, Currency: cur, Created: created, Raw: json.RawMessage(raw)}
}

// source reads the fixture's ledger as a provider would list it.
func (f *fixture) source() reconcile.Source {
	return reconcile.Source{
		Tool: tool,
		List: func(_ context.Context, since time.Time) ([]reconcile.Entry, error) {
			var out []reconcile.Entry
			for _, e := range f.ledger {
				if !e.Created.Before(since) {
					out = append(out, e)
				}
			}
			return out, nil
		},
		Record: func(result json.RawMessage) (reconcile.Entry, error) {
			var r struct {
				ID       string `json:"id"`
				Amount   int64  `json:"amount"`
				Currency string `json:"currency"`
			}
			if err := json.Unmarshal(result, &r); err != nil {
				return reconcile.Entry{}, err
			}
			return reconcile.Entry{ProviderID: r.ID, Amount: r.Amount, Currency: r.Currency}, nil
		},
	}
}

func (f *fixture) config() reconcile.Config {
	return reconcile.Config{Pool: f.pool, Sources: []reconcile.Source{f.source()}, Now: func() time.Time { return f.now }}
}

// ours inserts our row for key k in state, made at created; a completed
// row's result is e's record.
func (f *fixture) ours(t *testing.T, k, state string, e reconcile.Entry, created time.Time) {
	t.Helper()
	parsed, err := keys.Parse(k)
	require.NoError(t, err)
	_, err = f.pool.Exec(context.Background(), `
INSERT INTO idempotency_keys (tenant, key, run_id, step, tool, state, args_hash, result, failure, lease_owner, lease_expiry,
                              created_at, completed_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, repeat('a', 64),
        CASE WHEN $6 = 'completed' THEN $7::jsonb END,
        CASE WHEN $6 = 'failed' THEN '{"error":"connection refused"}'::jsonb END,
        CASE WHEN $6 = 'in_flight' THEN 'w' END, CASE WHEN $6 = 'in_flight' THEN $8::timestamptz + interval '1 minute' END,
        $8, CASE WHEN $6 = 'completed' THEN $8::timestamptz + interval '1 second' END, $8::timestamptz + interval '30 days')`,
		parsed.Tenant, k, parsed.RunID, parsed.Step, parsed.Tool, state, string(e.Raw), created)
	require.NoError(t, err)
}

// message inserts an outbox message of run run in state, made at created.
func (f *fixture) message(t *testing.T, run string, step int64, state string, created time.Time) string {
	t.Helper()
	k, err := keys.New("acme", run, step, "send_email")
	require.NoError(t, err)
	_, err = f.pool.Exec(context.Background(), `
INSERT INTO outbox (tenant, run_id, step, seq, key, tool, args, args_hash, state, created_at)
VALUES ('acme', $1, $2, 1, $3, 'send_email', '{"to":"a@example.com"}', repeat('b', 64), $4, $5)`,
		run, step, k.String(), state, created)
	require.NoError(t, err)
	return k.String()
}

// got is a finding's identity and drift, for comparing.
type got struct {
	Kind, Tenant, Key string
	Amount            int64
	Currency          string
}

func summary(fs []reconcile.Finding) []got {
	out := []got{}
	for _, f := range fs {
		out = append(out, got{f.Kind, f.Tenant, f.Key, f.Amount, f.Currency})
	}
	return out
}

func TestPassComparesLedgerWithOurKeys(t *testing.T) {
	t.Parallel()
	hour := time.Hour
	tests := []struct {
		name string
		// arrange fills the ledger and the tables; it returns the findings
		// wanted and a text each finding's detail holds.
		arrange func(t *testing.T, f *fixture) ([]got, string)
	}{
		{"both agree: no finding", func(t *testing.T, f *fixture) ([]got, string) {
			k := key(t, "r1", 3)
			e := refund("re_1", k, 2500, "eur", f.now.Add(-hour))
			f.ledger = append(f.ledger, e)
			f.ours(t, k, "completed", e, f.now.Add(-hour))
			return []got{}, ""
		}},
		{"the provider has a key we lack", func(t *testing.T, f *fixture) ([]got, string) {
			k := key(t, "r1", 3)
			f.ledger = append(f.ledger, refund("re_1", k, 2500, "EUR", f.now.Add(-hour)))
			return []got{{reconcile.KindUnderRecorded, "acme", k, 2500, "eur"}}, "no row"
		}},
		{"the provider has a key we hold as failed", func(t *testing.T, f *fixture) ([]got, string) {
			k := key(t, "r1", 3)
			e := refund("re_1", k, 2500, "eur", f.now.Add(-hour))
			f.ledger = append(f.ledger, e)
			f.ours(t, k, "failed", e, f.now.Add(-hour))
			return []got{{reconcile.KindUnderRecorded, "acme", k, 2500, "eur"}}, "failed"
		}},
		{"the provider has a key that is not ours", func(t *testing.T, f *fixture) ([]got, string) {
			f.ledger = append(f.ledger, refund("re_9", "dashboard-7", 900, "eur", f.now.Add(-hour)))
			return []got{{reconcile.KindUnderRecorded, "", "dashboard-7", 900, "eur"}}, "not oncerun's"
		}},
		{"we completed a key the provider does not list", func(t *testing.T, f *fixture) ([]got, string) {
			k := key(t, "r1", 3)
			f.ours(t, k, "completed", refund("re_1", k, 2500, "eur", f.now.Add(-hour)), f.now.Add(-hour))
			return []got{{reconcile.KindOverRecorded, "acme", k, -2500, "eur"}}, "does not list"
		}},
		{"amounts differ", func(t *testing.T, f *fixture) ([]got, string) {
			k := key(t, "r1", 3)
			f.ledger = append(f.ledger, refund("re_1", k, 3000, "eur", f.now.Add(-hour)))
			f.ours(t, k, "completed", refund("re_1", k, 2500, "eur", f.now.Add(-hour)), f.now.Add(-hour))
			return []got{{reconcile.KindAmountMismatch, "acme", k, 500, "eur"}}, "oncerun recorded 2500 eur"
		}},
		{"currencies differ", func(t *testing.T, f *fixture) ([]got, string) {
			k := key(t, "r1", 3)
			f.ledger = append(f.ledger, refund("re_1", k, 2500, "usd", f.now.Add(-hour)))
			f.ours(t, k, "completed", refund("re_1", k, 2500, "eur", f.now.Add(-hour)), f.now.Add(-hour))
			return []got{{reconcile.KindAmountMismatch, "acme", k, 2500, "usd"}}, "oncerun recorded 2500 eur"
		}},
		{"the provider holds two effects under one key", func(t *testing.T, f *fixture) ([]got, string) {
			k := key(t, "r1", 3)
			e := refund("re_1", k, 2500, "eur", f.now.Add(-hour))
			f.ledger = append(f.ledger, e, refund("re_2", k, 2500, "eur", f.now.Add(-hour+time.Second)))
			f.ours(t, k, "completed", e, f.now.Add(-hour))
			return []got{{reconcile.KindAmountMismatch, "acme", k, 2500, "eur"}}, "2 effects"
		}},
		{"effects inside the settlement window are not compared", func(t *testing.T, f *fixture) ([]got, string) {
			f.ledger = append(f.ledger, refund("re_1", key(t, "r1", 3), 2500, "eur", f.now.Add(-time.Minute)))
			k := key(t, "r2", 1)
			f.ours(t, k, "completed", refund("re_2", k, 100, "eur", f.now.Add(-time.Minute)), f.now.Add(-time.Minute))
			return []got{}, ""
		}},
		{"our keys older than the lookback are not compared", func(t *testing.T, f *fixture) ([]got, string) {
			k := key(t, "r1", 3)
			f.ours(t, k, "completed", refund("re_1", k, 2500, "eur", f.now.Add(-8*24*hour)), f.now.Add(-8*24*hour))
			return []got{}, ""
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			want, detail := tt.arrange(t, f)

			rep, err := reconcile.Pass(context.Background(), f.config())
			require.NoError(t, err)

			assert.Equal(t, want, summary(rep.Findings))
			assert.Equal(t, len(want), rep.DriftCount)
			assert.Equal(t, len(want), rep.Recorded)
			for _, fd := range rep.Findings {
				assert.Contains(t, fd.Detail, detail)
				assert.Equal(t, tool, fd.Tool)
			}
		})
	}
}

func TestPassReportsUndeliveredMessages(t *testing.T) {
	t.Parallel()
	f := setup(t)
	hour := time.Hour
	closed := f.message(t, "closed", 1, "pending", f.now.Add(-hour))
	f.message(t, "open", 1, "pending", f.now.Add(-hour))
	stale := f.message(t, "open", 2, "pending", f.now.Add(-8*24*hour))
	failed := f.message(t, "open", 3, "failed", f.now.Add(-hour))
	f.message(t, "closed", 2, "pending", f.now.Add(-time.Minute))
	f.message(t, "closed", 3, "delivered", f.now.Add(-hour))
	f.message(t, "unknown", 1, "pending", f.now.Add(-hour))
	cfg := f.config()
	cfg.RunOpen = func(_ context.Context, tenant, run string) (bool, error) {
		require.Equal(t, "acme", tenant)
		if run == "unknown" {
			return false, errors.New("temporal unavailable")
		}
		return run == "open", nil
	}

	rep, err := reconcile.Pass(context.Background(), cfg)
	require.NoError(t, err)

	var found []string
	for _, fd := range rep.Findings {
		assert.Equal(t, reconcile.KindUndelivered, fd.Kind)
		found = append(found, fd.Key)
	}
	assert.ElementsMatch(t, []string{closed, stale, failed}, found,
		"a message of a closed run, one older than the lookback, and a failed one; not the open run's, the fresh or the delivered one")
	assert.Equal(t, 1, rep.Skipped, "the run that could not be described waits")

	cfg.RunOpen = nil
	rep, err = reconcile.Pass(context.Background(), cfg)
	require.NoError(t, err)
	assert.Equal(t, 5, rep.DriftCount, "without RunOpen every settled undelivered message is reported")
}

func TestSecondPassRecordsNothingTwice(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.ledger = append(f.ledger, refund("re_1", key(t, "r1", 3), 2500, "eur", f.now.Add(-time.Hour)))
	f.message(t, "r1", 4, "failed", f.now.Add(-time.Hour))

	first, err := reconcile.Pass(context.Background(), f.config())
	require.NoError(t, err)
	require.Equal(t, 2, first.Recorded)
	f.now = f.now.Add(10 * time.Minute)
	second, err := reconcile.Pass(context.Background(), f.config())
	require.NoError(t, err)

	assert.Zero(t, second.Recorded)
	assert.Equal(t, 2, second.DriftCount)
	assert.Equal(t, summary(first.Findings), summary(second.Findings))
	assert.Equal(t, 2, count(t, f.pool))
}

func TestAcknowledgedFindingIsNotRaisedAgain(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.ledger = append(f.ledger, refund("re_1", key(t, "r1", 3), 2500, "eur", f.now.Add(-time.Hour)))
	ctx := context.Background()
	rep, err := reconcile.Pass(ctx, f.config())
	require.NoError(t, err)
	require.Len(t, rep.Findings, 1)

	acked, err := reconcile.Ack(ctx, f.pool, rep.Findings[0].ID, "alice", "refunded by hand in the dashboard")
	require.NoError(t, err)
	assert.Equal(t, "alice", acked.AckedBy)
	require.NotNil(t, acked.AckedAt)

	rep, err = reconcile.Pass(ctx, f.config())
	require.NoError(t, err)
	assert.Zero(t, rep.Recorded)
	assert.Zero(t, rep.DriftCount)
	assert.Empty(t, rep.Findings)
	assert.Empty(t, rep.DriftAmount)
	assert.Zero(t, rep.OldestUnreconciledAgeSeconds)
	assert.Equal(t, 1, count(t, f.pool))
}

func TestReportSumsOpenFindings(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.ledger = append(f.ledger,
		refund("re_1", key(t, "r1", 3), 2500, "eur", f.now.Add(-3*time.Hour)),
		refund("re_2", key(t, "r2", 1), 700, "usd", f.now.Add(-time.Hour)))
	k := key(t, "r3", 1)
	f.ours(t, k, "completed", refund("re_3", k, 400, "eur", f.now.Add(-time.Hour)), f.now.Add(-time.Hour))

	rep, err := reconcile.Pass(context.Background(), f.config())
	require.NoError(t, err)

	assert.Equal(t, 3, rep.DriftCount)
	assert.Equal(t, map[string]int64{"eur": 2900, "usd": 700}, rep.DriftAmount, "absolute amounts")
	assert.InDelta(t, (3 * time.Hour).Seconds(), rep.OldestUnreconciledAgeSeconds, 1)
	require.Len(t, rep.ByLabel, 1)
	assert.Equal(t, reconcile.Drift{Tenant: "acme", Tool: tool, Count: 3, Amount: rep.DriftAmount,
		OldestAgeSeconds: rep.OldestUnreconciledAgeSeconds, OldestID: rep.Findings[0].ID}, rep.ByLabel[0])
	assert.Equal(t, key(t, "r1", 3), rep.Findings[0].Key, "oldest effect first")

	b, err := json.Marshal(rep)
	require.NoError(t, err)
	var obj map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &obj))
	for _, name := range []string{"drift_count", "drift_amount", "oldest_unreconciled_age_seconds", "findings"} {
		assert.Contains(t, obj, name)
	}
}

func TestPassGoesOnWhenALedgerFails(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.ledger = append(f.ledger, refund("re_1", key(t, "r1", 3), 2500, "eur", f.now.Add(-time.Hour)))
	cfg := f.config()
	cfg.Sources = append(cfg.Sources, reconcile.Source{
		Tool: "send_sms",
		List: func(context.Context, time.Time) ([]reconcile.Entry, error) {
			return nil, errors.New("503 from provider")
		},
		Record: cfg.Sources[0].Record,
	})

	rep, err := reconcile.Pass(context.Background(), cfg)
	require.ErrorContains(t, err, "503 from provider")
	assert.Equal(t, 1, rep.DriftCount, "the other source was compared")
}

func TestPassLogsAnErrorPastTheAlertAge(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.ledger = append(f.ledger, refund("re_1", key(t, "r1", 3), 2500, "eur", f.now.Add(-2*time.Hour)))
	for _, tt := range []struct {
		alertAge time.Duration
		logged   int
	}{{3 * time.Hour, 0}, {time.Hour, 1}} {
		core, logs := observer.New(zapcore.ErrorLevel)
		cfg := f.config()
		cfg.Log, cfg.AlertAge = zap.New(core), tt.alertAge
		rep, err := reconcile.Pass(context.Background(), cfg)
		require.NoError(t, err)
		lines := logs.FilterMessageSnippet("alert age").All()
		require.Len(t, lines, tt.logged, "alert age %s", tt.alertAge)
		if tt.logged > 0 {
			fields := lines[0].ContextMap()
			assert.Equal(t, "acme", fields["tenant"])
			assert.Equal(t, tool, fields["tool"])
			assert.Equal(t, rep.Findings[0].ID, fields["finding_id"])
			assert.Equal(t, 2*time.Hour, fields["age"])
		}
	}
}

func TestPassRefusesABadConfig(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cfg := f.config()
	cfg.Sources = append(cfg.Sources, f.source())
	_, err := reconcile.Pass(context.Background(), cfg)
	require.ErrorContains(t, err, "two sources")
	cfg = f.config()
	cfg.Settlement, cfg.Lookback = time.Hour, time.Minute
	_, err = reconcile.Pass(context.Background(), cfg)
	require.ErrorContains(t, err, "Lookback")
}

func count(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM reconciliation_findings`).Scan(&n))
	return n
}
