package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
)

// awaitApproval records s as pending and waits for its decision or its
// deadline, whichever comes first; s.State ends approved, rejected or
// expired.
func (r *run) awaitApproval(ctx workflow.Context, s *Step, reason string) error {
	now := workflow.Now(ctx)
	deadline := now.Add(r.in.Limits.ApprovalDeadline)
	s.State = StepPendingApproval
	s.Approval = &StepApproval{Reason: reason, RequestedAt: now, Deadline: deadline}
	bctx := workflow.WithActivityOptions(ctx, bookkeepingOptions)
	err := workflow.ExecuteActivity(bctx, a.RequestApproval, activities.ApprovalRequest{
		Tenant: r.in.Tenant, RunID: r.in.RunID, Step: s.Step, Tool: s.Tool, Args: s.Args, ArgsHash: s.ArgsHash,
		Goal: r.in.Goal, Reason: reason, RequestedBy: r.in.StartedBy, RequestedAt: now, Deadline: deadline,
	}).Get(ctx, nil)
	if err != nil {
		// The step never waited: no approvals row lists it, so it must not
		// read as pending.
		s.State = StepFailed
		s.Error = "the approval request could not be recorded: " + failure(err)
		s.FinishedAt = workflow.Now(ctx)
		return &runFailure{msg: fmt.Sprintf("record pending approval of step %d", s.Step), err: err}
	}
	r.status.State = RunWaitingForApproval
	r.touch(ctx)
	workflow.GetLogger(ctx).Info("step waits for approval", "step", s.Step, "tool", s.Tool,
		"args_hash", s.ArgsHash, "deadline", deadline)

	// The timer runs to the recorded deadline, however long recording the
	// request took.
	decided, err := workflow.AwaitWithTimeout(ctx, deadline.Sub(workflow.Now(ctx)), func() bool {
		return s.State != StepPendingApproval
	})
	if err != nil {
		return fmt.Errorf("wait for approval of step %d: %w", s.Step, err)
	}
	if !decided {
		s.State = StepExpired
		s.Approval.DecidedAt = workflow.Now(ctx)
		s.Error = fmt.Sprintf("no decision before the deadline %s", deadline.UTC().Format("2006-01-02T15:04:05Z"))
		s.FinishedAt = s.Approval.DecidedAt
		workflow.GetLogger(ctx).Warn("approval expired", "step", s.Step, "tool", s.Tool)
	}
	r.status.State = RunRunning
	r.touch(ctx)
	state := activities.ApprovalApproved
	switch s.State {
	case StepRejected:
		state = activities.ApprovalRejected
		s.Error = "rejected by " + s.Approval.Approver
		s.FinishedAt = s.Approval.DecidedAt
	case StepExpired:
		state = activities.ApprovalExpired
	}
	err = workflow.ExecuteActivity(bctx, a.ResolveApproval, activities.ApprovalResolution{
		Tenant: r.in.Tenant, RunID: r.in.RunID, Step: s.Step, State: state,
		DecidedBy: s.Approval.Approver, DecidedAt: s.Approval.DecidedAt, Comment: s.Approval.Comment,
	}).Get(ctx, nil)
	if err != nil {
		s.State = StepFailed
		s.Error = "the decision could not be recorded: " + failure(err)
		s.FinishedAt = workflow.Now(ctx)
		return &runFailure{msg: fmt.Sprintf("record decision on step %d", s.Step), err: err}
	}
	return nil
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
	if sig.Decision != DecisionApprove && sig.Decision != DecisionReject {
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
	if sig.ArgsHash != s.ArgsHash {
		log.Warn("approval signal ignored: it was given for other arguments", "step", sig.Step,
			"signal_args_hash", sig.ArgsHash, "step_args_hash", s.ArgsHash, "approver", sig.Approver)
		return
	}
	s.Approval.Decision = sig.Decision
	s.Approval.Approver = sig.Approver
	s.Approval.Comment = sig.Comment
	s.Approval.DecidedAt = workflow.Now(ctx)
	s.State = StepApproved
	if sig.Decision == DecisionReject {
		s.State = StepRejected
	}
	log.Info("approval decided", "step", sig.Step, "decision", sig.Decision, "approver", sig.Approver)
}
