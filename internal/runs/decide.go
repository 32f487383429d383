package runs

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/questions"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/workflows"
)

// ErrUndelivered means a decision or an answer was recorded but could not
// be sent to its run. See [UndeliveredError].
var ErrUndelivered = errors.New("recorded, but not delivered to the run")

// UndeliveredError reports a decision or an answer that was recorded, and
// whose signal failed. It is [ErrUndelivered]; it also wraps [ErrNotFound]
// when the run is no longer open and can never apply it. Otherwise sending
// the same decision again may deliver it.
type UndeliveredError struct {
	// What is "decision" or "answer".
	What  string
	RunID string
	// Err is why the signal failed.
	Err error
}

// Error says what was recorded, and what to do.
func (e *UndeliveredError) Error() string {
	if errors.Is(e.Err, ErrNotFound) {
		hint := ""
		if e.What == "decision" {
			hint = "; it is listed under needs_resolution"
		}
		return fmt.Sprintf("the %s is recorded but run %s is no longer open and cannot apply it%s", e.What, e.RunID, hint)
	}
	return fmt.Sprintf("the %s is recorded but the run could not be reached (%s); send the same %s again to deliver it",
		e.What, e.Err, e.What)
}

// Unwrap returns why the signal failed.
func (e *UndeliveredError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrUndelivered].
func (e *UndeliveredError) Is(target error) bool { return target == ErrUndelivered }

// Decide is the one way a decision reaches a run. It checks the request's
// values, has [approvalstore.Decide] check the step and the requester's
// role, lock the step and record the request in the audit table, and then,
// when the run has yet to hear of the decision, signals it. A decision the
// store refuses is its [*approvalstore.RefusedError]; a decision recorded
// whose signal failed is an [*UndeliveredError], returned with what was
// recorded.
func (c *Client) Decide(ctx context.Context, db approvalstore.DB, r approvalstore.DecisionRequest) (approvalstore.Decided, error) {
	if r.Invalid == nil {
		r.Invalid = checkDecision(r)
	}
	if r.CheckEdit == nil && c.Tools != nil {
		r.CheckEdit = c.checkEdit
	}
	d, err := approvalstore.Decide(ctx, db, r)
	if err != nil || !d.Deliver {
		return d, err
	}
	rec := d.Decision
	err = c.signal(ctx, rec.Tenant, rec.RunID, workflows.SignalApproval, workflows.Approval{
		Step: rec.Step, Decision: workflows.Decision(rec.Decision), Approver: rec.Approver, Comment: rec.Comment, ArgsHash: rec.ArgsHash,
		Args: rec.EditedArgs, EditedArgsHash: rec.EditedArgsHash, Round: roundOf(rec.Round),
	})
	if err != nil {
		return d, &UndeliveredError{What: "decision", RunID: rec.RunID, Err: err}
	}
	return d, nil
}

// checkDecision finds what is wrong with a decision's own values, if
// anything.
func checkDecision(r approvalstore.DecisionRequest) error {
	d := workflows.Decision(r.Decision)
	if d != workflows.DecisionApprove && d != workflows.DecisionReject && d != workflows.DecisionEdit {
		return fmt.Errorf("decision %q is not approve, reject or edit", untrusted.Cut(r.Decision, 64))
	}
	if d == workflows.DecisionEdit && len(bytes.TrimSpace(r.EditedArgs)) == 0 {
		return errors.New("an edit needs the edited arguments (args): a JSON object for the step's tool")
	}
	if !isHash(r.ArgsHash) {
		return fmt.Errorf("args_hash %q is not the 64 hex digits of the arguments hash you reviewed (GET /v1/approvals lists it)",
			untrusted.Cut(r.ArgsHash, 128))
	}
	return workflows.Approval{Decision: d, Approver: r.By, Comment: r.Comment, Args: r.EditedArgs}.Validate()
}

// checkEdit checks an edit against the deployment's registry: the tool's
// schema and its edit rule (see tools.Registry.PrepareEdit).
func (c *Client) checkEdit(tool string, proposed, edited json.RawMessage) (json.RawMessage, string, error) {
	p, err := c.Tools.PrepareEdit(tool, proposed, edited)
	if err != nil {
		return nil, "", err
	}
	return p.Args, p.ArgsHash, nil
}

// isHash reports whether s is 64 lower-case hex digits.
func isHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	b, err := hex.DecodeString(s)
	return err == nil && hex.EncodeToString(b) == s
}

// Resolve is the one way an answer about a step whose outcome is unknown
// reaches a run, as [Client.Decide] is for decisions: it checks the
// answer's values, has [approvalstore.Resolve] check, lock and record it,
// and then signals the run when it has yet to hear of it.
func (c *Client) Resolve(ctx context.Context, db approvalstore.DB, r approvalstore.ResolveRequest) (approvalstore.Resolved, error) {
	if r.Invalid == nil {
		r.Invalid = checkAnswer(r)
	}
	res, err := approvalstore.Resolve(ctx, db, r)
	if err != nil || !res.Deliver {
		return res, err
	}
	rec := res.Decision
	err = c.signal(ctx, rec.Tenant, rec.RunID, workflows.SignalResolve, workflows.Resolution{
		Step: rec.Step, Round: rec.Round, Outcome: workflows.Outcome(rec.Decision), Result: rec.Result,
		Resolver: rec.Resolver, Note: rec.Note,
	})
	if err != nil {
		return res, &UndeliveredError{What: "answer", RunID: rec.RunID, Err: err}
	}
	return res, nil
}

// Answer is the one way an answer to a step's questions reaches a run, as
// [Client.Resolve] is for outcomes: it checks the answer's own values, has
// [approvalstore.Answer] check it against the questions, lock and record
// it, and then signals the run when it has yet to hear of it. A live
// question's answer is taken from the table by the worker that holds the
// server's session: nothing is signalled.
func (c *Client) Answer(ctx context.Context, db approvalstore.DB, r approvalstore.AnswerRequest) (approvalstore.Answered, error) {
	if r.Invalid == nil {
		r.Invalid = checkAnswers(r)
	}
	res, err := approvalstore.Answer(ctx, db, r)
	if err != nil || !res.Deliver {
		return res, err
	}
	rec := res.Record
	var answers map[string]workflows.QuestionAnswer
	if err := json.Unmarshal(rec.Answers, &answers); err != nil {
		return res, fmt.Errorf("read the answer of record to step %d of run %s: %w", rec.Step, rec.RunID, err)
	}
	err = c.signal(ctx, rec.Tenant, rec.RunID, workflows.SignalAnswer, workflows.Answer{
		Step: rec.Step, Round: rec.Round, Answers: answers, Answerer: rec.Answerer, Note: rec.Note,
	})
	if err != nil {
		return res, &UndeliveredError{What: "answer", RunID: rec.RunID, Err: err}
	}
	return res, nil
}

// checkAnswers finds what is wrong with an answer's own values, before the
// questions are looked at.
func checkAnswers(r approvalstore.AnswerRequest) error {
	if r.Round < 0 {
		return fmt.Errorf("round %d is not a round number (1, 2, ...; leave it out for the latest)", r.Round)
	}
	answers := r.Answers
	if r.Only != nil && len(answers) == 0 {
		// The round's only question, whose id the store knows.
		switch r.Only.Action {
		case questions.ActionAccept, questions.ActionDecline, questions.ActionCancel:
		default:
			return fmt.Errorf("action %q is not accept, decline or cancel", untrusted.Cut(r.Only.Action, 32))
		}
		answers = map[string]workflows.QuestionAnswer{questions.LiveItem: *r.Only}
	}
	return workflows.Answer{Step: r.Step, Round: max(r.Round, 1), Answers: answers, Answerer: r.By, Note: r.Note}.Validate()
}

// checkAnswer finds what is wrong with an answer's own values, if anything.
func checkAnswer(r approvalstore.ResolveRequest) error {
	if r.Round < 0 {
		return fmt.Errorf("round %d is not a round number (1, 2, ...; leave it out for the latest)", r.Round)
	}
	return workflows.Resolution{Step: r.Step, Round: r.Round, Outcome: workflows.Outcome(r.Outcome), Result: r.Result,
		Resolver: r.By, Note: r.Note}.Validate()
}

// signal sends a recorded decision or answer to its run and returns at
// once: the run applies it if the step still waits for it, and ignores it
// otherwise; a repeat is harmless. It has SignalTimeout, whatever is left
// of ctx: the decision is recorded, and should reach the run. A run that
// is not open is [ErrNotFound].
func (c *Client) signal(ctx context.Context, tenant, runID, name string, arg any) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cmp.Or(c.SignalTimeout, DefaultSignalTimeout))
	defer cancel()
	err := c.Temporal.SignalWorkflow(ctx, workflows.WorkflowID(tenant, runID), "", name, arg)
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return fmt.Errorf("run %s of tenant %s is not open: %w", runID, tenant, ErrNotFound)
		}
		return fmt.Errorf("signal run %s: %w", runID, err)
	}
	return nil
}

// AwaitDecision waits, up to wait, until the run has applied the decision
// of record d, and returns the step as the run then reports it. A step the
// run recorded otherwise is [ErrDecisionNotApplied]; a step still pending
// after wait is returned without an error (no worker may be running).
func (c *Client) AwaitDecision(ctx context.Context, d approvalstore.DecisionRecord, wait time.Duration) (workflows.Step, error) {
	deadline := time.Now().Add(wait)
	for {
		st, err := c.query(ctx, d.Tenant, d.RunID)
		if err != nil {
			return workflows.Step{}, err
		}
		step, err := findStep(st, d.Step)
		if err != nil {
			return step, err
		}
		if ap := step.Approval; step.State == workflows.StepPendingApproval && ap != nil && ap.EditRefused != "" &&
			d.Decision == approvalstore.DecisionEdit {
			return step, fmt.Errorf("run %s refused the edit of step %d, which stays pending: %s: %w",
				d.RunID, d.Step, ap.EditRefused, ErrDecisionNotApplied)
		}
		if step.State != workflows.StepPendingApproval {
			if ap := step.Approval; ap == nil || string(ap.Decision) != d.Decision || ap.Approver != d.Approver {
				return step, fmt.Errorf("run %s step %d is %s: %w", d.RunID, d.Step, step.State, ErrDecisionNotApplied)
			}
			return step, nil
		}
		if time.Now().After(deadline) {
			return step, nil
		}
		select {
		case <-ctx.Done():
			return step, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// roundOf is the round a decision's signal names: none for the first, as
// runs begun before rounds expect.
func roundOf(round int) int {
	if round <= 1 {
		return 0
	}
	return round
}
