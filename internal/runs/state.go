package runs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/oncerun/oncerun/workflows"
)

// States tells whether runs are still open. [*Client] answers from
// Temporal; tests answer with fakes.
type States interface {
	// RunState reports whether the tenant's run is open, and its state in
	// words. A run Temporal does not know is closed.
	RunState(ctx context.Context, tenant, runID string) (open bool, state string, err error)
}

// RunState reports whether the tenant's run is open (its workflow is
// running), and its state as Temporal words it, lower case: running,
// completed, failed, canceled, terminated, continued_as_new or timed_out.
// A run Temporal does not know is closed, in state "unknown". Only
// c.Temporal is used.
func (c *Client) RunState(ctx context.Context, tenant, runID string) (bool, string, error) {
	desc, err := c.Temporal.DescribeWorkflowExecution(ctx, workflows.WorkflowID(tenant, runID), "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return false, "unknown", nil
	case err != nil:
		return false, "", fmt.Errorf("describe run %s of tenant %s: %w", runID, tenant, err)
	}
	status := desc.GetWorkflowExecutionInfo().GetStatus()
	word := strings.ToLower(strings.TrimPrefix(status.String(), "WORKFLOW_EXECUTION_STATUS_"))
	return status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, word, nil
}
