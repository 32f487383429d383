package inbox

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/untrusted"
)

// The inbox's message after a form (a "flash") travels from the form's 303
// to the page it leads to in a cookie of its own, set and cleared by the
// server: a link cannot carry one, so no crafted URL can make the inbox say
// what nobody did. Nor can a cookie planted by someone else (a sibling
// host, a page over plain HTTP of the same name): the cookie is signed
// with HMAC-SHA256 under a key this process drew at its start, over the
// session it was set for, its expiry and the message; one that is not
// the inbox's own for this session is ignored and cleared.
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
	http.SetCookie(w, s.cookie(r, flashCookie, s.sealFlash(r, msg, time.Now().Add(flashAge)), flashAge))
	http.Redirect(w, r, path, http.StatusSeeOther)
}

// takeFlash returns the message a form left for this page, if any, and
// clears it so that a reload does not show it again. A cookie the inbox
// did not sign for this session, or whose minute has passed, shows
// nothing.
func (s *Inbox) takeFlash(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(s.cookieName(r, flashCookie))
	if err != nil {
		return ""
	}
	http.SetCookie(w, s.cookie(r, flashCookie, "", -time.Second))
	msg, ok := s.openFlash(r, c.Value, time.Now())
	if !ok {
		return ""
	}
	return untrusted.Cut(msg, maxFlashBytes)
}

// sealFlash is the flash cookie's value for msg, until expires:
// "<expiry, Unix seconds>.<msg, base64url>.<HMAC-SHA256, base64url>". The
// MAC also covers the cookie's name and the session's CSRF token, so
// that a message is shown only to the session it was set for.
func (s *Inbox) sealFlash(r *http.Request, msg string, expires time.Time) string {
	payload := strconv.FormatInt(expires.Unix(), 10) + "." + base64.RawURLEncoding.EncodeToString([]byte(msg))
	return payload + "." + base64.RawURLEncoding.EncodeToString(s.flashMAC(r, payload))
}

// openFlash returns the message of a flash cookie's value, and whether it
// is the inbox's own for this session and not expired at now.
func (s *Inbox) openFlash(r *http.Request, value string, now time.Time) (string, bool) {
	payload, sig, ok := cutLast(value, ".")
	if !ok {
		return "", false
	}
	mac, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(mac, s.flashMAC(r, payload)) {
		return "", false
	}
	exp, enc, _ := strings.Cut(payload, ".")
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || !now.Before(time.Unix(unix, 0)) {
		return "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return "", false
	}
	return string(raw), true
}

// flashMAC is the HMAC-SHA256 of a flash cookie's payload, under the
// cookie's name and the session's CSRF token.
func (s *Inbox) flashMAC(r *http.Request, payload string) []byte {
	var session string
	if c, err := r.Cookie(s.cookieName(r, csrfCookie)); err == nil {
		session = c.Value
	}
	m := hmac.New(sha256.New, s.flashKey)
	m.Write([]byte(s.cookieName(r, flashCookie) + "\x00" + session + "\x00" + payload))
	return m.Sum(nil)
}

// cutLast slices s around the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}
