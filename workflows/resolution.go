package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/tools"
)

// needsResolution reports whether err is a step's unknown outcome that
// nothing could resolve, and what the step knows of it.
func needsResolution(err error) (activities.NeedsResolution, bool) {
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != activities.ErrTypeNeedsResolution {
		return activities.NeedsResolution{}, false
	}
	var nr activities.NeedsResolution
	if app.HasDetails() {
		_ = app.Details(&nr)
	}
	if nr.Known == "" {
		nr.Known = app.Message()
	}
	return nr, true
}

// unknownOutcome reports whether step s, which ended with err, needs a
// person: its outcome could not be settled, or, for an external step that
// failed otherwise (its retries ran out), its key says an attempt may have
// made the effect. A step whose effect may have happened is never reported
// as failed, or the planner could propose it again under a new key.
func (r *run) unknownOutcome(ctx workflow.Context, s *Step, call activities.PlannedCall, err error) (activities.NeedsResolution, bool) {
	if nr, ok := needsResolution(err); ok {
		return nr, true
	}
	if call.Class != tools.ClassExternal {
		return activities.NeedsResolution{}, false
	}
	var check activities.OutcomeCheck
	cerr := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, bookkeepingOptions), a.CheckOutcome, activities.ToolInput{
		Tenant: r.in.Tenant, RunID: r.in.RunID, Step: s.Step, Tool: s.Tool, Args: s.Args, ArgsHash: s.ArgsHash,
	}).Get(ctx, &check)
	if cerr != nil {
		workflow.GetLogger(ctx).Error("the outcome of a failed external step could not be checked", "step", s.Step, "error", cerr)
		return activities.NeedsResolution{Key: s.Key, Known: failure(err) + "; whether the effect happened could not be checked: " + failure(cerr)}, true
	}
	return check.Resolution, check.Unknown
}

// awaitResolution records s as needing resolution and waits, without a
// time limit, for a person's answer; at the deadline it raises an alert
// and keeps waiting, for nothing may be guessed. It then applies the answer
// to the dedup store: applied reports the effect's result; not applied
// means the step may run again under its key. stepErr is an answer that
// could not be applied (it contradicts the store), which fails the step;
// runErr fails the run.
func (r *run) awaitResolution(ctx workflow.Context, s *Step, nr activities.NeedsResolution) (out activities.ApplyResolutionOutput, applied bool, stepErr, runErr error) {
	log := workflow.GetLogger(ctx)
	now := workflow.Now(ctx)
	round := 1
	if s.Resolution != nil {
		round = s.Resolution.Round + 1
	}
	deadline := now.Add(r.in.Limits.ApprovalDeadline)
	s.State = StepNeedsResolution
	s.Resolution = &StepResolution{Round: round, Known: nr.Known, FirstSentAt: nr.FirstSentAt, RequestedAt: now, Deadline: deadline}
	bctx := workflow.WithActivityOptions(ctx, bookkeepingOptions)
	err := workflow.ExecuteActivity(bctx, a.RequestResolution, activities.ResolutionRequest{
		Tenant: r.in.Tenant, RunID: r.in.RunID, Step: s.Step, Round: round, Tool: s.Tool, Key: s.Key,
		Args: s.Args, ArgsHash: s.ArgsHash, Goal: r.in.Goal, FirstSentAt: nr.FirstSentAt, Known: nr.Known,
		RequestedAt: now, Deadline: deadline,
	}).Get(ctx, nil)
	if err != nil {
		s.State = StepFailed
		s.Error = "the step's outcome is unknown, and the request to resolve it could not be recorded: " + failure(err)
		s.FinishedAt = workflow.Now(ctx)
		return out, false, nil, &runFailure{msg: fmt.Sprintf("record that step %d needs resolution", s.Step), err: err}
	}
	r.touch(ctx)
	log.Warn("step needs resolution", "step", s.Step, "tool", s.Tool, "key", s.Key, "round", round, "known", nr.Known)

	res := s.Resolution
	answered := func() bool { return res.Outcome != "" }
	ok, err := workflow.AwaitWithTimeout(ctx, deadline.Sub(workflow.Now(ctx)), answered)
	if err != nil {
		return out, false, nil, fmt.Errorf("wait for the resolution of step %d: %w", s.Step, err)
	}
	if !ok {
		res.Overdue = true
		r.touch(ctx)
		err := workflow.ExecuteActivity(bctx, a.AlertResolutionOverdue, activities.ResolutionOverdue{
			Tenant: r.in.Tenant, RunID: r.in.RunID, Step: s.Step, Tool: s.Tool, Key: s.Key, Deadline: deadline,
		}).Get(ctx, nil)
		if err != nil {
			log.Error("the overdue alert could not be raised", "step", s.Step, "error", err)
		}
		if err := workflow.Await(ctx, answered); err != nil {
			return out, false, nil, fmt.Errorf("wait for the resolution of step %d: %w", s.Step, err)
		}
	}
	applied = res.Outcome == OutcomeApplied
	err = workflow.ExecuteActivity(bctx, a.ApplyResolution, activities.ResolutionAnswer{
		Tenant: r.in.Tenant, RunID: r.in.RunID, Step: s.Step, Round: round, Tool: s.Tool, ArgsHash: s.ArgsHash, Args: s.Args,
		Applied: applied, Result: res.Result, By: res.Resolver, Note: res.Note, At: res.DecidedAt,
	}).Get(ctx, &out)
	r.touch(ctx)
	if err != nil {
		return out, false, err, nil
	}
	return out, applied, nil, nil
}

// onResolve applies a resolve signal: a valid answer for a step that needs
// resolution, in its current round, that has not been answered yet. Any
// other signal changes nothing and is logged.
func (r *run) onResolve(ctx workflow.Context, sig Resolution) {
	log := workflow.GetLogger(ctx)
	if err := sig.Validate(); err != nil {
		log.Warn("resolve signal ignored", "step", sig.Step, "error", err.Error())
		return
	}
	if sig.Step < 1 || sig.Step > int64(len(r.status.Steps)) {
		log.Warn("resolve signal ignored: no such step", "step", sig.Step, "resolver", sig.Resolver)
		return
	}
	s := &r.status.Steps[sig.Step-1]
	res := s.Resolution
	switch {
	case res == nil || (s.State != StepNeedsResolution && res.Outcome == ""):
		log.Warn("resolve signal ignored: the step does not need resolution", "step", sig.Step, "state", s.State, "resolver", sig.Resolver)
		return
	case sig.Round != 0 && sig.Round != res.Round:
		log.Warn("resolve signal ignored: it answers another round", "step", sig.Step, "round", sig.Round, "current_round", res.Round)
		return
	case res.Outcome == sig.Outcome:
		log.Info("resolve signal ignored: duplicate of the answer given", "step", sig.Step, "outcome", sig.Outcome, "resolver", sig.Resolver)
		return
	case res.Outcome != "":
		log.Warn("resolve signal refused: conflicts with the answer given", "step", sig.Step, "outcome", sig.Outcome,
			"given", res.Outcome, "resolved_by", res.Resolver)
		return
	}
	res.Outcome, res.Resolver, res.Note, res.Result = sig.Outcome, sig.Resolver, sig.Note, sig.Result
	res.DecidedAt = workflow.Now(ctx)
	log.Info("resolution given", "step", sig.Step, "round", res.Round, "outcome", sig.Outcome, "resolver", sig.Resolver)
}

// deliverFollowUps delivers the follow-on messages the step's effect
// committed, one after another, and records where each stands. A delivery
// that fails is recorded on the step and reported by reconciliation; it
// does not fail the step, whose effect is done.
func (r *run) deliverFollowUps(ctx workflow.Context, s *Step, msgs []activities.FollowUpMessage) {
	for _, m := range msgs {
		fu := FollowUp{Seq: m.Seq, Tool: m.Tool, Key: m.Key, State: activities.DeliveryDelivered}
		opts := deliverOptions
		opts.ActivityID = m.Key
		var out activities.DeliverOutput
		err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), a.Deliver, activities.DeliverInput{
			Tenant: r.in.Tenant, RunID: r.in.RunID, Step: s.Step, Seq: m.Seq,
		}).Get(ctx, &out)
		if err != nil {
			fu.State, fu.Error = activities.DeliveryFailed, failure(err)
		} else {
			fu.State, fu.Error = out.State, out.Error
		}
		if fu.State != activities.DeliveryDelivered {
			workflow.GetLogger(ctx).Warn("follow-on message not delivered", "step", s.Step, "seq", m.Seq,
				"tool", m.Tool, "state", fu.State, "error", fu.Error)
		}
		s.FollowUps = append(s.FollowUps, fu)
	}
}

// deliverOptions retry a follow-on delivery like a step.
var deliverOptions = workflow.ActivityOptions{
	StartToCloseTimeout:    2 * time.Minute,
	HeartbeatTimeout:       heartbeatTimeout,
	ScheduleToCloseTimeout: toolOptions.ScheduleToCloseTimeout,
	RetryPolicy:            toolOptions.RetryPolicy,
}
