package approvalstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PendingStat sums up the steps of one tenant's tool that wait for a
// decision.
type PendingStat struct {
	Tenant string `db:"tenant"`
	Tool   string `db:"tool"`
	// Pending is how many steps wait.
	Pending int64 `db:"pending"`
	// OldestRequestedAt is when the longest waiting of them paused.
	OldestRequestedAt time.Time `db:"oldest_requested_at"`
	// OldestAge is how long it has waited at the time PendingStats was
	// given; never negative.
	OldestAge time.Duration `db:"-"`
}

// pendingStatsSQL reads only the pending rows, through a partial index on
// state = 'pending': decided rows pile up forever, the pending ones stay
// few, so a scrape costs what is waiting, not what ever waited.
const pendingStatsSQL = `
SELECT tenant, tool, count(*) AS pending, min(requested_at) AS oldest_requested_at
FROM approvals
WHERE state = 'pending'
GROUP BY tenant, tool
ORDER BY tenant, tool`

// PendingStats returns, for each tenant and tool with steps waiting for a
// decision, how many wait and how long the oldest has waited at now. A
// tenant's tool with nothing pending is absent. It is the metrics' view of
// the approvals table (oncerun_approvals_pending and
// oncerun_approvals_oldest_pending_age_seconds); the caller bounds it with
// ctx.
func PendingStats(ctx context.Context, db DB, now time.Time) ([]PendingStat, error) {
	rows, err := db.Query(ctx, pendingStatsSQL)
	if err != nil {
		return nil, fmt.Errorf("count pending approvals: %w", err)
	}
	stats, err := pgx.CollectRows(rows, pgx.RowToStructByName[PendingStat])
	if err != nil {
		return nil, fmt.Errorf("count pending approvals: %w", err)
	}
	for i := range stats {
		// The run stamps requested_at with its workflow's clock; a worker
		// whose clock runs behind would otherwise report a negative age.
		stats[i].OldestAge = max(now.Sub(stats[i].OldestRequestedAt), 0)
	}
	return stats, nil
}
