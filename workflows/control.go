package workflows

import (
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/internal/planner"
)

// controls holds what an operator asked of the run.
type controls struct {
	// ended is set once the run's loop has returned: nothing more can
	// be cancelled, paused or told.
	ended bool
	// halt, when set, says why the run starts no more steps although
	// nobody cancelled it: a step of a parallel turn failed the run, and
	// the turn's other steps end before the run fails.
	halt string
}

// registerControls registers the cancel, pause, resume and message
// updates. Each validator refuses what the run cannot take, so that a
// refusal leaves no event in the history; each handler changes only the
// run's state, at once, and never blocks.
func (r *run) registerControls(ctx workflow.Context) error {
	updates := []struct {
		name     string
		handler  any
		validate any
	}{
		{UpdateCancel, r.onCancel, func(ctx workflow.Context, c Control) error { return r.canControl(UpdateCancel, c) }},
		{UpdatePause, r.onPause, func(ctx workflow.Context, c Control) error { return r.canControl(UpdatePause, c) }},
		{UpdateResume, r.onResume, func(ctx workflow.Context, c Control) error { return r.canControl(UpdateResume, c) }},
		{UpdateMessage, r.onMessage, func(ctx workflow.Context, m Message) error { return r.canTake(m) }},
	}
	for _, u := range updates {
		if err := workflow.SetUpdateHandlerWithOptions(ctx, u.name, u.handler,
			workflow.UpdateHandlerOptions{Validator: u.validate}); err != nil {
			return fmt.Errorf("register %s update: %w", u.name, err)
		}
	}
	return nil
}

func invalidUpdate(format string, args ...any) error {
	return temporal.NewApplicationError(fmt.Sprintf(format, args...), ErrTypeUpdateInvalid)
}

func conflict(format string, args ...any) error {
	return temporal.NewApplicationError(fmt.Sprintf(format, args...), ErrTypeUpdateConflict)
}

// canControl reports why the run cannot take a cancel, pause or resume.
// Cancelling a cancelled run is accepted and changes nothing, as are a
// pause of a paused run and a resume of a run that is not paused.
func (r *run) canControl(action string, c Control) error {
	if err := c.Validate(); err != nil {
		return invalidUpdate("%s: %v", action, err)
	}
	if r.ctl.ended {
		return conflict("the run is %s; it can no longer be %s", r.status.State, pastOf(action))
	}
	if action != UpdateCancel && r.status.Cancel != nil {
		return conflict("the run was cancelled by %s (it is %s); it can no longer be %s", r.status.Cancel.By, r.cancelState(), pastOf(action))
	}
	return nil
}

func pastOf(action string) string {
	switch action {
	case UpdateCancel:
		return "cancelled"
	case UpdatePause:
		return "paused"
	case UpdateResume:
		return "resumed"
	}
	return "sent messages"
}

// onCancel cancels the run: no step starts after it, no planner is asked
// again, and every approval the run waits for is withdrawn at once (each
// waiting step records the withdrawal in the approvals table). Steps
// already running end on their own terms. It answers the run's status and
// receipt.
func (r *run) onCancel(ctx workflow.Context, c Control) (Status, error) {
	if r.status.Cancel == nil {
		r.status.Cancel = &ControlRecord{By: c.By, Reason: c.Reason, At: workflow.Now(ctx)}
		r.stopSteps(ctx)
		r.passDown(ctx, UpdateCancel, c)
		r.touch(ctx)
		workflow.GetLogger(ctx).Info("run cancelled", "by", c.By, "reason", c.Reason)
	}
	return r.snapshot().forControl(), nil
}

// stopSteps ends, at once, every step of the run that has not started:
// an approval it waits for is withdrawn (the waiting step records the
// withdrawal in the approvals table), and a step approved, or waiting for
// its turn's slot, never starts. Steps already running end on their own
// terms.
func (r *run) stopSteps(ctx workflow.Context) {
	now := workflow.Now(ctx)
	for i := range r.status.Steps {
		s := &r.status.Steps[i]
		switch {
		case s.State == StepPendingApproval:
			s.State, s.Error, s.FinishedAt = StepCancelled, "approval withdrawn: "+r.stopReason(), now
		case s.State == StepWaitingForInput:
			// Its call completed nothing: the questions are withdrawn.
			s.State, s.Error, s.FinishedAt = StepCancelled, "questions withdrawn: "+r.stopReason(), now
		case s.State == StepApproved, s.State == StepRunning && s.StartedAt.IsZero():
			s.State, s.Error, s.FinishedAt = StepCancelled, "not started: "+r.stopReason(), now
		}
	}
}

// onPause pauses the run; onResume resumes it.
func (r *run) onPause(ctx workflow.Context, c Control) (Status, error) {
	if r.status.Paused == nil {
		r.status.Paused = &ControlRecord{By: c.By, Reason: c.Reason, At: workflow.Now(ctx)}
		r.settle()
		r.passDown(ctx, UpdatePause, c)
		r.touch(ctx)
		workflow.GetLogger(ctx).Info("run paused", "by", c.By, "reason", c.Reason)
	}
	return r.snapshot().forControl(), nil
}

func (r *run) onResume(ctx workflow.Context, c Control) (Status, error) {
	if r.status.Paused != nil {
		r.status.Paused = nil
		r.settle()
		r.passDown(ctx, UpdateResume, c)
		r.touch(ctx)
		workflow.GetLogger(ctx).Info("run resumed", "by", c.By, "reason", c.Reason)
	}
	return r.snapshot().forControl(), nil
}

// canTake reports why the run cannot accept message m.
func (r *run) canTake(m Message) error {
	if err := m.Validate(); err != nil {
		return invalidUpdate("message: %v", err)
	}
	if r.in.Planner == planner.NameScript {
		return conflict("the run follows a script, whose planner reads no messages")
	}
	if prev := r.message(m.MessageID); prev != nil {
		if prev.Text != m.Text {
			return conflict("message_id %s was accepted (position %d) with another text", m.MessageID, prev.Position)
		}
		return nil
	}
	switch {
	case r.ctl.ended:
		return conflict("the run is %s; it takes no more messages", r.status.State)
	case r.status.Cancel != nil:
		return conflict("the run was cancelled by %s (it is %s); it takes no more messages", r.status.Cancel.By, r.cancelState())
	case len(r.status.Messages) >= MaxMessages:
		return conflict("the run has accepted %d messages, its limit", MaxMessages)
	}
	total := len(m.Text)
	for _, am := range r.status.Messages {
		total += len(am.Text)
	}
	if total > MaxMessagesBytes {
		return conflict("the run's messages would hold %d bytes of text; the limit is %d", total, MaxMessagesBytes)
	}
	return nil
}

// onMessage accepts message m for the planner's next turn; a message id
// accepted before answers its first receipt again.
func (r *run) onMessage(ctx workflow.Context, m Message) (MessageReceipt, error) {
	if prev := r.message(m.MessageID); prev != nil {
		return MessageReceipt{MessageID: prev.MessageID, Position: prev.Position, AcceptedAt: prev.AcceptedAt, Duplicate: true}, nil
	}
	am := AcceptedMessage{Message: m, Position: len(r.status.Messages) + 1, AcceptedAt: workflow.Now(ctx)}
	r.status.Messages = append(r.status.Messages, am)
	r.touch(ctx)
	workflow.GetLogger(ctx).Info("message accepted", "message_id", m.MessageID, "position", am.Position, "by", m.By)
	return MessageReceipt{MessageID: am.MessageID, Position: am.Position, AcceptedAt: am.AcceptedAt}, nil
}

func (r *run) message(id string) *AcceptedMessage {
	for i := range r.status.Messages {
		if r.status.Messages[i].MessageID == id {
			return &r.status.Messages[i]
		}
	}
	return nil
}

// deliverMessages puts the messages accepted since the last planning
// turn into the planner's history, in the order accepted, as the user's
// words before turn.
func (r *run) deliverMessages(turn int) {
	for i := range r.status.Messages {
		m := &r.status.Messages[i]
		if m.DeliveredTurn != 0 {
			continue
		}
		m.DeliveredTurn = turn
		r.history = append(r.history, planner.Observation{Outcome: planner.OutcomeMessage, Message: m.Text})
	}
}

// undelivered counts the accepted messages no planning turn has read.
func (r *run) undelivered() int {
	n := 0
	for _, m := range r.status.Messages {
		if m.DeliveredTurn == 0 {
			n++
		}
	}
	return n
}

// unread says, for a run that stops at a limit, how many accepted
// messages no planning turn read; nothing when none.
func (r *run) unread() string {
	switch n := r.undelivered(); n {
	case 0:
		return ""
	case 1:
		return "; 1 message accepted after the last planning turn was not read"
	default:
		return fmt.Sprintf("; %d messages accepted after the last planning turn were not read", n)
	}
}

func (r *run) cancelled() bool { return r.status.Cancel != nil }

// halted reports whether the run starts no more steps: it was cancelled,
// or a step of a parallel turn is failing it.
func (r *run) halted() bool { return r.cancelled() || r.ctl.halt != "" }

// stopReason says why the run starts no more steps.
func (r *run) stopReason() string {
	if r.cancelled() {
		return r.cancelledBy()
	}
	return r.ctl.halt
}

func (r *run) cancelledBy() string {
	c := r.status.Cancel
	s := "the run was cancelled by " + c.By
	if c.Reason != "" {
		s += ": " + c.Reason
	}
	return s
}

// cancelState is what a cancelled run's state reads: cancelling while a
// step still runs.
func (r *run) cancelState() RunState {
	if rc := r.status.receipt(); rc != nil {
		return rc.State
	}
	return RunCancelled
}

// gate waits while the run is paused; it returns at once when it is not,
// or once it is cancelled.
func (r *run) gate(ctx workflow.Context) error {
	if r.status.Paused == nil {
		return nil
	}
	return workflow.Await(ctx, func() bool { return r.status.Paused == nil || r.halted() })
}

// settle sets the run's state from its controls and its steps: cancelled
// (or cancelling), paused, needs_resolution when a step waits for a
// person's answer, waiting_for_approval when a step waits for a decision,
// running otherwise. A run whose loop has ended keeps the state it ended
// in.
func (r *run) settle() {
	if r.ctl.ended {
		return
	}
	if r.cancelled() {
		r.status.State = r.cancelState()
		return
	}
	if r.status.Paused != nil {
		r.status.State = RunPaused
		return
	}
	state := RunRunning
	for _, s := range r.status.Steps {
		switch s.State {
		case StepNeedsResolution:
			state = RunNeedsResolution
		case StepPendingApproval:
			// Only once its request is recorded: whoever sees the run
			// waiting can decide it.
			if state == RunRunning && s.Approval != nil && s.Approval.recorded {
				state = RunWaitingForApproval
			}
		case StepWaitingForInput:
			if state == RunRunning {
				state = RunWaitingForInput
			}
		}
	}
	r.status.State = state
}

// forControl is the status an operator's update answers: the run's state,
// its pause, its cancel and receipt, and its steps without their
// arguments and results, so that each answer, which the run's history
// keeps, stays small however large the run.
func (s Status) forControl() Status {
	for i := range s.Steps {
		st := &s.Steps[i]
		st.Args, st.Result, st.Summary, st.FollowUps, st.Edit = nil, nil, "", nil, nil
	}
	s.Messages = nil
	return s
}

// cancelStep ends step s, which never ran, because the run halted (see
// halted).
func (r *run) cancelStep(ctx workflow.Context, s *Step, why string) planner.Observation {
	s.State = StepCancelled
	s.Error = why + ": " + r.stopReason()
	s.FinishedAt = workflow.Now(ctx)
	r.settle()
	r.touch(ctx)
	return r.observation(s, planner.OutcomeCancelled)
}
