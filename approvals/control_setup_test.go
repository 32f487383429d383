package approvals

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/sdkfake"
	"github.com/oncerun/oncerun/workflows"
)

// errTemporalDown is what every call answers with Temporal out of reach.
var errTemporalDown = serviceerror.NewUnavailable("connection refused")

// UpdateWorkflow answers the operator's updates as a run does, in short:
// a cancel withdraws the steps that wait for approval and fills in the
// receipt, a pause and a resume set or clear the pause, a message is
// accepted once by its id; a cancelled run can no longer be paused or
// resumed, a scripted run takes no message, a run that has ended is not
// found.
func (f *fakeTemporal) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errTemporalDown
	}
	st, ok := f.statuses[o.WorkflowID]
	if !ok || f.closed[o.WorkflowID] {
		return nil, serviceerror.NewNotFound("workflow execution already completed")
	}
	f.updates = append(f.updates, o.UpdateName)
	conflict := func(format string, args ...any) (client.WorkflowUpdateHandle, error) {
		return sdkfake.Update{Err: temporal.NewApplicationError(fmt.Sprintf(format, args...), workflows.ErrTypeUpdateConflict)}, nil
	}
	now := time.Now().UTC()
	if o.UpdateName == workflows.UpdateMessage {
		m := o.Args[0].(workflows.Message)
		if st.Planner == "script" {
			return conflict("the run follows a script, whose planner reads no messages")
		}
		for _, am := range st.Messages {
			if am.MessageID == m.MessageID {
				return sdkfake.Update{V: workflows.MessageReceipt{MessageID: am.MessageID, Position: am.Position, AcceptedAt: am.AcceptedAt,
					Duplicate: true}}, nil
			}
		}
		am := workflows.AcceptedMessage{Message: m, Position: len(st.Messages) + 1, AcceptedAt: now}
		st.Messages = append(st.Messages, am)
		f.statuses[o.WorkflowID] = st
		return sdkfake.Update{V: workflows.MessageReceipt{MessageID: m.MessageID, Position: am.Position, AcceptedAt: now}}, nil
	}
	c := o.Args[0].(workflows.Control)
	switch {
	case o.UpdateName != workflows.UpdateCancel && st.Cancel != nil:
		return conflict("the run is %s by %s; it can no longer be %sd", st.State, st.Cancel.By, o.UpdateName)
	case o.UpdateName == workflows.UpdateCancel && st.Cancel == nil:
		st.Cancel = &workflows.ControlRecord{By: c.By, Reason: c.Reason, At: now}
		st.State = workflows.RunCancelled
		st.Receipt = &workflows.Receipt{CancelledBy: c.By, CancelledAt: now, Reason: c.Reason, State: workflows.RunCancelled,
			Steps: []workflows.ReceiptStep{}}
		steps := append([]workflows.Step(nil), st.Steps...)
		for i := range steps {
			s := &steps[i]
			if s.State == workflows.StepPendingApproval {
				s.State, s.Error = workflows.StepCancelled, "approval withdrawn: the run was cancelled by "+c.By
			}
			ended := string(s.State)
			switch s.State {
			case workflows.StepNeedsResolution:
				ended = "unknown: whether its effect happened waits for a person's answer"
				st.Receipt.Unresolved = append(st.Receipt.Unresolved, workflows.ReceiptStep{Step: s.Step, Tool: s.Tool, Key: s.Key, State: s.State, Ended: ended})
			case workflows.StepRunning:
				st.State, st.Receipt.State = workflows.RunCancelling, workflows.RunCancelling
				st.Receipt.InFlight = append(st.Receipt.InFlight, s.Step)
			}
			st.Receipt.Steps = append(st.Receipt.Steps, workflows.ReceiptStep{Step: s.Step, Tool: s.Tool, Key: s.Key, State: s.State, Ended: ended})
		}
		st.Steps = steps
	case o.UpdateName == workflows.UpdatePause && st.Paused == nil:
		st.Paused, st.State = &workflows.ControlRecord{By: c.By, Reason: c.Reason, At: now}, workflows.RunPaused
	case o.UpdateName == workflows.UpdateResume && st.Paused != nil:
		st.Paused, st.State = nil, workflows.RunRunning
	}
	f.statuses[o.WorkflowID] = st
	return sdkfake.Update{V: st}, nil
}

// DescribeWorkflowExecution says whether a run is open.
func (f *fakeTemporal) DescribeWorkflowExecution(_ context.Context, workflowID, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errTemporalDown
	}
	if _, ok := f.statuses[workflowID]; !ok {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	status := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	if f.closed[workflowID] {
		status = enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{
		WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{Status: status}}, nil
}

// status returns the status of run runID of tenant acme.
func (f *fakeTemporal) status(runID string) workflows.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.statuses[workflows.WorkflowID("acme", runID)]
}

// sent returns the names of the updates the runs were sent.
func (f *fakeTemporal) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.updates...)
}

func (f *fakeTemporal) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// end makes a run of tenant acme one that has ended in state.
func (f *fakeTemporal) end(runID string, state workflows.RunState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := workflows.WorkflowID("acme", runID)
	st := f.statuses[id]
	st.State = state
	f.statuses[id] = st
	f.closed[id] = true
}

// running records run runID of tenant acme as running with steps; an
// openai run unless scripted.
func (e *inboxEnv) running(runID string, scripted bool, steps ...workflows.Step) {
	e.t.Helper()
	planner := "openai"
	if scripted {
		planner = "script"
	}
	e.temporal.setStatus(workflows.Status{Tenant: "acme", RunID: runID, Planner: planner, State: workflows.RunRunning,
		Goal: "refund order 1001", Steps: steps, StartedAt: e.now.Add(-time.Hour), UpdatedAt: e.now})
}

// call sends an API request with who's token and returns the status and
// the body.
func (e *inboxEnv) call(who, method, path, body string) (int, http.Header, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	require.NoError(e.t, err)
	req.Header.Set("Authorization", "Bearer "+e.tokens[who])
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return resp.StatusCode, resp.Header, string(raw)
}

// controls returns the audit rows of the operators' requests to run runID
// of tenant.
func (e *inboxEnv) controls(tenant, runID string) []approvalstore.Control {
	e.t.Helper()
	rows, err := approvalstore.RunControls(context.Background(), e.pool, tenant, runID)
	require.NoError(e.t, err)
	return rows
}

// approvalRow reads the state and comment of a step's approvals row.
func (e *inboxEnv) approvalRow(runID string, step int64) (state, comment string) {
	e.t.Helper()
	l, err := approvalstore.Lookup(context.Background(), e.pool, "acme", runID, step)
	require.NoError(e.t, err)
	return l.State, l.Comment
}
