package inbox

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/workflows"
)

// turnView is the steps one planning turn proposed, as the run page groups
// them. Turn is 0 for steps of a run older than turns, which stand alone.
type turnView struct {
	Turn  int
	Steps []stepView
}

// turnsOf groups a run's steps, in order, by the turn that proposed them.
func turnsOf(steps []stepView) []turnView {
	var out []turnView
	for _, v := range steps {
		if n := len(out); n > 0 && out[n-1].Turn == v.Turn {
			out[n-1].Steps = append(out[n-1].Steps, v)
			continue
		}
		out = append(out, turnView{Turn: v.Turn, Steps: []stepView{v}})
	}
	return out
}

// runControls are the operator's forms on the run page: cancel, and pause
// or resume, for a run that is open and not cancelled.
type runControls struct {
	// Paused says the run is paused: the page offers Resume, not Pause.
	Paused bool
}

// controlsOf is what an operator may ask of a run in status st, or nil.
func controlsOf(id approvals.Identity, st workflows.Status) *runControls {
	if !id.Role.CanStart() || st.Cancel != nil {
		return nil
	}
	switch st.State {
	case workflows.RunCompleted, workflows.RunFailed, workflows.RunCancelled, workflows.RunCancelling:
		return nil
	}
	return &runControls{Paused: st.Paused != nil}
}

// renderRun reads the run the request names and renders its page with p's
// messages; a run that cannot be read is the error page.
func (s *Inbox) renderRun(w http.ResponseWriter, r *http.Request, p page) {
	st, err := s.api.Status(r.Context(), *p.ID, r.PathValue("run_id"))
	if err != nil {
		var ae *approvals.APIError
		msg, status := "The run could not be read.", http.StatusInternalServerError
		if errors.As(err, &ae) {
			msg, status = ae.Message, ae.Status
		}
		p.Error = strings.TrimSpace(p.Error + " " + msg)
		if p.Status == 0 {
			p.Status = status
		}
		s.render(w, "error", p)
		return
	}
	p.Run, p.Steps = &st, s.stepViews(st.Steps)
	p.Turns = turnsOf(p.Steps)
	p.Controls = controlsOf(*p.ID, st)
	p.Spend = spendRowsOf(st)
	s.render(w, "run", p)
}

// controlForm answers the run page's cancel, pause and resume forms, with
// the protections of the decision form (a signed-in session, a form of at
// most MaxBodyBytes and the session's CSRF token), through the path the
// API takes: only an operator may, and each request leaves its
// audit row. It answers with the run page and a message.
func (s *Inbox) controlForm(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sess, p, ok := s.sessionForm(w, r)
		if !ok {
			return
		}
		runID := r.PathValue("run_id")
		p.Title = "Run " + runID
		res, err := s.api.Control(r.Context(), approvals.ControlInput{Caller: approvals.CallerOf(r, sess.id, approvalstore.ViaInbox),
			RunID: runID, Action: action, Reason: r.PostForm.Get("reason")})
		if err != nil {
			p = s.formError(p, action, runID, 0, err)
			s.renderRun(w, r, p)
			return
		}
		s.redirectWithFlashTo(w, r, "/runs/"+url.PathEscape(runID), controlFlash(action, runID, res))
	}
}

// controlFlash is the message after an operator's request the run took.
func controlFlash(action, runID string, res runs.Controlled) string {
	st := res.Status
	switch action {
	case approvalstore.ActionCancel:
		c := st.Cancel
		if res.Repeated && c != nil {
			return fmt.Sprintf("Run %s was already cancelled by %s at %s.", runID, c.By, c.At.UTC().Format("2006-01-02 15:04 UTC"))
		}
		msg := fmt.Sprintf("You cancelled run %s: it is %s.", runID, st.State)
		if res.Withdrawn == 1 {
			msg += " 1 pending approval was withdrawn."
		} else if res.Withdrawn > 1 {
			msg += fmt.Sprintf(" %d pending approvals were withdrawn.", res.Withdrawn)
		}
		if rc := st.Receipt; rc != nil && len(rc.InFlight) == 1 {
			msg += fmt.Sprintf(" Step %d is still running and ends on its own terms.", rc.InFlight[0])
		} else if rc != nil && len(rc.InFlight) > 1 {
			msg += fmt.Sprintf(" %d steps are still running and end on their own terms.", len(rc.InFlight))
		}
		return msg
	case approvalstore.ActionPause:
		if res.Repeated && st.Paused != nil {
			return fmt.Sprintf("Run %s was already paused by %s.", runID, st.Paused.By)
		}
		return fmt.Sprintf("You paused run %s: it starts no step until it is resumed.", runID)
	}
	if res.Repeated {
		return fmt.Sprintf("Run %s was not paused.", runID)
	}
	return fmt.Sprintf("You resumed run %s.", runID)
}
