package workflows

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/approvalstore"
)

// ErrTypeDelegation is the type of the error that ends a delegating step
// whose child run could not be started, failed, or did not do what it
// was asked (a step of it rejected, expired, failed or cancelled).
const ErrTypeDelegation = "DelegationFailed"

// Delegated is a delegating step's result: the child run's final message
// and the effects its steps applied.
type Delegated struct {
	RunID   string   `json:"run_id"`
	Agent   string   `json:"agent"`
	State   RunState `json:"state"`
	Message string   `json:"message,omitempty"`
	Effects []Effect `json:"effects"`
}

// Effect is one step of a child run, as its parent learns of it.
type Effect struct {
	Step  int64  `json:"step"`
	Tool  string `json:"tool"`
	Key   string `json:"key"`
	State string `json:"state"`
	// Result is what the step answered, for a step that was done.
	Result json.RawMessage `json:"result,omitempty"`
	// Error says why a step that was not done ended as it did.
	Error string `json:"error,omitempty"`
	// Child, for a step that delegated in turn, is its child run.
	Child string `json:"child_run_id,omitempty"`
}

// delegate runs step s, a call of a sub-agent's tool, as a child run: a
// child workflow whose id derives from this run's id and the step's
// number, started once whatever crashes and replays come (the child's
// start is an event of this run's history, and its id is refused a second
// time), whose own steps are keyed under its own run id. The child may use
// only the tools granted to it, under every approval rule, and its
// amounts count against this run tree's budget. A child that fails or does
// not do what it was asked ends the step failed, with the reason; it does
// not fail this run.
func (r *run) delegate(ctx workflow.Context, s *Step, call activities.PlannedCall) (activities.ToolOutput, error) {
	d := call.Delegate
	started := 0
	for i := range r.status.Steps {
		if e := &r.status.Steps[i]; e.Child != "" && e != s {
			started++
		}
	}
	if started >= d.MaxChildren {
		return activities.ToolOutput{}, delegationError("run %s has started %d child runs, the bound: do the rest in this run",
			r.in.RunID, started)
	}
	child := ChildRunID(r.in.RunID, s.Step)
	parent := &Parent{RunID: r.in.RunID, Step: s.Step, Goal: r.in.Goal, Agent: d.Agent, Depth: 1, BudgetRun: r.in.RunID,
		Lineage: []Hop{{RunID: r.in.RunID, Step: s.Step}}}
	if p := r.in.Parent; p != nil {
		parent.Depth, parent.BudgetRun = p.Depth+1, p.BudgetRun
		parent.Lineage = append(slices.Clone(p.Lineage), parent.Lineage...)
	}
	in := RunInput{
		Tenant: r.in.Tenant, RunID: child, Goal: d.Goal, Planner: d.Planner, Plan: d.Plan,
		Limits: Limits{MaxSteps: d.MaxSteps, Parallel: d.Parallel, ApprovalDeadline: r.in.Limits.ApprovalDeadline,
			HistoryLimit: r.in.Limits.HistoryLimit, Spend: r.in.Limits.Spend},
		StartedBy: r.in.StartedBy, OnApprovalExpiry: r.in.OnApprovalExpiry, Grant: d.Grant, Parent: parent,
	}.WithDefaults()
	s.Child = child
	r.touch(ctx)
	opts := workflow.ChildWorkflowOptions{
		WorkflowID: WorkflowID(r.in.Tenant, child),
		// A run id taken by a run started otherwise is refused, never
		// joined.
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		// A child outlives nothing: when this run ends, Temporal asks it
		// to stop.
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
	}
	var st Status
	if err := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, opts), AgentRun, in).Get(ctx, &st); err != nil {
		return activities.ToolOutput{}, delegationError("child run %s (%s) failed: %s", child, d.Agent, failureMessage(err))
	}
	out := Delegated{RunID: child, Agent: d.Agent, State: st.State, Message: st.Message, Effects: []Effect{}}
	var undone []string
	for _, cs := range st.Steps {
		e := Effect{Step: cs.Step, Tool: cs.Tool, Key: cs.Key, State: string(cs.State), Error: cs.Error, Child: cs.Child}
		switch cs.State {
		case StepDone, StepDuplicate:
			e.Result = cs.Result
		default:
			undone = append(undone, fmt.Sprintf("step %d %s %s%s", cs.Step, cs.Tool, cs.State, decidedBy(cs)))
		}
		out.Effects = append(out.Effects, e)
	}
	switch {
	case st.State != RunCompleted:
		return activities.ToolOutput{}, delegationError("child run %s (%s) ended %s: %s", child, d.Agent, st.State,
			strings.TrimSpace(st.Error+" "+st.Message))
	case len(undone) > 0:
		return activities.ToolOutput{}, delegationError("child run %s (%s) did not do what it was asked: %s", child, d.Agent,
			strings.Join(undone, "; "))
	}
	// A struct of strings, numbers and raw JSON encodes the same on every
	// replay; workflowcheck flags encoding/json for its type cache only.
	raw, err := json.Marshal(out) //workflowcheck:ignore
	if err != nil {
		return activities.ToolOutput{}, delegationError("child run %s: %v", child, err)
	}
	return activities.ToolOutput{Key: s.Key, Result: raw}, nil
}

// decidedBy says who decided a step that did not run, and why.
func decidedBy(s Step) string {
	var b strings.Builder
	if a := s.Approval; a != nil && a.Approver != "" {
		b.WriteString(" by " + a.Approver)
		if a.Comment != "" {
			b.WriteString(" (" + a.Comment + ")")
		}
	}
	if s.Error != "" {
		b.WriteString(": " + s.Error)
	}
	return b.String()
}

func delegationError(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), ErrTypeDelegation, nil)
}

// lineage is, for a child run, the runs and steps from the first run of
// its tree down to the step that started it; nil for a run a person
// started.
func (r *run) lineage() []approvalstore.Hop {
	if r.in.Parent == nil {
		return nil
	}
	return r.in.Parent.Lineage
}

// parentGoal is, for a child run, its parent's goal.
func (r *run) parentGoal() string {
	if r.in.Parent == nil {
		return ""
	}
	return r.in.Parent.Goal
}
