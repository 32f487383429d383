package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// maxMessages bounds the outbox messages one pass looks at.
const maxMessages = 10000

// message is an undelivered outbox row.
type message struct {
	Tenant    string    `db:"tenant"`
	RunID     string    `db:"run_id"`
	Step      int64     `db:"step"`
	Key       string    `db:"key"`
	Tool      string    `db:"tool"`
	State     string    `db:"state"`
	Detail    string    `db:"detail"`
	CreatedAt time.Time `db:"created_at"`
}

// undelivered finds the outbox messages older than the settlement window
// that were not delivered and have no finding yet. A pending message whose
// run is still open is left alone while it is younger than Lookback: the
// run may yet deliver it. A message in state unknown or failed is reported
// whatever its run does, since no run resends it. It returns the drift, how
// many messages it looked at, and how many it skipped because RunOpen
// failed.
func undelivered(ctx context.Context, cfg Config, w window) (found []finding, checked, skipped int, err error) {
	rows, err := cfg.Pool.Query(ctx, `
SELECT o.tenant, o.run_id, o.step, o.key, o.tool, o.state, o.detail, o.created_at
FROM outbox o
WHERE o.state <> 'delivered' AND o.created_at < $1
  AND NOT EXISTS (SELECT 1 FROM reconciliation_findings f
                  WHERE f.kind = 'undelivered' AND f.tenant = o.tenant AND f.key = o.key)
ORDER BY o.created_at
LIMIT $2`, w.cutoff, maxMessages)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("read undelivered outbox messages: %w", err)
	}
	msgs, err := pgx.CollectRows(rows, pgx.RowToStructByName[message])
	if err != nil {
		return nil, 0, 0, fmt.Errorf("read undelivered outbox messages: %w", err)
	}
	type run struct{ tenant, id string }
	open := map[run]bool{}
	failed := map[run]bool{}
	for _, m := range msgs {
		checked++
		if m.State == "pending" && cfg.RunOpen != nil && !m.CreatedAt.Before(w.since) {
			ref := run{m.Tenant, m.RunID}
			isOpen, known := open[ref]
			if !known && !failed[ref] {
				var err error
				isOpen, err = cfg.RunOpen(ctx, m.Tenant, m.RunID)
				if err != nil {
					failed[ref] = true
					cfg.Log.Warn("reconciliation could not tell whether a run is open; its undelivered messages wait for a later pass",
						zap.String("tenant", m.Tenant), zap.String("run_id", m.RunID), zap.Error(err))
				} else {
					open[ref] = isOpen
				}
			}
			if failed[ref] {
				skipped++
				continue
			}
			if isOpen {
				continue
			}
		}
		detail := fmt.Sprintf("outbox message %s is %s", m.Tool, m.State)
		if m.Detail != "" {
			detail += ": " + m.Detail
		}
		found = append(found, finding{
			Kind: KindUndelivered, Tenant: m.Tenant, Tool: m.Tool, Key: m.Key, RunID: m.RunID, Step: m.Step,
			Detail: detail, EffectAt: m.CreatedAt,
		})
	}
	return found, checked, skipped, nil
}
