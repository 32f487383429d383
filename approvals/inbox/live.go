package inbox

import (
	_ "embed"
	"encoding/json"
	"net/http"

	"github.com/oncerun/oncerun/approvals"
)

// liveJS follows a page's events and brings the page up to date
// (static/live.js): the inbox's lists at /, a run's steps and the text its
// model is writing at /runs/{run_id}. A page without it is as it was
// rendered, up to date on reload.
//
//go:embed static/live.js
var liveJS []byte

// liveScriptPath is where the pages load liveJS from.
const liveScriptPath = "/static/live.js"

// handleLive registers the live pages' routes on the pages' mux: the
// script, and the event streams of the signed-in person's tenant and of
// one of its runs, as Server-Sent Events or a JSON page (see
// approvals.Server.RunEvents).
func (s *Inbox) handleLive(pages *http.ServeMux) {
	pages.HandleFunc("GET "+liveScriptPath, serveLiveJS)
	pages.HandleFunc("GET /events", s.tenantEvents)
	pages.HandleFunc("GET /runs/{run_id}/events", s.runEvents)
}

func (s *Inbox) tenantEvents(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.eventSession(w, r)
	if !ok {
		return
	}
	s.api.TenantEvents(w, r, sess.id)
}

func (s *Inbox) runEvents(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.eventSession(w, r)
	if !ok {
		return
	}
	s.api.RunEvents(w, r, sess.id)
}

// eventSession is the session of a request for events; one that is not
// signed in is answered 401, as the API answers, not sent to the login
// page: a script reads it, and an EventSource given a 401 stops trying.
func (s *Inbox) eventSession(w http.ResponseWriter, r *http.Request) (session, bool) {
	sess, ok := s.session(r)
	if !ok {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(approvals.ErrorBody{Error: approvals.ErrorDetail{
			Code: "unauthorized", Message: "sign in to the inbox to follow its events"}})
		return session{}, false
	}
	return sess, true
}

// serveLiveJS serves the live pages' script. It asks for no session: it
// holds nothing of a tenant's.
func serveLiveJS(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/javascript; charset=utf-8")
	// Revalidated on each load: a new release's script is used at once.
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(liveJS)
}
