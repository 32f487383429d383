package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"go.uber.org/zap"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/workflows"
)

// inboxForm checks what every form of the inbox needs: a signed-in
// session, a form that parses (of at most MaxBodyBytes) and carries the
// session's CSRF token, and a step number. A form that fails is refused,
// without an audit row as a form of another site would be, and rendered
// here; ok is false then.
func (s *Inbox) inboxForm(w http.ResponseWriter, r *http.Request) (sess session, p page, step int64, ok bool) {
	sess, p, ok = s.sessionForm(w, r)
	if !ok {
		return sess, p, 0, false
	}
	step, err := approvals.ParseStep(r.PathValue("step"))
	if err != nil {
		p.Error, p.Status = err.Error(), http.StatusBadRequest
		s.render(w, "error", p)
		return sess, p, 0, false
	}
	return sess, p, step, true
}

// sessionForm checks what every form of the inbox needs but a step: a
// signed-in session, and a form that parses (of at most MaxBodyBytes) and
// carries the session's CSRF token. A form that fails is refused and
// rendered here; ok is false then.
func (s *Inbox) sessionForm(w http.ResponseWriter, r *http.Request) (sess session, p page, ok bool) {
	sess, ok = s.session(r)
	if !ok {
		s.render(w, "login", page{Title: "Sign in", Error: "Your session has ended; sign in again.", Status: http.StatusUnauthorized})
		return sess, p, false
	}
	p = page{Title: "Approvals", ID: &sess.id, CSRF: sess.csrf}
	if bad := s.parseForm(w, r); bad != nil {
		p.Error, p.Status = bad.Message, bad.Status
		s.render(w, "error", p)
		return sess, p, false
	}
	if !s.validCSRF(r, sess) {
		p.Error, p.Status = "The form was not sent from this inbox; reload the page and try again.", http.StatusForbidden
		s.render(w, "error", p)
		return sess, p, false
	}
	return sess, p, true
}

// formFailed renders the inbox with p, whose error is what went wrong
// recording a form's decision or answer (see formError): within what is
// left of ctx, the request's database budget, the inbox again; when the
// budget is spent or the database is out of reach (err), the 503 page at
// once, without its lists, as reading them would wait a second time.
func (s *Inbox) formFailed(ctx context.Context, w http.ResponseWriter, r *http.Request, p page, err error) {
	if ctx.Err() != nil || dbUnavailable(err) {
		s.render(w, "inbox", p)
		return
	}
	s.renderInbox(ctx, w, r, p)
}

// formError sets p's error and status to what went wrong recording a
// form's decision or answer (what, in words), and logs a failure that is
// not a refusal.
func (s *Inbox) formError(p page, what, runID string, step int64, err error) page {
	var ae *approvals.APIError
	switch {
	case errors.As(err, &ae):
		p.Error, p.Status = ae.Message, ae.Status
	case approvals.Unavailable(err):
		s.log.Warn("inbox "+what+": database unavailable", zap.String("run_id", runID), zap.Int64("step", step), zap.Error(err))
		p.Error, p.Status = "The database did not answer in time; the "+what+" may not be recorded. Try again shortly.", http.StatusServiceUnavailable
	default:
		s.log.Error("inbox "+what+" failed", zap.String("run_id", runID), zap.Int64("step", step), zap.Error(err))
		p.Error, p.Status = "The "+what+" could not be recorded; try again.", http.StatusInternalServerError
	}
	return p
}

// dbUnavailable reports an error of a database that did not answer in
// time or could not be reached, as opposed to a refusal.
func dbUnavailable(err error) bool {
	var ae *approvals.APIError
	return !errors.As(err, &ae) && approvals.Unavailable(err)
}

func (s *Inbox) decideForm(w http.ResponseWriter, r *http.Request) {
	sess, p, step, ok := s.inboxForm(w, r)
	if !ok {
		return
	}
	ctx, cancel := s.dbContext(r.Context())
	defer cancel()
	runID := r.PathValue("run_id")
	decision := workflows.Decision(r.PostForm.Get("decision"))
	res, err := s.api.Decide(ctx, s.decideInput(r, sess.id, step, decision))
	if err != nil {
		s.formFailed(ctx, w, r, s.formError(p, "decision", runID, step, err), err)
		return
	}
	s.redirectWithFlash(w, r, decidedFlash(res.Decision))
}

// decideInput is decision form r's decision about step, by id: the
// reviewed hash, the comment and the round the form carries.
func (s *Inbox) decideInput(r *http.Request, id approvals.Identity, step int64, d workflows.Decision) approvals.DecideInput {
	sr := approvals.StepRequestOf(r, id, approvalstore.ViaInbox, step)
	sr.Round = formRound(r.PostForm.Get("round"))
	return approvals.DecideInput{StepRequest: sr, Decision: d, ArgsHash: r.PostForm.Get("args_hash"), Comment: r.PostForm.Get("comment")}
}

// formRound is the round a decision form was rendered for; 0 (the
// current round) when the form names none or garbles it.
func formRound(v string) int {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0
	}
	return n
}

// resolveForm answers the inbox's resolve form, with the protections of the
// decision form: a signed-in session, a form of at most MaxBodyBytes and the
// session's CSRF token, or no audit row.
func (s *Inbox) resolveForm(w http.ResponseWriter, r *http.Request) {
	sess, p, step, ok := s.inboxForm(w, r)
	if !ok {
		return
	}
	runID := r.PathValue("run_id")
	req := approvals.ResolveRequest{Outcome: r.PostForm.Get("outcome"), Result: json.RawMessage(r.PostForm.Get("result")),
		Note: r.PostForm.Get("note")}
	sr := approvals.StepRequestOf(r, sess.id, approvalstore.ViaInbox, step)
	if v := r.PostForm.Get("round"); v != "" {
		var err error
		if req.Round, err = strconv.Atoi(v); err != nil {
			sr.Invalid = refused(http.StatusBadRequest, "invalid_request", "round %q is not a round number", v)
		}
	}
	ctx, cancel := s.dbContext(r.Context())
	defer cancel()
	res, err := s.api.Resolve(ctx, approvals.ResolveRequestInput(sr, req))
	if err != nil {
		s.formFailed(ctx, w, r, s.formError(p, "answer", runID, step, err), err)
		return
	}
	s.redirectWithFlash(w, r, resolvedFlash(res.Resolution))
}

// checkForm answers the inbox's "Check with the provider again" button,
// with the protections of every inbox form.
func (s *Inbox) checkForm(w http.ResponseWriter, r *http.Request) {
	sess, p, step, ok := s.inboxForm(w, r)
	if !ok {
		return
	}
	runID := r.PathValue("run_id")
	res, err := s.api.Check(r.Context(), approvals.StepRequestOf(r, sess.id, approvalstore.ViaInbox, step))
	if err != nil {
		s.formFailed(r.Context(), w, r, s.formError(p, "check", runID, step, err), err)
		return
	}
	if !res.Found {
		s.redirectWithFlash(w, r, fmt.Sprintf("The provider does not hold step %d of run %s (asked just now). If nothing can still apply it, answer not applied.", step, runID))
		return
	}
	s.redirectWithFlash(w, r, fmt.Sprintf("The provider holds step %d of run %s: it is answered applied, with the provider's record.", step, runID))
}
