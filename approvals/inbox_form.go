package approvals

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/workflows"
)

// inboxForm checks what every form of the inbox needs: a signed-in
// session, a form that parses (of at most MaxBodyBytes) and carries the
// session's CSRF token, and a step number. A form that fails is refused,
// without an audit row as a form of another site would be, and rendered
// here; ok is false then.
func (s *Server) inboxForm(w http.ResponseWriter, r *http.Request) (sess session, p page, step int64, ok bool) {
	sess, p, ok = s.sessionForm(w, r)
	if !ok {
		return sess, p, 0, false
	}
	step, err := stepNumber(r.PathValue("step"))
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
func (s *Server) sessionForm(w http.ResponseWriter, r *http.Request) (sess session, p page, ok bool) {
	sess, ok = s.session(r)
	if !ok {
		s.render(w, "login", page{Title: "Sign in", Error: "Your session has ended; sign in again.", Status: http.StatusUnauthorized})
		return sess, p, false
	}
	p = page{Title: "Approvals", ID: &sess.id, CSRF: sess.csrf}
	if bad := s.parseForm(w, r); bad != nil {
		p.Error, p.Status = bad.message, bad.status
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
func (s *Server) formFailed(ctx context.Context, w http.ResponseWriter, r *http.Request, p page, err error) {
	if ctx.Err() != nil || dbUnavailable(err) {
		s.render(w, "inbox", p)
		return
	}
	s.renderInbox(ctx, w, r, p)
}

// formError sets p's error and status to what went wrong recording a
// form's decision or answer (what, in words), and logs a failure that is
// not a refusal.
func (s *Server) formError(p page, what, runID string, step int64, err error) page {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		p.Error, p.Status = ae.message, ae.status
	case unavailable(err):
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
	var ae *apiError
	return !errors.As(err, &ae) && unavailable(err)
}

func (s *Server) decideForm(w http.ResponseWriter, r *http.Request) {
	sess, p, step, ok := s.inboxForm(w, r)
	if !ok {
		return
	}
	ctx, cancel := s.dbContext(r.Context())
	defer cancel()
	runID := r.PathValue("run_id")
	decision := workflows.Decision(r.PostForm.Get("decision"))
	res, err := s.decide(ctx, decideInput{
		id: sess.id, runID: runID, step: step, decision: decision,
		argsHash: r.PostForm.Get("args_hash"), comment: r.PostForm.Get("comment"), round: formRound(r.PostForm.Get("round")),
		remote: remoteAddr(r), agent: r.UserAgent(), via: approvalstore.ViaInbox,
	})
	if err != nil {
		s.formFailed(ctx, w, r, s.formError(p, "decision", runID, step, err), err)
		return
	}
	s.redirectWithFlash(w, r, decidedFlash(res.Decision))
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
