package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/oncerun/oncerun/internal/agents"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/tools"
)

// PlanInput is what the workflow tells the planner on one turn.
type PlanInput struct {
	// Facts are the run's facts it has not written yet (see RunFact).
	Facts   []RunFact `json:"facts,omitempty"`
	Tenant  string    `json:"tenant"`
	RunID   string    `json:"run_id"`
	Goal    string    `json:"goal"`
	Planner string    `json:"planner"`
	// Plan is the part of a scripted run's plan the planner needs this
	// turn: the next calls (one, or a batch), or nothing when every call
	// was proposed. Runs of earlier releases sent the whole plan.
	Plan []tools.ProposedCall `json:"plan,omitempty"`
	// PlanOffset is the position of Plan[0] in the run's whole plan.
	PlanOffset int `json:"plan_offset,omitempty"`
	// Proposed counts the calls proposed on earlier turns, less PlanOffset:
	// for a scripted run it is the position in Plan of the next call, 0.
	Proposed int `json:"proposed"`
	// History is every earlier call and its outcome; a scripted run sends
	// none.
	History []Observation `json:"history,omitempty"`
	// Compact asks for an answer without what the run already holds: a
	// scripted run knows the calls it sent, so each checked call leaves
	// out its proposed call, and its canonical arguments where they are
	// the proposed ones byte for byte (see PlannedCall.Expand). Only a
	// local planning turn asks for it: its input reaches the activity as
	// the run holds it, not through a round trip of JSON.
	Compact bool `json:"compact,omitempty"`
	// Granted says the run is a child run, which may use only the tools
	// Grant lists (none, when it is empty): the planner sees only these,
	// and a call of another is refused. A run a person started may use
	// every tool.
	Granted bool     `json:"granted,omitempty"`
	Grant   []string `json:"grant,omitempty"`
	// Model, for a child run of a sub-agent that names one, is the model
	// its planner asks.
	Model string `json:"model,omitempty"`
	// Depth is how deep the run is among child runs: 0 for a run a person
	// started.
	Depth int `json:"depth,omitempty"`
	// FirstStep, set by a run under step identity (docs/agent-runs.md,
	// "Step identity"), is the step number the turn's first call takes:
	// each call proposed takes the next, valid or not. Plan then reads the
	// dedup store for the key of each call it refuses or holds for
	// approval, and a call whose key is there is that step (Made).
	FirstStep int64 `json:"first_step,omitempty"`
	// Turn numbers the run's planning turns from 1: a model's text as it
	// writes it is told under it (see textStream).
	Turn int `json:"turn,omitempty"`
}

// MaxMessageBytes bounds the planner's final message as a run records it.
const MaxMessageBytes = 4096

// PlanOutput is the planner's proposal, each call checked against its tool.
type PlanOutput struct {
	Calls   []PlannedCall `json:"calls,omitempty"`
	Done    bool          `json:"done,omitempty"`
	Message string        `json:"message,omitempty"`
	// Parallel says the calls are independent and may run at once (see
	// planner.Proposal.Parallel).
	Parallel bool `json:"parallel,omitempty"`
}

// PlannedCall is one proposed call, checked.
type PlannedCall struct {
	// Proposed is the call as the planner proposed it.
	Proposed tools.ProposedCall `json:"proposed"`
	// Invalid, when set, says why the call was refused; nothing else is set
	// and the call never runs.
	Invalid string `json:"invalid,omitempty"`
	// Args are the canonical arguments and ArgsHash their SHA-256.
	Args     json.RawMessage `json:"canonical_args,omitempty"`
	ArgsHash string          `json:"args_hash,omitempty"`
	// Class is the tool's effect class.
	Class tools.Class `json:"class,omitempty"`
	// NeedsApproval says the call waits for a human, ApprovalReason why.
	NeedsApproval  bool   `json:"needs_approval,omitempty"`
	ApprovalReason string `json:"approval_reason,omitempty"`
	// Timeout is one attempt's StartToClose timeout.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Guarantee is what the tool promises about its effect (see
	// tools.Tool.Guarantee).
	Guarantee string `json:"guarantee,omitempty"`
	// OncePerRun says the run must not execute this call again when an
	// earlier step of the run applied the same tool with the same
	// canonical arguments (see tools.Tool.OncePerRun).
	OncePerRun bool `json:"once_per_run,omitempty"`
	// Local says the call's step may run as a local activity (see
	// tools.Tool.Local).
	Local bool `json:"local,omitempty"`
	// Delegate, for a call of a sub-agent's tool (class delegate), is the
	// child run to start.
	Delegate *Delegation `json:"delegate,omitempty"`
	// Made says the dedup store holds the call's key completed, with its
	// arguments' hash: a worker made the step and died before the run
	// recorded it. The call is that step whatever this worker's registry
	// says of it (Invalid, NeedsApproval): the run makes it without asking,
	// and RunTool replays the stored result. Set only for a turn with
	// PlanInput.FirstStep.
	Made bool `json:"made,omitempty"`
}

// ClassDelegate is the class of a call of a sub-agent's tool: the run
// starts a child run for it, and no tool runs.
const ClassDelegate tools.Class = "delegate"

// Delegation is the child run a delegating call starts, as the parent's
// planning turn checked it: recorded in the parent's history, so that a
// replay starts the same child.
type Delegation struct {
	// Agent is the sub-agent's name.
	Agent   string `json:"agent"`
	Planner string `json:"planner"`
	// Model is the sub-agent's own model, if it names one.
	Model string `json:"model,omitempty"`
	Goal  string `json:"goal"`
	// Plan is a scripted sub-agent's plan, from the call.
	Plan []tools.ProposedCall `json:"plan,omitempty"`
	// Grant lists the tools the child may use: the sub-agent's, less any
	// its parent may not use.
	Grant    []string `json:"grant"`
	MaxSteps int      `json:"max_steps,omitempty"`
	Parallel int      `json:"parallel,omitempty"`
	// MaxChildren bounds the child runs the parent starts.
	MaxChildren int `json:"max_children"`
}

// Plan asks the run's planner for the next calls and checks each one. A
// refused call is returned with Invalid set rather than as an error, so that
// the run can tell the planner. Unknown planners and permanent planner
// failures are non-retryable; other planner errors are retried.
func (a *Activities) Plan(ctx context.Context, in PlanInput) (out PlanOutput, err error) {
	defer keepAlive(ctx)()
	if err := a.recordFacts(ctx, in.Tenant, in.Facts); err != nil {
		return PlanOutput{}, err
	}
	ctx, span := startTurn(ctx, in)
	defer func() { endTurn(span, out, err) }()
	p, ok := a.Planners[in.Planner]
	if !ok {
		return PlanOutput{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("run %s: unknown planner %q", in.RunID, in.Planner), ErrTypeUnknownPlanner, nil)
	}
	req := planner.Request{
		Tenant:   in.Tenant,
		RunID:    in.RunID,
		Goal:     in.Goal,
		Plan:     in.Plan,
		Proposed: in.Proposed,
		History:  in.History,
		Tools:    a.specs(in),
		Model:    in.Model,
	}
	text := a.textStream(ctx, in)
	if !text.disabled {
		req.OnText = text.write
	}
	prop, err := p.Next(ctx, req)
	text.flush()
	if errors.Is(err, planner.ErrPermanent) {
		return PlanOutput{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("planner %s: %v", in.Planner, err), ErrTypePlanner, err)
	}
	if err != nil {
		return PlanOutput{}, fmt.Errorf("planner %s: %w", in.Planner, err)
	}
	out = PlanOutput{Done: prop.Done, Message: untrusted.Cut(strings.ToValidUTF8(prop.Message, "\uFFFD"), MaxMessageBytes), Parallel: prop.Parallel}
	if prop.Done {
		return out, nil
	}
	for _, c := range prop.Calls {
		out.Calls = append(out.Calls, a.check(c, in))
	}
	if err := a.findMade(ctx, in, out.Calls); err != nil {
		return PlanOutput{}, err
	}
	for i := range out.Calls {
		pc := &out.Calls[i]
		if in.Compact {
			if pc.Invalid == "" && bytes.Equal(pc.Args, pc.Proposed.Args) {
				pc.Args = nil
			}
			pc.Proposed = tools.ProposedCall{}
		}
	}
	return out, nil
}

// Expand fills in what a compact answer (PlanInput.Compact) left out of
// the call: proposed, the call the run sent, and the canonical arguments
// when they were the proposed ones. A call that has them is unchanged.
func (c PlannedCall) Expand(proposed tools.ProposedCall) PlannedCall {
	if c.Proposed.Tool == "" {
		c.Proposed = proposed
	}
	if c.Invalid == "" && c.Args == nil {
		c.Args = c.Proposed.Args
	}
	return c
}

// specs are the tools a run's planner sees: the worker's and the
// sub-agents', those of its grant alone for a child run.
func (a *Activities) specs(in PlanInput) []tools.Spec {
	all := append(a.Tools.Specs(), a.Agents.Specs()...)
	if !in.Granted {
		return all
	}
	return slices.DeleteFunc(all, func(s tools.Spec) bool { return !slices.Contains(in.Grant, s.Name) })
}

func (a *Activities) check(c planner.Call, in PlanInput) PlannedCall {
	if in.Granted && !slices.Contains(in.Grant, c.Tool) {
		may := "none"
		if len(in.Grant) > 0 {
			may = strings.Join(in.Grant, ", ")
		}
		return PlannedCall{Proposed: c, Invalid: fmt.Sprintf("tool %q is not granted to this run (this child run may use: %s)",
			untrusted.Cut(c.Tool, 2*tools.MaxNameLen), may)}
	}
	if ag, ok := a.Agents.Lookup(c.Tool); ok {
		return a.delegation(c, ag, in)
	}
	p, err := a.Tools.Prepare(c)
	if err != nil {
		return PlannedCall{Proposed: c, Invalid: err.Error()}
	}
	// A read makes no effect, so it promises nothing about one.
	guarantee := p.Tool.Guarantee()
	if p.Tool.Class == tools.ClassRead {
		guarantee = ""
	}
	return PlannedCall{
		Proposed:       c,
		Args:           p.Args,
		ArgsHash:       p.ArgsHash,
		Class:          p.Tool.Class,
		NeedsApproval:  p.NeedsApproval,
		ApprovalReason: p.ApprovalReason,
		Timeout:        p.Tool.Timeout,
		Guarantee:      guarantee,
		OncePerRun:     p.Tool.OncePerRun(),
		Local:          p.Tool.Local(),
	}
}

// delegation checks a call of sub-agent ag's tool: its arguments, and the
// depth the child would be at.
func (a *Activities) delegation(c planner.Call, ag agents.Agent, in PlanInput) PlannedCall {
	maxDepth, maxChildren := a.Agents.Bounds()
	if in.Depth+1 > maxDepth {
		return PlannedCall{Proposed: c, Invalid: fmt.Sprintf("%s: a child run here would be at depth %d, past the bound of %d: do it in this run",
			c.Tool, in.Depth+1, maxDepth)}
	}
	p, err := a.Agents.Prepare(c)
	if err != nil {
		return PlannedCall{Proposed: c, Invalid: err.Error()}
	}
	var args struct {
		Goal string               `json:"goal"`
		Plan []tools.ProposedCall `json:"plan"`
	}
	if err := json.Unmarshal(p.Args, &args); err != nil {
		return PlannedCall{Proposed: c, Invalid: fmt.Sprintf("%s: %v", c.Tool, err)}
	}
	return PlannedCall{
		Proposed: c, Args: p.Args, ArgsHash: p.ArgsHash, Class: ClassDelegate, Guarantee: tools.GuaranteeOnce,
		Delegate: &Delegation{Agent: ag.Name, Planner: ag.Planner, Model: ag.Model, Goal: args.Goal, Plan: args.Plan,
			Grant: agents.Grant(ag, in.Granted, in.Grant), MaxSteps: ag.Limits.MaxSteps, Parallel: ag.Limits.Parallel, MaxChildren: maxChildren},
	}
}
