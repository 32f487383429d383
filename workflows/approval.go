package workflows

import (
	"cmp"
	"encoding/json"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/planner"
)

// awaitApproval records s as pending and waits for its decision or its
// deadline, whichever comes first; s.State ends approved, rejected or
// expired.
func (r *run) awaitApproval(ctx workflow.Context, s *Step, reason string) error {
	return r.awaitWait(ctx, s, reason, "", 0)
}

// awaitLimit makes step s, which would cross the limit its charge
// answered, wait for approval: a round of its own, after the rule's when
// it had one. It reports whether the step may run again: approved, as an
// exception to the limit, or edited, to be checked again.
func (r *run) awaitLimit(ctx workflow.Context, s *Step, p *activities.Parked) (planner.Observation, bool, error) {
	round := 1
	var prior *StepApproval
	if s.Approval != nil {
		round = max(s.Approval.Round, 1) + 1
		prior = s.Approval
	}
	if s.Limit != nil && s.Limit.Prior != nil {
		prior = s.Limit.Prior
	}
	now := workflow.Now(ctx)
	s.Limit = &StepLimit{Reason: p.Reason, Level: p.Level, At: now, Prior: prior}
	if r.halted() && workflow.GetVersion(ctx, limitWithdrawnWhenHalted, workflow.DefaultVersion, 1) == 1 {
		// Cancelled (or failing) while the attempt ran: nothing ran, and
		// nobody is asked to let it run past the limit, since it would
		// never start again.
		s.State, s.Error, s.FinishedAt = StepCancelled, "stopped at a money limit: "+r.stopReason(), now
		r.touch(ctx)
		return r.observation(s, planner.OutcomeCancelled), false, nil
	}
	workflow.GetLogger(ctx).Info("step waits at a money limit", "step", s.Step, "tool", s.Tool, "reason", p.Reason)
	if err := r.awaitWait(ctx, s, p.Reason, ApprovalKindLimit, round); err != nil {
		return planner.Observation{}, false, err
	}
	if s.State != StepApproved {
		return r.observation(s, notApproved(s.State)), false, nil
	}
	s.Limit.Exception = s.Approval.Decision == DecisionApprove
	return planner.Observation{}, true, nil
}

// limitWithdrawnWhenHalted is the change under which a step that parks at
// a money limit in a run already cancelled ends cancelled at once; before
// it, the step waited for an approval that could not start it again.
const limitWithdrawnWhenHalted = "limit-withdrawn-when-halted"

// awaitWait is awaitApproval for a wait of kind ("" for the tool's rule,
// ApprovalKindLimit) in round (0 for the first).
func (r *run) awaitWait(ctx workflow.Context, s *Step, reason, kind string, round int) error {
	now := workflow.Now(ctx)
	deadline := now.Add(r.in.Limits.ApprovalDeadline)
	onExpiry := cmp.Or(r.in.OnApprovalExpiry, ExpiryExpire)
	s.State = StepPendingApproval
	s.Approval = &StepApproval{Reason: reason, RequestedAt: now, Deadline: deadline, Kind: kind, Round: round}
	if r.in.OnApprovalExpiry != "" {
		s.Approval.OnExpiry = onExpiry
	}
	bctx := workflow.WithActivityOptions(ctx, bookkeepingOptions)
	warnings := r.version(ctx, deadlineWarnings)
	var recorded activities.ApprovalRecorded
	requested := workflow.ExecuteActivity(bctx, a.RequestApproval, activities.ApprovalRequest{
		Tenant: r.in.Tenant, RunID: r.in.RunID, Step: s.Step, Tool: s.Tool, Args: s.Args, ArgsHash: s.ArgsHash,
		Goal: r.in.Goal, Reason: reason, RequestedBy: r.in.StartedBy, RequestedAt: now, Deadline: deadline,
		OnExpiry: onExpiry, Kind: kind, Round: round, Lineage: r.lineage(), ParentGoal: r.parentGoal(),
	})
	var err error
	if warnings == 1 {
		err = requested.Get(ctx, &recorded)
	} else {
		// Runs recorded before the warnings: the request answered nothing.
		err = requested.Get(ctx, nil)
	}
	if err != nil {
		// The step never waited: no approvals row lists it, so it must not
		// read as pending.
		s.State = StepFailed
		s.Error = "the approval request could not be recorded: " + failure(err)
		s.FinishedAt = workflow.Now(ctx)
		return &runFailure{msg: fmt.Sprintf("record pending approval of step %d", s.Step), err: err}
	}
	// The run reads waiting only once the approvals row exists, so that
	// whoever sees it waiting can decide the step. A decision that comes
	// while the request is recorded applies at once; a cancel withdraws
	// the step.
	s.Approval.recorded = true
	r.touch(ctx)
	workflow.GetLogger(ctx).Info("step waits for approval", "step", s.Step, "tool", s.Tool,
		"args_hash", s.ArgsHash, "deadline", deadline)

	// A cancel of the run withdraws the request: the step is then
	// cancelled, no longer pending.
	decided := func() bool { return s.State != StepPendingApproval }
	// Each warning point the worker gave that is still ahead: wait for it,
	// and warn if nobody has decided by then. A point already passed when
	// the step began to wait is skipped, not fired late.
	for _, before := range recorded.WarnBefore {
		wait := deadline.Add(-before).Sub(workflow.Now(ctx))
		if wait <= 0 {
			continue
		}
		ok, err := workflow.AwaitWithTimeout(ctx, wait, decided)
		if err != nil {
			return fmt.Errorf("wait for approval of step %d: %w", s.Step, err)
		}
		if ok {
			break
		}
		r.warnDeadline(ctx, s, before, onExpiry)
	}
	// The timer runs to the recorded deadline, however long recording the
	// request took.
	ok, err := workflow.AwaitWithTimeout(ctx, deadline.Sub(workflow.Now(ctx)), decided)
	if err != nil {
		return fmt.Errorf("wait for approval of step %d: %w", s.Step, err)
	}
	if !ok {
		r.expire(ctx, s, onExpiry)
	}
	r.touch(ctx)
	state := activities.ApprovalApproved
	switch s.State {
	case StepCancelled:
		state = activities.ApprovalCancelled
		if c := r.status.Cancel; c != nil {
			s.Approval.Approver, s.Approval.Comment, s.Approval.DecidedAt = c.By, "run cancelled: "+c.Reason, c.At
		} else {
			s.Approval.Approver, s.Approval.Comment, s.Approval.DecidedAt = "oncerun", r.ctl.halt, s.FinishedAt
		}
	case StepRejected:
		state = activities.ApprovalRejected
		if s.Error == "" {
			s.Error = "rejected by " + s.Approval.Approver
		}
		s.FinishedAt = s.Approval.DecidedAt
	case StepExpired:
		state = activities.ApprovalExpired
	}
	err = workflow.ExecuteActivity(bctx, a.ResolveApproval, activities.ApprovalResolution{
		Tenant: r.in.Tenant, RunID: r.in.RunID, Step: s.Step, State: state,
		DecidedBy: s.Approval.Approver, DecidedAt: s.Approval.DecidedAt, Comment: s.Approval.Comment,
		EditedArgs: editedArgs(s), EditedArgsHash: editedHash(s), Round: round,
	}).Get(ctx, nil)
	if err != nil {
		s.State = StepFailed
		s.Error = "the decision could not be recorded: " + failure(err)
		s.FinishedAt = workflow.Now(ctx)
		return &runFailure{msg: fmt.Sprintf("record decision on step %d", s.Step), err: err}
	}
	return nil
}

// deadlineWarnings is the change ID under which a pending step is warned
// about before its deadline, at the points the worker's RequestApproval
// answers.
const deadlineWarnings = "approval-deadline-warnings"

// warnDeadline warns, once, that step s still waits for a decision before
// its deadline: the activity logs it, counts it and posts it to the alert
// webhook. It runs beside the wait, so a slow webhook never holds up a
// decision, and a failure is logged, never a reason to fail the run.
func (r *run) warnDeadline(ctx workflow.Context, s *Step, before time.Duration, onExpiry string) {
	s.Approval.Warned = append(s.Approval.Warned, before.String())
	r.touch(ctx)
	w := activities.DeadlineWarning{Tenant: r.in.Tenant, RunID: r.in.RunID, Step: s.Step, Tool: s.Tool,
		Deadline: s.Approval.Deadline, Before: before, OnExpiry: onExpiry}
	workflow.Go(ctx, func(ctx workflow.Context) {
		err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, warningOptions), a.WarnApprovalDeadline, w).Get(ctx, nil)
		if err != nil {
			workflow.GetLogger(ctx).Error("deadline warning not delivered", "step", w.Step, "before", before, "error", err)
		}
	})
}

// warningOptions retry a deadline warning's delivery until the deadline it
// warns about could have passed.
var warningOptions = workflow.ActivityOptions{
	StartToCloseTimeout:    30 * time.Second,
	ScheduleToCloseTimeout: time.Hour,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaximumInterval:    time.Minute,
	},
}

// expire ends the wait of a step nobody decided: expired, or rejected when
// the run's starter chose ExpiryReject.
func (r *run) expire(ctx workflow.Context, s *Step, onExpiry string) {
	now := workflow.Now(ctx)
	stamp := s.Approval.Deadline.UTC().Format("2006-01-02T15:04:05Z")
	s.Approval.DecidedAt = now
	s.FinishedAt = now
	if onExpiry == ExpiryReject {
		s.State = StepRejected
		s.Approval.Decision = DecisionReject
		s.Approval.Approver = DeadlineApprover
		s.Error = fmt.Sprintf("rejected at the deadline %s: nobody decided, and the run's starter chose to reject undecided steps", stamp)
		workflow.GetLogger(ctx).Warn("approval deadline passed: step rejected", "step", s.Step, "tool", s.Tool)
		return
	}
	s.State = StepExpired
	s.Error = fmt.Sprintf("no decision before the deadline %s", stamp)
	workflow.GetLogger(ctx).Warn("approval expired", "step", s.Step, "tool", s.Tool)
}

// editedArgs and editedHash are the arguments an applied edit put in place
// of the proposed ones, or nothing.
func editedArgs(s *Step) json.RawMessage {
	if s.Edit == nil {
		return nil
	}
	return s.Edit.Args
}

func editedHash(s *Step) string {
	if s.Edit == nil {
		return ""
	}
	return s.Edit.ArgsHash
}

// approvalEdits is the change ID under which a run applies edit decisions;
// runs of earlier releases ignored them.
const approvalEdits = "approval-edits"

// checkEditOptions bound the local activity that checks an edit against
// the worker's registry, which takes microseconds.
var checkEditOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 10 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaximumInterval:    10 * time.Second,
		MaximumAttempts:    5,
	},
}

// applyEdit checks an edit of pending step s against the tool (schema and
// edit rule, by the CheckEdit local activity) and, when it passes and the
// step still waits, approves the step with the edited arguments: they and
// their hash replace the step's, and the step keeps its lineage. A refused
// edit leaves the step pending and says why in the status.
func (r *run) applyEdit(ctx workflow.Context, s *Step, sig Approval) {
	log := workflow.GetLogger(ctx)
	var checked activities.EditChecked
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, checkEditOptions), a.CheckEdit,
		activities.EditCheck{Tool: s.Tool, Args: s.Args, Edited: sig.Args}).Get(ctx, &checked)
	switch {
	case err != nil:
		checked.Refused = "the edit could not be checked: " + failure(err)
	case checked.Refused == "" && sig.EditedArgsHash != "" && sig.EditedArgsHash != checked.ArgsHash:
		checked.Refused = fmt.Sprintf("the edit's args hash %s is not the hash of its arguments, %s", sig.EditedArgsHash, checked.ArgsHash)
	}
	if s.State != StepPendingApproval {
		// The deadline came while the edit was checked.
		log.Warn("approval signal ignored: step is not pending approval", "step", s.Step, "state", s.State,
			"decision", sig.Decision, "approver", sig.Approver)
		return
	}
	if checked.Refused != "" {
		s.Approval.EditRefused = checked.Refused
		r.touch(ctx)
		log.Warn("edit refused; the step stays pending", "step", s.Step, "approver", sig.Approver, "why", checked.Refused)
		// The approvals service accepted the edit as the step's decision
		// of record; take it off, so that the step can be decided again.
		err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, bookkeepingOptions), a.RecordEditRefused,
			activities.EditRefusal{Tenant: r.in.Tenant, RunID: r.in.RunID, Step: s.Step, EditedArgsHash: sig.EditedArgsHash,
				Why: checked.Refused}).Get(ctx, nil)
		if err != nil {
			log.Error("the refused edit could not be taken off the decision of record", "step", s.Step, "error", err)
		}
		return
	}
	now := workflow.Now(ctx)
	original, originalHash := s.Args, s.ArgsHash
	if s.Edit != nil {
		// A later round's edit: the lineage starts at what was proposed.
		original, originalHash = s.Edit.OriginalArgs, s.Edit.OriginalArgsHash
	}
	s.Edit = &StepEdit{
		OriginalArgs: original, OriginalArgsHash: originalHash, Args: checked.Args, ArgsHash: checked.ArgsHash,
		EditedBy: sig.Approver, EditedAt: now, Comment: sig.Comment,
	}
	s.Args, s.ArgsHash = checked.Args, checked.ArgsHash
	s.Approval.Decision, s.Approval.Approver, s.Approval.Comment, s.Approval.DecidedAt = DecisionEdit, sig.Approver, sig.Comment, now
	s.Approval.EditRefused = ""
	s.State = StepApproved
	log.Info("approval decided: edited", "step", s.Step, "approver", sig.Approver,
		"original_args_hash", s.Edit.OriginalArgsHash, "args_hash", s.ArgsHash)
}

// onApproval applies an approval signal. Only a well-formed decision on a
// step that is pending, for the arguments hash the step has, applies; any
// other signal changes nothing and is logged: a duplicate of the decision
// made, a conflicting second decision, a step that is not pending, a hash
// that differs from the step's.
func (r *run) onApproval(ctx workflow.Context, sig Approval) {
	log := workflow.GetLogger(ctx)
	// The checks here never grow: a signal this workflow applied before must
	// replay the same. What the approvals table cannot hold is cleaned by
	// ResolveApproval; clients check decisions with Approval.Validate.
	edit := sig.Decision == DecisionEdit && len(sig.Args) > 0 &&
		r.version(ctx, approvalEdits) == 1
	if sig.Decision != DecisionApprove && sig.Decision != DecisionReject && !edit {
		log.Warn("approval signal ignored: decision is not approve or reject", "step", sig.Step, "decision", sig.Decision)
		return
	}
	if sig.Approver == "" {
		log.Warn("approval signal ignored: no approver named", "step", sig.Step, "decision", sig.Decision)
		return
	}
	if sig.Step < 1 || sig.Step > int64(len(r.status.Steps)) {
		log.Warn("approval signal ignored: no such step", "step", sig.Step, "approver", sig.Approver)
		return
	}
	s := &r.status.Steps[sig.Step-1]
	if s.State != StepPendingApproval {
		switch {
		case s.Approval != nil && s.Approval.Decision == sig.Decision:
			log.Info("approval signal ignored: duplicate of the decision made", "step", sig.Step,
				"decision", sig.Decision, "approver", sig.Approver, "decided_by", s.Approval.Approver)
		case s.Approval != nil && s.Approval.Decision != "":
			log.Warn("approval signal refused: conflicts with the decision made", "step", sig.Step,
				"decision", sig.Decision, "approver", sig.Approver,
				"made", s.Approval.Decision, "decided_by", s.Approval.Approver)
		default:
			log.Warn("approval signal ignored: step is not pending approval", "step", sig.Step,
				"state", s.State, "approver", sig.Approver)
		}
		return
	}
	if s.Approval.Round > 1 && sig.Round != s.Approval.Round {
		// A decision of an earlier wait of the step, delivered again.
		log.Warn("approval signal ignored: it was given for another round of the step", "step", sig.Step,
			"signal_round", sig.Round, "round", s.Approval.Round, "approver", sig.Approver)
		return
	}
	if sig.ArgsHash != s.ArgsHash {
		log.Warn("approval signal ignored: it was given for other arguments", "step", sig.Step,
			"signal_args_hash", sig.ArgsHash, "step_args_hash", s.ArgsHash, "approver", sig.Approver)
		return
	}
	if edit {
		r.applyEdit(ctx, s, sig)
		return
	}
	s.Approval.Decision = sig.Decision
	s.Approval.EditRefused = ""
	s.Approval.Approver = sig.Approver
	s.Approval.Comment = sig.Comment
	s.Approval.DecidedAt = workflow.Now(ctx)
	s.State = StepApproved
	if sig.Decision == DecisionReject {
		s.State = StepRejected
	}
	log.Info("approval decided", "step", sig.Step, "decision", sig.Decision, "approver", sig.Approver)
}

// notApproved is what the planner learns of a step whose wait ended in
// state, other than approved: rejected, expired or cancelled.
func notApproved(state StepState) planner.Outcome {
	switch state {
	case StepExpired:
		return planner.OutcomeExpired
	case StepCancelled:
		return planner.OutcomeCancelled
	}
	return planner.OutcomeRejected
}
