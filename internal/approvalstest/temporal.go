package approvalstest

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/oncerun/oncerun/internal/sdkfake"
	"github.com/oncerun/oncerun/workflows"
)

// ErrTemporalDown is what every call answers with Temporal out of reach.
var ErrTemporalDown = serviceerror.NewUnavailable("connection refused")

// Temporal stands in for Temporal in the approvals service's tests: it
// answers the status query with the statuses it was given and records
// the signals sent. The approvals tables are real (pgtest); the
// integration tests run the inbox against a real Temporal server.
type Temporal struct {
	client.Client
	mu       sync.Mutex
	statuses map[string]workflows.Status
	signals  []workflows.Approval
	answers  []workflows.Answer
	// closed lists the runs that have ended: they answer queries, and
	// take no update .
	closed map[string]bool
	// updates are the updates sent, by name.
	updates []string
	// down makes every call fail as with Temporal out of reach.
	down bool
	// queries are the visibility queries ListWorkflow was sent.
	queries []string
}

func (f *Temporal) QueryWorkflow(_ context.Context, workflowID, _, _ string, _ ...any) (converter.EncodedValue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, ErrTemporalDown
	}
	st, ok := f.statuses[workflowID]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	return statusValue{st}, nil
}

func (f *Temporal) SignalWorkflow(_ context.Context, workflowID, _, name string, arg any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.statuses[workflowID]; !ok {
		return serviceerror.NewNotFound("workflow not found")
	}
	if ap, ok := arg.(workflows.Approval); ok && name == workflows.SignalApproval {
		f.signals = append(f.signals, ap)
	}
	if an, ok := arg.(workflows.Answer); ok && name == workflows.SignalAnswer {
		f.answers = append(f.answers, an)
	}
	return nil
}

// Answers returns the answers the runs were signalled.
func (f *Temporal) Answers() []workflows.Answer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]workflows.Answer(nil), f.answers...)
}

// SetStatus sets the status the run of st answers with.
func (f *Temporal) SetStatus(st workflows.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses[workflows.WorkflowID(st.Tenant, st.RunID)] = st
}

// Approvals returns the decisions the runs were signalled.
func (f *Temporal) Approvals() []workflows.Approval {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]workflows.Approval(nil), f.signals...)
}

// statusValue is a status query's answer.
type statusValue struct{ st workflows.Status }

func (v statusValue) HasValue() bool { return true }

func (v statusValue) Get(ptr any) error {
	raw, err := json.Marshal(v.st)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, ptr)
}

// UpdateWorkflow answers the operator's updates as a run does, in short:
// a cancel withdraws the steps that wait for approval and fills in the
// receipt, a pause and a resume set or clear the pause, a message is
// accepted once by its id; a cancelled run can no longer be paused or
// resumed, a scripted run takes no message, a run that has ended is not
// found.
func (f *Temporal) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, ErrTemporalDown
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
func (f *Temporal) DescribeWorkflowExecution(_ context.Context, workflowID, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, ErrTemporalDown
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

// Status returns the status of run runID of tenant acme.
func (f *Temporal) Status(runID string) workflows.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.statuses[workflows.WorkflowID("acme", runID)]
}

// Sent returns the names of the updates the runs were sent.
func (f *Temporal) Sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.updates...)
}

// SetDown makes every call fail as with Temporal out of reach, or no more.
func (f *Temporal) SetDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// End makes a run of tenant acme one that has ended in state.
func (f *Temporal) End(runID string, state workflows.RunState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := workflows.WorkflowID("acme", runID)
	st := f.statuses[id]
	st.State = state
	f.statuses[id] = st
	f.closed[id] = true
}

// ListWorkflow pages the fake's runs, two to a page, in the order of
// their workflow ids; it records each query.
func (f *Temporal) ListWorkflow(_ context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, req.Query)
	prefix := regexp.MustCompile(`WorkflowId STARTS_WITH '([^']*)'`).FindStringSubmatch(req.Query)[1]
	var ids []string
	for id := range f.statuses {
		if strings.HasPrefix(id, prefix) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	from := 0
	if len(req.NextPageToken) > 0 {
		var err error
		if from, err = strconv.Atoi(string(req.NextPageToken)); err != nil {
			return nil, serviceerror.NewInvalidArgument("invalid page token")
		}
	}
	resp := &workflowservice.ListWorkflowExecutionsResponse{}
	for i := from; i < len(ids) && i < from+int(req.PageSize); i++ {
		st := f.statuses[ids[i]]
		status := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
		info := &workflowpb.WorkflowExecutionInfo{Execution: &commonpb.WorkflowExecution{WorkflowId: ids[i]},
			StartTime: timestamppb.New(st.StartedAt)}
		if f.closed[ids[i]] {
			status = enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
			info.CloseTime = timestamppb.New(st.UpdatedAt)
		}
		info.Status = status
		resp.Executions = append(resp.Executions, info)
	}
	if next := from + int(req.PageSize); next < len(ids) {
		resp.NextPageToken = []byte(strconv.Itoa(next))
	}
	return resp, nil
}

// Queries returns the visibility queries ListWorkflow was sent.
func (f *Temporal) Queries() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.queries...)
}

// NewTemporal returns a Temporal that knows no run.
func NewTemporal() *Temporal {
	return &Temporal{statuses: map[string]workflows.Status{}, closed: map[string]bool{}}
}
