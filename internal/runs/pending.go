package runs

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/oncerun/oncerun/internal/approvalstore"
)

// PendingApproval is a step waiting for a decision, as `oncerun approvals
// --json` prints it.
type PendingApproval struct {
	Tenant   string          `json:"tenant"`
	RunID    string          `json:"run_id"`
	Step     int64           `json:"step"`
	Tool     string          `json:"tool"`
	Args     json.RawMessage `json:"args"`
	ArgsHash string          `json:"args_hash"`
	Goal     string          `json:"goal"`
	Reason   string          `json:"reason"`
	// Kind is "rule" when the tool's approval rule asked, "limit" when
	// the step would cross a spend limit (Reason says which).
	Kind        string    `json:"kind"`
	RequestedBy string    `json:"requested_by"`
	RequestedAt time.Time `json:"requested_at"`
	Deadline    time.Time `json:"deadline"`
}

// Pending lists the steps waiting for a decision, nearest deadline first; tenant ""
// lists every tenant's.
func (c *Client) Pending(ctx context.Context, tenant string) ([]PendingApproval, error) {
	if c.Pool == nil {
		return nil, errors.New("list pending approvals: the client has no database pool")
	}
	rows, err := approvalstore.PendingApprovals(ctx, c.Pool, tenant)
	if err != nil {
		return nil, err
	}
	list := make([]PendingApproval, 0, len(rows))
	for _, a := range rows {
		list = append(list, PendingApproval{Tenant: a.Tenant, RunID: a.RunID, Step: a.Step, Tool: a.Tool, Args: a.Args,
			ArgsHash: a.ArgsHash, Goal: a.Goal, Reason: a.Reason, Kind: a.Kind, RequestedBy: a.RequestedBy, RequestedAt: a.RequestedAt,
			Deadline: a.Deadline})
	}
	return list, nil
}

// Unresolved is a step whose external effect's outcome is unknown, waiting
// for a person's resolve.
type Unresolved struct {
	Tenant      string    `json:"tenant"`
	RunID       string    `json:"run_id"`
	Step        int64     `json:"step"`
	Round       int       `json:"round"`
	Tool        string    `json:"tool"`
	Key         string    `json:"key"`
	FirstSentAt time.Time `json:"first_sent_at"`
	Known       string    `json:"known"`
	Deadline    time.Time `json:"deadline"`
}

// Unresolved lists the steps whose outcome waits to be resolved, oldest
// first; tenant "" lists every tenant's.
func (c *Client) Unresolved(ctx context.Context, tenant string) ([]Unresolved, error) {
	if c.Pool == nil {
		return nil, errors.New("list unresolved steps: the client has no database pool")
	}
	rows, err := approvalstore.PendingResolutions(ctx, c.Pool, tenant)
	if err != nil {
		return nil, err
	}
	list := make([]Unresolved, 0, len(rows))
	for _, r := range rows {
		list = append(list, Unresolved{Tenant: r.Tenant, RunID: r.RunID, Step: r.Step, Round: r.Round, Tool: r.Tool,
			Key: r.Key, FirstSentAt: r.FirstSentAt, Known: r.Known, Deadline: r.Deadline})
	}
	return list, nil
}
