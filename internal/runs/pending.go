package runs

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PendingApproval is a step waiting for a decision, as the approvals table
// lists it.
type PendingApproval struct {
	Tenant      string          `db:"tenant" json:"tenant"`
	RunID       string          `db:"run_id" json:"run_id"`
	Step        int64           `db:"step" json:"step"`
	Tool        string          `db:"tool" json:"tool"`
	Args        json.RawMessage `db:"args" json:"args"`
	ArgsHash    string          `db:"args_hash" json:"args_hash"`
	Goal        string          `db:"goal" json:"goal"`
	Reason      string          `db:"reason" json:"reason"`
	RequestedBy string          `db:"requested_by" json:"requested_by"`
	RequestedAt time.Time       `db:"requested_at" json:"requested_at"`
	Deadline    time.Time       `db:"deadline" json:"deadline"`
}

// Pending lists the steps waiting for a decision, oldest first; tenant ""
// lists every tenant's.
func (c *Client) Pending(ctx context.Context, tenant string) ([]PendingApproval, error) {
	if c.Pool == nil {
		return nil, fmt.Errorf("list pending approvals: the client has no database pool")
	}
	rows, err := c.Pool.Query(ctx, `
SELECT tenant, run_id, step, tool, args, args_hash, goal, reason, requested_by, requested_at, deadline
FROM approvals
WHERE state = 'pending' AND ($1 = '' OR tenant = $1)
ORDER BY requested_at, tenant, run_id, step`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list pending approvals: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[PendingApproval])
	if err != nil {
		return nil, fmt.Errorf("list pending approvals: %w", err)
	}
	if list == nil {
		list = []PendingApproval{}
	}
	return list, nil
}

// Unresolved is a step whose external effect's outcome is unknown, waiting
// for a person's resolve, as the resolutions table lists it.
type Unresolved struct {
	Tenant      string    `db:"tenant" json:"tenant"`
	RunID       string    `db:"run_id" json:"run_id"`
	Step        int64     `db:"step" json:"step"`
	Round       int       `db:"round" json:"round"`
	Tool        string    `db:"tool" json:"tool"`
	Key         string    `db:"key" json:"key"`
	FirstSentAt time.Time `db:"first_sent_at" json:"first_sent_at"`
	Known       string    `db:"known" json:"known"`
	Deadline    time.Time `db:"deadline" json:"deadline"`
}

// Unresolved lists the steps whose outcome waits to be resolved, oldest
// first; tenant "" lists every tenant's.
func (c *Client) Unresolved(ctx context.Context, tenant string) ([]Unresolved, error) {
	if c.Pool == nil {
		return nil, fmt.Errorf("list unresolved steps: the client has no database pool")
	}
	rows, err := c.Pool.Query(ctx, `
SELECT tenant, run_id, step, round, tool, key, first_sent_at, known, deadline
FROM resolutions
WHERE state = 'pending' AND ($1 = '' OR tenant = $1)
ORDER BY requested_at, tenant, run_id, step`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list unresolved steps: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[Unresolved])
	if err != nil {
		return nil, fmt.Errorf("list unresolved steps: %w", err)
	}
	return list, nil
}
