package runs

import (
	"context"
	"errors"
	"time"

	"github.com/oncerun/oncerun/internal/approvalstore"
)

// PendingApproval is a step waiting for a decision, as `oncerun approvals
// --json` prints it: the step's request (approvalstore.Request).
type PendingApproval = approvalstore.Request

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
		list = append(list, a.Request)
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

// Asked is a round of questions a step's server asked a person, waiting
// for an answer.
type Asked = approvalstore.Question

// Questions lists the rounds of questions waiting for an answer, the
// nearest deadline first; tenant "" lists every tenant's.
func (c *Client) Questions(ctx context.Context, tenant string) ([]Asked, error) {
	if c.Pool == nil {
		return nil, errors.New("list questions: the client has no database pool")
	}
	return approvalstore.PendingQuestions(ctx, c.Pool, tenant, time.Now())
}
