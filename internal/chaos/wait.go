package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/oncerun/oncerun/internal/approvalstore"
)

// wait is a step's approvals row as it stands: why the step waits or
// waited (approvalstore.KindRule or KindLimit) and in which round. A
// decision applies to the row's wait of the moment.
type wait struct {
	kind  string
	round int
}

// Which rows readWaits reads.
const (
	// waitsOpen: the rows the harness may still decide, those pending and
	// those that need resolution (a decision of record not applied, or
	// applied otherwise).
	waitsOpen = false
	// waitsAll: every row, the decided too.
	waitsAll = true
)

// waits reads the current wait of the runs' steps from the approvals
// store; all reads the decided steps too.
func (h *harness) waits(ctx context.Context, all bool) (map[stepRef]wait, error) {
	return readWaits(ctx, h.pool, tenant, 3*len(h.runs)+10, all)
}

// readWaits reads the tenant's approvals rows, at most limit of each list.
func readWaits(ctx context.Context, db approvalstore.DB, tenantID string, limit int, all bool) (map[stepRef]wait, error) {
	now := time.Now()
	page := approvalstore.Page{Tenant: tenantID, Now: now, Cutoff: now, Limit: limit}
	out := map[stepRef]wait{}
	add := func(a approvalstore.Approval) {
		out[stepRef{a.RunID, a.Step}] = wait{kind: a.Kind, round: max(a.Round, 1)}
	}
	pending, err := approvalstore.PendingApprovals(ctx, db, tenantID)
	if err != nil {
		return nil, fmt.Errorf("read the approvals: %w", err)
	}
	for _, a := range pending {
		add(a)
	}
	lists := []func(context.Context, approvalstore.DB, approvalstore.Page) ([]approvalstore.Listed, error){approvalstore.ListNeedsResolution}
	if all {
		lists = append(lists, approvalstore.ListDecided)
	}
	for _, list := range lists {
		rows, err := list(ctx, db, page)
		if err != nil {
			return nil, fmt.Errorf("read the approvals: %w", err)
		}
		if len(rows) >= limit {
			return nil, fmt.Errorf("read the approvals: %d rows or more, more than the runs have steps", limit)
		}
		for _, r := range rows {
			add(r.Approval)
		}
	}
	return out, nil
}
