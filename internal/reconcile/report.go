package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// finding is a drift about to be recorded.
type finding struct {
	Kind, Tenant, Tool, Key, RunID string
	Step                           int64
	ProviderID                     string
	Amount                         int64
	Currency, Detail               string
	Ours, Theirs                   json.RawMessage
	EffectAt                       time.Time
}

// record inserts the findings; one already recorded, acknowledged or not,
// is left as it is. It returns how many were new.
func record(ctx context.Context, pool *pgxpool.Pool, found []finding) (int, error) {
	if len(found) == 0 {
		return 0, nil
	}
	var batch pgx.Batch
	n := 0
	for _, f := range found {
		batch.Queue(`
INSERT INTO reconciliation_findings (kind, tenant, tool, key, run_id, step, provider_id, amount, currency, ours, theirs, detail, effect_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
ON CONFLICT (kind, tenant, key) DO NOTHING`,
			f.Kind, f.Tenant, f.Tool, f.Key, f.RunID, f.Step, f.ProviderID, f.Amount, f.Currency,
			jsonb(f.Ours), jsonb(f.Theirs), f.Detail, f.EffectAt,
		).Exec(func(tag pgconn.CommandTag) error {
			n += int(tag.RowsAffected())
			return nil
		})
	}
	if err := pool.SendBatch(ctx, &batch).Close(); err != nil {
		return n, fmt.Errorf("record findings: %w", err)
	}
	return n, nil
}

// jsonb is raw as a query argument: SQL NULL when empty, and JSON.
func jsonb(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(jsonValue(raw))
}

// findingColumns are the columns of a [Finding].
const findingColumns = `id, kind, tenant, tool, key, run_id, step, provider_id, amount, currency, detail,
       effect_at, found_at, acked_at, coalesce(acked_by, '') AS acked_by, ack_note`

// openReport sums up the open findings as of now.
func openReport(ctx context.Context, pool *pgxpool.Pool, now time.Time) (Report, error) {
	rep := Report{DriftAmount: map[string]int64{}, Findings: []Finding{}}
	rows, err := pool.Query(ctx, `
SELECT tenant, tool, currency, count(*)::int, coalesce(sum(abs(amount)), 0)::bigint
FROM reconciliation_findings
WHERE acked_at IS NULL
GROUP BY tenant, tool, currency
ORDER BY tenant, tool, currency`)
	if err != nil {
		return Report{}, fmt.Errorf("sum open findings: %w", err)
	}
	type label struct{ tenant, tool string }
	at := map[label]int{}
	var tenant, tool, cur string
	var count int
	var amount int64
	_, err = pgx.ForEachRow(rows, []any{&tenant, &tool, &cur, &count, &amount}, func() error {
		l := label{tenant, tool}
		i, ok := at[l]
		if !ok {
			i = len(rep.ByLabel)
			at[l] = i
			rep.ByLabel = append(rep.ByLabel, Drift{Tenant: tenant, Tool: tool, Amount: map[string]int64{}})
		}
		d := &rep.ByLabel[i]
		d.Count += count
		rep.DriftCount += count
		if cur != "" {
			d.Amount[cur] += amount
			rep.DriftAmount[cur] += amount
		}
		return nil
	})
	if err != nil {
		return Report{}, fmt.Errorf("sum open findings: %w", err)
	}
	rows, err = pool.Query(ctx, `
SELECT DISTINCT ON (tenant, tool) tenant, tool, id, effect_at
FROM reconciliation_findings
WHERE acked_at IS NULL
ORDER BY tenant, tool, effect_at, id`)
	if err != nil {
		return Report{}, fmt.Errorf("find the oldest open findings: %w", err)
	}
	var id int64
	var effectAt time.Time
	_, err = pgx.ForEachRow(rows, []any{&tenant, &tool, &id, &effectAt}, func() error {
		if i, ok := at[label{tenant, tool}]; ok {
			age := max(now.Sub(effectAt).Seconds(), 0)
			rep.ByLabel[i].OldestAgeSeconds, rep.ByLabel[i].OldestID = age, id
			rep.OldestUnreconciledAgeSeconds = max(rep.OldestUnreconciledAgeSeconds, age)
		}
		return nil
	})
	if err != nil {
		return Report{}, fmt.Errorf("find the oldest open findings: %w", err)
	}
	rows, err = pool.Query(ctx, `
SELECT `+findingColumns+`
FROM reconciliation_findings
WHERE acked_at IS NULL
ORDER BY effect_at, id
LIMIT $1`, MaxReportFindings)
	if err != nil {
		return Report{}, fmt.Errorf("list open findings: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[Finding])
	if err != nil {
		return Report{}, fmt.Errorf("list open findings: %w", err)
	}
	rep.Findings = append(rep.Findings, list...)
	return rep, nil
}

// Open sums up the findings nobody has acknowledged yet, without a pass:
// every worker refreshes its gauges with it, so that each shows what the
// table holds whichever worker ran the last pass.
func Open(ctx context.Context, pool *pgxpool.Pool) (Report, error) {
	return openReport(ctx, pool, time.Now())
}
