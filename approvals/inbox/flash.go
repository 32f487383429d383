package inbox

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"time"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/untrusted"
)

// The inbox's message after a form (a "flash") travels from the form's 303
// to the page it leads to in a cookie of its own, set and cleared by the
// server: a link cannot carry one, so no crafted URL can make the inbox say
// what nobody did.
const (
	flashCookie = "oncerun_flash"
	// flashAge is how long a message waits to be shown.
	flashAge = time.Minute
	// maxFlashBytes bounds a message as it is read back.
	maxFlashBytes = 1 << 10
)

// decidedFlash is the message after a decision of record: what it did to
// which step.
func decidedFlash(d approvals.DecisionRecord) string {
	return "You " + d.Decision.PastTense() + " step " + strconv.FormatInt(d.Step, 10) + " of run " + d.RunID + "."
}

// resolvedFlash is the message after an answer of record.
func resolvedFlash(d approvals.ResolutionRecord) string {
	return "You answered " + string(d.Outcome) + " for step " + strconv.FormatInt(d.Step, 10) + " of run " + d.RunID + "."
}

// redirectWithFlash sends the browser to the inbox, which shows msg once.
func (s *Inbox) redirectWithFlash(w http.ResponseWriter, r *http.Request, msg string) {
	s.redirectWithFlashTo(w, r, "/", msg)
}

// redirectWithFlashTo sends the browser to the inbox's page at path, which
// shows msg once.
func (s *Inbox) redirectWithFlashTo(w http.ResponseWriter, r *http.Request, path, msg string) {
	http.SetCookie(w, s.cookie(r, flashCookie, base64.RawURLEncoding.EncodeToString([]byte(msg)), flashAge))
	http.Redirect(w, r, path, http.StatusSeeOther)
}

// takeFlash returns the message a form left for this page, if any, and
// clears it so that a reload does not show it again.
func (s *Inbox) takeFlash(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return ""
	}
	http.SetCookie(w, s.cookie(r, flashCookie, "", -time.Second))
	raw, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil {
		return ""
	}
	return untrusted.Cut(string(raw), maxFlashBytes)
}
