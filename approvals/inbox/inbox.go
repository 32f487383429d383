package inbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/internal/telemetry"
	"github.com/oncerun/oncerun/workflows"
)

// Cookies of the inbox, by the names they have over plain HTTP; a Secure
// cookie's name has the __Host- prefix ([Inbox.cookieName]).
const (
	tokenCookie = "oncerun_token"
	csrfCookie  = "oncerun_csrf"
	// hostPrefix makes a browser refuse the cookie unless it is Secure,
	// has Path=/ and no Domain, and was set by this very host over HTTPS:
	// a sibling host or a plain-HTTP page cannot plant or overwrite it.
	hostPrefix = "__Host-"
	// sessionAge is how long a login lasts.
	sessionAge = 12 * time.Hour
	// inboxStatusLimit is how many pending steps the inbox shows with
	// their run's earlier steps.
	inboxStatusLimit = 50
	// inboxProblemLimit is how many steps that need resolution the inbox
	// shows, and how many withdrawn approvals.
	inboxProblemLimit = 20
	// inboxWithdrawnWindow is how long the inbox shows an approval
	// withdrawn because its run was cancelled.
	inboxWithdrawnWindow = 24 * time.Hour
)

var pageFuncs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04 UTC")
	},
	"iso": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	// decided is what a decision did to a step, in words.
	"decided":    func(d workflows.Decision) string { return d.PastTense() },
	"expiryText": expiryText,
	"urgent":     func(seconds int64) bool { return seconds < urgentSeconds },
	"short": func(s string) string {
		if len(s) > 12 {
			return s[:12]
		}
		return s
	},
	"runURL": func(runID string) string { return "/runs/" + url.PathEscape(runID) },
	"decideURL": func(runID string, step int64) string {
		return "/runs/" + url.PathEscape(runID) + "/steps/" + strconv.FormatInt(step, 10) + "/decide"
	},
	"resolveURL": func(runID string, step int64) string {
		return "/runs/" + url.PathEscape(runID) + "/steps/" + strconv.FormatInt(step, 10) + "/resolve"
	},
	"checkURL": func(runID string, step int64) string {
		return "/runs/" + url.PathEscape(runID) + "/steps/" + strconv.FormatInt(step, 10) + "/check"
	},
	"answerURL": func(runID string, step int64) string {
		return "/runs/" + url.PathEscape(runID) + "/steps/" + strconv.FormatInt(step, 10) + "/answer"
	},
	"editURL": func(runID string, step int64) string {
		return "/runs/" + url.PathEscape(runID) + "/steps/" + strconv.FormatInt(step, 10) + "/edit"
	},
	// runActionURL is the path of a run's cancel, pause or resume form.
	"runActionURL": func(runID, action string) string {
		return "/runs/" + url.PathEscape(runID) + "/" + url.PathEscape(action)
	},
	"resolveForm": func(csrf, runID string, step int64, round int) resolveFormView {
		return resolveFormView{CSRF: csrf, RunID: runID, Step: step, Round: round}
	},
	"argField": func(name string) string { return argPrefix + name },
	"questionCard": func(p page, it inboxItem) questionCard {
		c := questionCard{Item: it, CSRF: p.CSRF}
		if p.ID != nil && it.Question != nil {
			c.CanAnswer = p.ID.Role.CanDecide() && (len(it.Question.AnswerBy) == 0 || slices.Contains(it.Question.AnswerBy, p.ID.Name))
		}
		return c
	},
	"string": func(raw json.RawMessage) string { return string(raw) },
}

// questionCard is what a question's card needs: the item, the session's
// CSRF token, and whether the signed-in person may answer it.
type questionCard struct {
	Item      inboxItem
	CSRF      string
	CanAnswer bool
}

// resolveFormView is what the form answering a step's unknown outcome
// needs: the session's CSRF token, the step and the round it answers.
type resolveFormView struct {
	CSRF  string
	RunID string
	Step  int64
	Round int
}

// argRow is one argument as the inbox shows it.
type argRow struct {
	Name  string
	Value string
	// Money is set when Value is an amount written as money; Raw is then
	// the argument as the call has it (minor units).
	Money bool
	Raw   string
}

// argRows lists the top-level arguments of a call, a string as its text and
// anything else as compact JSON; arguments that are not an object are one
// row.
func argRows(raw json.RawMessage) []argRow {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return []argRow{{Name: "(arguments)", Value: string(raw)}}
	}
	rows := make([]argRow, 0, len(obj))
	for k, v := range obj {
		var s string
		if bytes.Equal(bytes.TrimSpace(v), []byte("null")) || json.Unmarshal(v, &s) != nil {
			var buf bytes.Buffer
			if json.Compact(&buf, v) == nil {
				s = buf.String()
			} else {
				s = string(v)
			}
		}
		rows = append(rows, argRow{Name: k, Value: s})
	}
	slices.SortFunc(rows, func(a, b argRow) int { return strings.Compare(a.Name, b.Name) })
	return rows
}

// page is what every page template gets.
type page struct {
	Title  string
	ID     *approvals.Identity
	CSRF   string
	Flash  string
	Error  string
	Status int

	// Listed is set when the inbox's lists were read: a page without them
	// says nothing of what waits.
	Listed bool

	// Inbox.
	Items    []inboxItem
	Problems []problemItem
	// EditFailed is an edit the inbox refused, shown again on its card.
	EditFailed *editAttempt
	// Run page.
	Run   *workflows.Status
	Steps []stepView
	// Turns are Steps grouped by the planning turn that proposed them.
	Turns []turnView
	// Controls are the operator's forms, nil for another role.
	Controls *runControls
	// Spend is what the run spent against its budget, per currency.
	Spend []spendRow

	// Limits page.
	Limits []limitView

	// Runs and decided pages, and the link to the page after.
	RunList []runs.Summary
	Decided []approvals.Item
	Pager   pager

	// Withdrawn lists, in the inbox, the approvals withdrawn lately
	// because their run was cancelled.
	Withdrawn []approvals.Item
}

// inboxItem is a pending step with its run's earlier steps.
type inboxItem struct {
	approvals.Item
	// Index numbers the cards, for the ids of their form controls.
	Index int
	Rows  []argRow
	// Left is the time left before the deadline, in words.
	Left     string
	Prior    []stepView
	PriorErr string
	// Edit is the step's edit form, nil when its tool allows no edit.
	Edit *editView
	// EditRefused is why the run refused the latest edit of the step.
	EditRefused string
	// Answer is the answer form of a step whose server asked a person.
	Answer *answerView
}

// problemItem is a step that needs resolution, with its arguments.
type problemItem struct {
	approvals.Item
	Rows []argRow
	// EditedRows are the arguments of a recorded edit not yet applied.
	EditedRows []argRow
	// Checkable is set on a step whose outcome is unknown when its tool
	// has a paired read this service can run: the card offers to ask the
	// provider again.
	Checkable bool
}

// session is the identity and CSRF token of a logged-in browser.
type session struct {
	id   approvals.Identity
	csrf string
}

// session reads the request's cookies; ok is false when the browser is not
// logged in with a token that is still valid.
func (s *Inbox) session(r *http.Request) (session, bool) {
	tc, err := r.Cookie(s.cookieName(r, tokenCookie))
	if err != nil || tc.Value == "" {
		return session{}, false
	}
	id, ok := s.api.Identify(tc.Value)
	if !ok {
		return session{}, false
	}
	cc, err := r.Cookie(s.cookieName(r, csrfCookie))
	if err != nil || cc.Value == "" {
		return session{}, false
	}
	telemetry.LinkCaller(r.Context())
	return session{id: id, csrf: cc.Value}, true
}

// cookie is the inbox's cookie name (tokenCookie, csrfCookie, flashCookie)
// for request r: HttpOnly, SameSite=Strict, Path=/, no Domain, and Secure
// with the __Host- prefix when r came over TLS or SecureCookies is set.
func (s *Inbox) cookie(r *http.Request, name, value string, age time.Duration) *http.Cookie {
	return &http.Cookie{
		Name: s.cookieName(r, name), Value: value, Path: "/", MaxAge: int(age / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.secure(r),
	}
}

// secure reports whether the inbox's cookies for r are Secure: r came over
// TLS, or TLS ends at a proxy in front (SecureCookies).
func (s *Inbox) secure(r *http.Request) bool { return s.cfg.SecureCookies || r.TLS != nil }

// cookieName is what the inbox's cookie name is called for r: with the
// __Host- prefix when the cookie is Secure. Over plain HTTP (a laptop's
// http://localhost) the bare name: browsers refuse a __Host- cookie that
// is not Secure, and not every browser takes a Secure cookie over plain
// HTTP, even from localhost. A cookie of the other name is not read.
func (s *Inbox) cookieName(r *http.Request, name string) string {
	if s.secure(r) {
		return hostPrefix + name
	}
	return name
}

func (s *Inbox) render(w http.ResponseWriter, name string, p page) {
	var buf bytes.Buffer
	if err := s.pages.ExecuteTemplate(&buf, name, p); err != nil {
		s.log.Error("render page", zap.String("page", name), zap.Error(err))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if p.Status == http.StatusServiceUnavailable {
		h.Set("Retry-After", retryAfter)
	}
	w.WriteHeader(cmpStatus(p.Status))
	_, _ = w.Write(visible(buf.Bytes()))
}

func cmpStatus(s int) int {
	if s == 0 {
		return http.StatusOK
	}
	return s
}

func (s *Inbox) loginPage(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.session(r); ok {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	s.render(w, "login", page{Title: "Sign in"})
}

func (s *Inbox) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, s.api.MaxBodyBytes())
	if err := r.ParseForm(); err != nil {
		s.render(w, "login", page{Title: "Sign in", Error: "The form could not be read.", Status: http.StatusBadRequest})
		return
	}
	tok := strings.TrimSpace(r.PostForm.Get("token"))
	id, ok := s.api.Identify(tok)
	if tok == "" || !ok {
		s.log.Warn("inbox login with an unknown token", zap.String("remote_addr", approvals.RemoteAddr(r)))
		s.render(w, "login", page{Title: "Sign in", Error: "That token is not valid.", Status: http.StatusUnauthorized})
		return
	}
	csrf, err := randomString()
	if err != nil {
		s.render(w, "login", page{Title: "Sign in", Error: "Could not start a session; try again.", Status: http.StatusInternalServerError})
		return
	}
	http.SetCookie(w, s.cookie(r, tokenCookie, tok, sessionAge))
	http.SetCookie(w, s.cookie(r, csrfCookie, csrf, sessionAge))
	s.log.Info("inbox login", zap.String("tenant", id.Tenant), zap.String("name", id.Name), zap.String("remote_addr", approvals.RemoteAddr(r)))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Inbox) logout(w http.ResponseWriter, r *http.Request) {
	if sess, ok := s.session(r); ok {
		if bad := s.parseForm(w, r); bad != nil {
			s.render(w, "error", page{Title: "Refused", Error: bad.Message, Status: bad.Status})
			return
		}
		if !s.validCSRF(r, sess) {
			s.render(w, "error", page{Title: "Refused", Error: "The form was not sent from this inbox; reload the page and try again.", Status: http.StatusForbidden})
			return
		}
	}
	http.SetCookie(w, s.cookie(r, tokenCookie, "", -time.Second))
	http.SetCookie(w, s.cookie(r, csrfCookie, "", -time.Second))
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// parseForm reads a form of at most MaxBodyBytes: a larger one is 413, one
// that does not parse 400.
func (s *Inbox) parseForm(w http.ResponseWriter, r *http.Request) *approvals.APIError {
	r.Body = http.MaxBytesReader(w, r.Body, s.api.MaxBodyBytes())
	if err := r.ParseForm(); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return refused(http.StatusRequestEntityTooLarge, "body_too_large", "The form is larger than %d bytes.", tooBig.Limit)
		}
		return refused(http.StatusBadRequest, "invalid_request", "The form could not be read.")
	}
	return nil
}

// validCSRF checks the parsed form's csrf field against the session's; a
// refusal is logged, as the sign of a form sent from another site.
func (s *Inbox) validCSRF(r *http.Request, sess session) bool {
	got := r.PostForm.Get("csrf")
	if got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) == 1 {
		return true
	}
	s.log.Warn("inbox form refused: its CSRF token is missing or wrong", zap.String("path", r.URL.Path),
		zap.String("tenant", sess.id.Tenant), zap.String("name", sess.id.Name), zap.String("remote_addr", approvals.RemoteAddr(r)))
	return false
}

// signedIn is the page titled title of a signed-in browser; a browser
// that is not signed in is sent to the login page, and ok is false.
func (s *Inbox) signedIn(w http.ResponseWriter, r *http.Request, title string) (p page, ok bool) {
	sess, ok := s.session(r)
	if !ok {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return page{}, false
	}
	return page{Title: title, ID: &sess.id, CSRF: sess.csrf}, true
}

func (s *Inbox) inbox(w http.ResponseWriter, r *http.Request) {
	p, ok := s.signedIn(w, r, "Approvals")
	if !ok {
		return
	}
	p.Flash = s.takeFlash(w, r)
	ctx, cancel := s.dbContext(r.Context())
	defer cancel()
	s.renderInbox(ctx, w, r, p)
}

// renderInbox fills the inbox's lists and renders it. The lists are read
// within ctx, the request's one database budget (Config.DBTimeout); a
// list that cannot be read is the 503 page, with no list at all, so that
// nothing reads as empty that was not read.
func (s *Inbox) renderInbox(ctx context.Context, w http.ResponseWriter, r *http.Request, p page) {
	items, err := s.api.List(ctx, *p.ID, approvals.ListQuery{View: approvals.ViewPending, Limit: approvals.MaxListLimit})
	if err != nil {
		s.listFailed(w, p, "pending approvals", err)
		return
	}
	problems, err := s.api.List(ctx, *p.ID, approvals.ListQuery{View: approvals.ViewNeedsResolution, Limit: inboxProblemLimit})
	if err != nil {
		s.listFailed(w, p, "steps that need resolution", err)
		return
	}
	withdrawn, err := s.api.Withdrawn(ctx, *p.ID, inboxWithdrawnWindow, inboxProblemLimit)
	if err != nil {
		s.listFailed(w, p, "approvals withdrawn by cancelled runs", err)
		return
	}
	p.Listed, p.Withdrawn = true, withdrawn
	p.Items = make([]inboxItem, len(items))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, it := range items {
		p.Items[i] = s.inboxItemOf(i, it, p.EditFailed)
		if i >= inboxStatusLimit {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
			defer cancel()
			st, err := s.api.Status(ctx, *p.ID, it.RunID)
			if err != nil {
				p.Items[i].PriorErr = "The run's earlier steps are not available right now."
				return
			}
			var prior []workflows.Step
			for _, step := range st.Steps {
				switch {
				case step.Step < it.Step:
					prior = append(prior, step)
				case step.Step == it.Step && step.Approval != nil:
					p.Items[i].EditRefused = step.Approval.EditRefused
				}
			}
			p.Items[i].Prior = s.stepViews(prior)
		})
	}
	wg.Wait()
	for _, it := range problems {
		pi := problemItem{Item: it, Rows: s.argRowsOf(it.Tool, it.Args)}
		if t, ok := s.api.Tool(it.Tool); ok && it.Kind == approvals.KindOutcomeUnknown && t.PairedRead != "" {
			_, pi.Checkable = s.api.Tool(t.PairedRead)
		}
		if d := it.Decision; d != nil && d.Decision == workflows.DecisionEdit {
			pi.EditedRows = s.argRowsOf(it.Tool, d.EditedArgs)
		}
		p.Problems = append(p.Problems, pi)
	}
	s.render(w, "inbox", p)
}

// listFailed renders the inbox's 503 page for a list (what, in words) that
// could not be read, after what went wrong before it, if anything.
func (s *Inbox) listFailed(w http.ResponseWriter, p page, what string, err error) {
	s.log.Error("inbox: list "+what, zap.Error(err))
	msg := "The " + what + " could not be read; try again shortly."
	p.Error, p.Status = strings.TrimSpace(p.Error+" "+msg), http.StatusServiceUnavailable
	s.render(w, "inbox", p)
}

// inboxItemOf is a pending step's card, but for its run's earlier steps;
// failed, when it is this step's, is an edit to show again.
func (s *Inbox) inboxItemOf(i int, it approvals.Item, failed *editAttempt) inboxItem {
	card := inboxItem{Item: it, Index: i, Rows: s.argRowsOf(it.Tool, it.Args), Left: approvals.TimeLeft(it.SecondsLeft)}
	if it.Kind == approvals.KindQuestion {
		card.Answer = answerFormOf(it.Question)
		return card
	}
	var submitted url.Values
	if failed != nil && failed.RunID == it.RunID && failed.Step == it.Step {
		submitted = failed.Form
	}
	card.Edit = s.editFormOf(it.Tool, it.Args, submitted)
	if card.Edit != nil && submitted != nil {
		card.Edit.Error = failed.Message
	}
	return card
}

func (s *Inbox) runPage(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(r)
	if !ok {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	p := page{Title: "Run " + r.PathValue("run_id"), ID: &sess.id, CSRF: sess.csrf}
	p.Flash = s.takeFlash(w, r)
	s.renderRun(w, r, p)
}

func randomString() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
