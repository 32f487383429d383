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
	"github.com/oncerun/oncerun/internal/planner"
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
		if r.status.Steps[i].Child != "" {
			started++
		}
	}
	if started >= d.MaxChildren {
		return activities.ToolOutput{}, delegationError("run %s has started %d child runs, the bound: do the rest in this run",
			r.in.RunID, started)
	}
	child := ChildRunID(r.in.RunID, s.Step)
	parent := &Parent{RunID: r.in.RunID, Step: s.Step, Goal: r.in.Goal, Agent: d.Agent, Depth: 1, BudgetRun: r.in.RunID,
		Lineage: []Hop{{RunID: r.in.RunID, Step: s.Step}}, Applied: r.treeApplied()}
	if p := r.in.Parent; p != nil {
		parent.Depth, parent.BudgetRun = p.Depth+1, p.BudgetRun
		parent.Lineage = append(slices.Clone(p.Lineage), parent.Lineage...)
	}
	in := RunInput{
		Tenant: r.in.Tenant, RunID: child, Goal: d.Goal, Planner: d.Planner, Plan: d.Plan, Model: d.Model,
		Limits: Limits{MaxSteps: d.MaxSteps, Parallel: d.Parallel, ApprovalDeadline: r.in.Limits.ApprovalDeadline,
			HistoryLimit: r.in.Limits.HistoryLimit, Spend: r.in.Limits.Spend, OtherCurrencies: r.in.Limits.OtherCurrencies},
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
	fut := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, opts), AgentRun, in)
	if err := fut.GetChildWorkflowExecution().Get(ctx, nil); err != nil {
		return activities.ToolOutput{}, delegationError("child run %s (%s) could not be started: %s", child, d.Agent, failureMessage(err))
	}
	// Only a started child can take a signal: a cancel or pause that came
	// while it was being started goes to it now.
	s.childStarted = true
	if r.status.Cancel != nil {
		r.signalChild(ctx, s, UpdateCancel, Control{By: r.status.Cancel.By, Reason: r.status.Cancel.Reason})
	} else if p := r.status.Paused; p != nil {
		r.signalChild(ctx, s, UpdatePause, Control{By: p.By, Reason: p.Reason})
	}
	var st Status
	if err := fut.Get(ctx, &st); err != nil {
		return activities.ToolOutput{}, delegationError("child run %s (%s) failed: %s", child, d.Agent, failureMessage(err))
	}
	out := Delegated{RunID: child, Agent: d.Agent, State: st.State, Message: st.Message, Effects: []Effect{}}
	var undone, applied []string
	for _, cs := range st.Steps {
		e := Effect{Step: cs.Step, Tool: cs.Tool, Key: cs.Key, State: string(cs.State), Error: cs.Error, Child: cs.Child}
		// What the child's tree applied is this run's tree's: a step of
		// this run, or of another child, does not make it again.
		s.Applied = append(s.Applied, cs.Applied...)
		switch {
		case cs.Refused && st.Planner != planner.NameScript:
			// A model's call refused by the child's grant or schema: its
			// planner was told, and the child's outcome says what it did
			// instead. A script's refused call was asked for, and is not
			// done.
		case cs.State == StepDone, cs.State == StepDuplicate:
			e.Result = cs.Result
			if cs.State == StepDone {
				s.Applied = append(s.Applied, Intent{RunID: child, Step: cs.Step, Tool: cs.Tool, ArgsHash: cs.ArgsHash, Result: cs.Result})
			}
			applied = append(applied, fmt.Sprintf("step %d %s (key %s)", cs.Step, cs.Tool, cs.Key))
		default:
			undone = append(undone, fmt.Sprintf("step %d %s %s%s", cs.Step, cs.Tool, cs.State, decidedBy(cs)))
		}
		out.Effects = append(out.Effects, e)
	}
	// A child that did not do all it was asked says what it did do, so
	// that the parent's planner does not make it again.
	did := "; it applied nothing"
	if len(applied) > 0 {
		did = "; it applied " + strings.Join(applied, ", ")
	}
	switch {
	case st.State != RunCompleted:
		return activities.ToolOutput{}, delegationError("child run %s (%s) ended %s: %s%s", child, d.Agent, st.State,
			strings.TrimSpace(st.Error+" "+st.Message), did)
	case len(undone) > 0:
		return activities.ToolOutput{}, delegationError("child run %s (%s) did not do what it was asked: %s%s", child, d.Agent,
			strings.Join(undone, "; "), did)
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

// signalParentControl carries a [parentControl]: a cancel, pause or
// resume of a child run's parent, passed down to the child.
const signalParentControl = "parent-control"

// parentControl is a cancel, pause or resume (Action: UpdateCancel,
// UpdatePause or UpdateResume) of a child run's parent, as the parent
// passes it down.
type parentControl struct {
	Action string `json:"action"`
	Control
}

// passDown passes a cancel, pause or resume of this run to its running
// child runs, which pass it to theirs. A child still being started gets
// the controls in force once it has started (see delegate); one that has
// ended does not get it (a signal to it fails, and nothing waits for the
// answer). A step that had not started is cancelled with its parent, and
// a paused parent starts none.
func (r *run) passDown(ctx workflow.Context, action string, c Control) {
	for i := range r.status.Steps {
		if s := &r.status.Steps[i]; s.childStarted && s.State == StepRunning {
			r.signalChild(ctx, s, action, c)
		}
	}
}

// signalChild sends the child run of step s a control of this run's.
func (r *run) signalChild(ctx workflow.Context, s *Step, action string, c Control) {
	pc := parentControl{Action: action, Control: Control{By: c.By, Reason: c.Reason}}
	workflow.SignalExternalWorkflow(ctx, WorkflowID(r.in.Tenant, s.Child), "", signalParentControl, pc)
}

// onParentControl applies a control its parent passed down, as the
// parent took it: a cancel, pause or resume the run can no longer take
// (it has ended) is dropped.
func (r *run) onParentControl(ctx workflow.Context, pc parentControl) {
	if err := r.canControl(pc.Action, pc.Control); err != nil {
		workflow.GetLogger(ctx).Info("a control from the parent run was not taken", "action", pc.Action, "error", err)
		return
	}
	switch pc.Action {
	case UpdateCancel:
		_, _ = r.onCancel(ctx, pc.Control)
	case UpdatePause:
		_, _ = r.onPause(ctx, pc.Control)
	case UpdateResume:
		_, _ = r.onResume(ctx, pc.Control)
	}
}

// treeIntent returns the applied step of another run of this run's tree
// (a child's, through this run's delegating steps, or an ancestor's, as
// the parent passed them down) with tool and argsHash, if any.
func (r *run) treeIntent(tool, argsHash string) *Intent {
	for i := range r.status.Steps {
		for j := range r.status.Steps[i].Applied {
			if a := &r.status.Steps[i].Applied[j]; a.Tool == tool && a.ArgsHash == argsHash {
				return a
			}
		}
	}
	if p := r.in.Parent; p != nil {
		for j := range p.Applied {
			if a := &p.Applied[j]; a.Tool == tool && a.ArgsHash == argsHash {
				return a
			}
		}
	}
	return nil
}

// treeApplied lists what this run's tree has applied, as this run knows
// it: its ancestors' (as passed down), its own done steps, and its
// children's.
func (r *run) treeApplied() []Intent {
	var out []Intent
	if p := r.in.Parent; p != nil {
		out = append(out, p.Applied...)
	}
	for i := range r.status.Steps {
		s := &r.status.Steps[i]
		out = append(out, s.Applied...)
		if s.State == StepDone && s.Child == "" {
			out = append(out, Intent{RunID: r.in.RunID, Step: s.Step, Tool: s.Tool, ArgsHash: s.ArgsHash, Result: s.Result})
		}
	}
	return out
}

// treeOf is the run tree step s claims its intent in (ToolInput.Tree):
// the tree's first run, for a step of a tool that makes each intent once
// per run in a run under step identity whose tree may make the same intent
// at the same moment (a child run, or a parent whose step's turn
// delegates); "" otherwise, when what the run knows of its tree suffices.
func (r *run) treeOf(s *Step, call activities.PlannedCall) string {
	if !r.identity || !call.OncePerRun {
		return ""
	}
	if p := r.in.Parent; p != nil {
		return p.BudgetRun
	}
	for i := range r.status.Steps {
		if e := &r.status.Steps[i]; e.Turn == s.Turn && e.Class == activities.ClassDelegate {
			return r.in.RunID
		}
	}
	return ""
}

// treeDuplicate records step s as a duplicate of d, the step of another
// run of the tree (or of this run) that made its intent, as the store's
// claim on the intent says, and returns what the planner learns.
func (r *run) treeDuplicate(ctx workflow.Context, s *Step, d *activities.TreeDuplicate) planner.Observation {
	s.State, s.DuplicateOf, s.Result = StepDuplicate, d.Step, d.Result
	if d.RunID != r.in.RunID {
		s.DuplicateRun = d.RunID
	}
	s.FinishedAt = workflow.Now(ctx)
	workflow.GetLogger(ctx).Info("call repeats an intent another step of the run tree made; not executed", "step", s.Step,
		"tool", s.Tool, "duplicate_of_run", d.RunID, "duplicate_of", d.Step, "duplicate_key", d.Key, "args_hash", s.ArgsHash)
	r.touch(ctx)
	return r.observation(s, planner.OutcomeDuplicate)
}
