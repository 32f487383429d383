package runs

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/oncerun/oncerun/internal/keys"
)

// Summary is one run as Temporal's visibility lists it: no query is sent
// to it, so a list of many runs costs one request.
type Summary struct {
	RunID string `json:"run_id"`
	// Status is Temporal's status of the run's latest execution: running,
	// completed, failed, canceled, terminated or timed_out.
	Status    string     `json:"status"`
	StartedAt time.Time  `json:"started_at"`
	ClosedAt  *time.Time `json:"closed_at,omitempty"`
}

// RunPage is one page of a tenant's runs, newest first, and the token of
// the next page (none after the last).
type RunPage struct {
	Runs []Summary
	Next []byte
}

// agentRunType is the workflow type of every run.
const agentRunType = "AgentRun"

// List returns a page of the tenant's runs from Temporal's visibility
// store in its order: open runs first, the most recently started first,
// then closed runs, the most recently closed first (SQL visibility stores
// take no ORDER BY; Elasticsearch orders alike). A run continued as new is
// listed once, by its open (or last) execution. token is the page token of
// the previous page, nil for the first.
func (c *Client) List(ctx context.Context, tenant string, size int, token []byte) (RunPage, error) {
	// The tenant is path-escaped in the prefix: no quote can end the
	// query's string.
	prefix := keys.WorkflowID(tenant, "")
	resp, err := c.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		PageSize:      int32(size),
		NextPageToken: token,
		Query: fmt.Sprintf("WorkflowType = '%s' AND WorkflowId STARTS_WITH '%s' AND ExecutionStatus != 'ContinuedAsNew'",
			agentRunType, prefix),
	})
	if err != nil {
		return RunPage{}, fmt.Errorf("list the runs of tenant %s: %w", tenant, err)
	}
	page := RunPage{Runs: make([]Summary, 0, len(resp.Executions)), Next: resp.NextPageToken}
	for _, e := range resp.Executions {
		id, err := url.PathUnescape(strings.TrimPrefix(e.GetExecution().GetWorkflowId(), prefix))
		if err != nil {
			continue
		}
		s := Summary{RunID: id, Status: statusName(e.GetStatus()), StartedAt: e.GetStartTime().AsTime()}
		if ct := e.GetCloseTime(); ct != nil && e.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			at := ct.AsTime()
			s.ClosedAt = &at
		}
		page.Runs = append(page.Runs, s)
	}
	return page, nil
}

// statusName is Temporal's execution status in lower case, without its
// prefix: WORKFLOW_EXECUTION_STATUS_TIMED_OUT is timed_out.
func statusName(s enumspb.WorkflowExecutionStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "WORKFLOW_EXECUTION_STATUS_"))
}
