package workflows

import (
	"fmt"
	"maps"

	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/questions"
)

// awaitAnswer records the round of questions q that step s's server asked
// in the call's answer, and waits for a person's answer or the round's
// deadline. It returns what the call sends back on its next attempt, or
// ok false when the step ended unanswered: its deadline passed (the step
// expires, having completed nothing), or the run was cancelled. A step
// asked more than questions.MaxRounds rounds fails.
func (r *run) awaitAnswer(ctx workflow.Context, s *Step, q *activities.Question) (activities.Reply, bool, error) {
	log := workflow.GetLogger(ctx)
	now := workflow.Now(ctx)
	if len(s.Questions) >= questions.MaxRounds {
		s.State, s.FinishedAt = StepFailed, now
		s.Error = fmt.Sprintf("its server asked %d rounds of questions and asks again (%s): the step stops there", len(s.Questions), q.Summary())
		log.Warn("step asked too many rounds of questions", "step", s.Step, "tool", s.Tool, "rounds", len(s.Questions))
		r.touch(ctx)
		return activities.Reply{}, false, nil
	}
	if r.halted() {
		// Cancelled while the call ran: the server's questions are not put
		// to anyone, and the call, which completed nothing, is not sent
		// again.
		s.State, s.Error, s.FinishedAt = StepCancelled, "questions withdrawn: "+r.stopReason(), now
		r.touch(ctx)
		return activities.Reply{}, false, nil
	}
	wait := r.in.Limits.ApprovalDeadline
	if q.Wait > 0 {
		wait = min(q.Wait, MaxApprovalDeadline)
	}
	deadline := now.Add(wait)
	var recorded activities.QuestionRecorded
	// An answer may reach the run before the activity that records the
	// round has told it the round's number: it is kept until then.
	s.asking = true
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, bookkeepingOptions), a.RequestQuestion, activities.QuestionRequest{
		Tenant: r.in.Tenant, RunID: r.in.RunID, Step: s.Step, AskID: fmt.Sprintf("run/%d", len(s.Questions)+1), Tool: s.Tool,
		Key: s.Key, Server: q.Server, Args: s.Args, ArgsHash: s.ArgsHash, Goal: r.in.Goal, Items: q.Items, AnswerBy: q.AnswerBy,
		RequestedBy: r.in.StartedBy, Lineage: r.lineage(), ParentGoal: r.parentGoal(), RequestedAt: now, Deadline: deadline,
	}).Get(ctx, &recorded)
	s.asking = false
	early := r.early[s.Step]
	delete(r.early, s.Step)
	if err != nil {
		s.State, s.FinishedAt = StepFailed, workflow.Now(ctx)
		s.Error = "its server's questions could not be recorded for a person: " + failure(err)
		return activities.Reply{}, false, &runFailure{msg: fmt.Sprintf("record the questions of step %d", s.Step), err: err}
	}
	s.Questions = append(s.Questions, StepQuestion{
		Round: recorded.Round, Server: q.Server, Items: q.Items, AnswerBy: q.AnswerBy, RequestedAt: now, Deadline: deadline,
		State: QuestionPending, requestState: q.State,
	})
	sq := &s.Questions[len(s.Questions)-1]
	s.State = StepWaitingForInput
	r.touch(ctx)
	log.Info("step waits for an answer to its server's questions", "step", s.Step, "tool", s.Tool, "round", sq.Round,
		"deadline", deadline)
	for _, sig := range early {
		r.onAnswer(ctx, sig)
	}

	answered := func() bool { return sq.State != QuestionPending || s.State != StepWaitingForInput }
	ok, err := workflow.AwaitWithTimeout(ctx, deadline.Sub(workflow.Now(ctx)), answered)
	if err != nil {
		return activities.Reply{}, false, fmt.Errorf("wait for an answer to the questions of step %d: %w", s.Step, err)
	}
	out := activities.QuestionOutcome{Tenant: r.in.Tenant, RunID: r.in.RunID, Step: s.Step, Round: sq.Round, At: workflow.Now(ctx)}
	switch {
	case !ok:
		sq.State = QuestionExpired
		s.State, s.FinishedAt = StepExpired, out.At
		s.Error = fmt.Sprintf("nobody answered its server's questions before the deadline %s; the call completed nothing",
			deadline.UTC().Format("2006-01-02T15:04:05Z"))
		out.State, out.Note = QuestionExpired, "nobody answered before the deadline"
		log.Warn("questions expired unanswered", "step", s.Step, "tool", s.Tool, "round", sq.Round)
	case s.State == StepCancelled:
		sq.State = QuestionCancelled
		out.State, out.Note = QuestionCancelled, s.Error
		if c := r.status.Cancel; c != nil {
			out.By = c.By
		}
	default:
		out.State, out.By, out.Answers, out.Note, out.At = QuestionAnswered, sq.Answerer, sq.Answers, sq.Note, sq.AnsweredAt
	}
	r.touch(ctx)
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, bookkeepingOptions), a.RecordQuestionOutcome, out).Get(ctx, nil); err != nil {
		log.Error("the outcome of a round of questions could not be recorded", "step", s.Step, "round", sq.Round, "error", err)
	}
	if sq.State != QuestionAnswered {
		return activities.Reply{}, false, nil
	}
	s.State = StepRunning
	r.touch(ctx)
	return activities.Reply{Answers: maps.Clone(sq.Answers), State: sq.requestState}, true, nil
}

// unanswered is what the planner learns of a step whose questions were not
// answered: it expired or was cancelled, having completed nothing, or it
// failed after too many rounds.
func unanswered(s *Step) planner.Outcome {
	switch s.State {
	case StepExpired:
		return planner.OutcomeExpired
	case StepCancelled:
		return planner.OutcomeCancelled
	}
	return planner.OutcomeFailed
}

// onAnswer applies an answer signal: a valid answer to the current round
// of a step that waits for one. Any other signal changes nothing and is
// logged.
func (r *run) onAnswer(ctx workflow.Context, sig Answer) {
	log := workflow.GetLogger(ctx)
	if err := sig.Validate(); err != nil {
		log.Warn("answer signal ignored", "step", sig.Step, "error", err.Error())
		return
	}
	if sig.Step < 1 || sig.Step > int64(len(r.status.Steps)) {
		log.Warn("answer signal ignored: no such step", "step", sig.Step, "answerer", sig.Answerer)
		return
	}
	s := &r.status.Steps[sig.Step-1]
	if s.asking {
		if r.early == nil {
			r.early = map[int64][]Answer{}
		}
		r.early[s.Step] = append(r.early[s.Step], sig)
		log.Info("answer signal kept: the round it answers is being recorded", "step", sig.Step, "round", sig.Round)
		return
	}
	if len(s.Questions) == 0 {
		log.Warn("answer signal ignored: the step was asked nothing", "step", sig.Step, "answerer", sig.Answerer)
		return
	}
	sq := &s.Questions[len(s.Questions)-1]
	switch {
	case sig.Round != sq.Round:
		log.Warn("answer signal ignored: it answers another round", "step", sig.Step, "round", sig.Round, "current_round", sq.Round)
		return
	case sq.State != QuestionPending || s.State != StepWaitingForInput:
		log.Info("answer signal ignored: the round is no longer pending", "step", sig.Step, "round", sig.Round, "state", sq.State,
			"answerer", sig.Answerer)
		return
	}
	for _, it := range sq.Items {
		if _, ok := sig.Answers[it.ID]; !ok {
			log.Warn("answer signal ignored: a question is not answered", "step", sig.Step, "round", sig.Round, "question", it.ID)
			return
		}
	}
	sq.State, sq.Answers, sq.Answerer, sq.Note, sq.AnsweredAt = QuestionAnswered, sig.Answers, sig.Answerer, sig.Note, workflow.Now(ctx)
	log.Info("questions answered", "step", sig.Step, "round", sig.Round, "answerer", sig.Answerer)
}
