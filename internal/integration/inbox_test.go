package integration

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/workflows"
)

// browser is a signed-out web client of the inbox: it keeps cookies and
// does not follow redirects.
type browser struct {
	a    *approvalsEnv
	http *http.Client
}

func (a *approvalsEnv) browser() *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(a.t, err)
	return &browser{a: a, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

// send sends a request; form, when not nil, is the urlencoded body.
func (b *browser) send(method, path string, form url.Values, headers ...string) (int, http.Header, string) {
	b.a.t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req, err := http.NewRequest(method, b.a.srv.URL+path, body)
	require.NoError(b.a.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := b.http.Do(req)
	require.NoError(b.a.t, err)
	defer resp.Body.Close()
	var sb strings.Builder
	_, err = io.Copy(&sb, resp.Body)
	require.NoError(b.a.t, err)
	return resp.StatusCode, resp.Header, sb.String()
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// signIn logs in as who and returns the inbox page and its CSRF token.
func (b *browser) signIn(who string) (string, string) {
	b.a.t.Helper()
	status, h, _ := b.send(http.MethodPost, "/login", url.Values{"token": {b.a.tokens[who]}})
	require.Equal(b.a.t, http.StatusSeeOther, status)
	require.Equal(b.a.t, "/", h.Get("Location"))
	status, _, page := b.send(http.MethodGet, "/", nil)
	require.Equal(b.a.t, http.StatusOK, status, page)
	m := csrfField.FindStringSubmatch(page)
	require.NotNil(b.a.t, m, "the inbox's forms carry a CSRF token")
	return page, m[1]
}

func TestInboxSignInAndCookies(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.serveApprovals(nil)
	b := a.browser()

	status, h, _ := b.send(http.MethodGet, "/", nil)
	assert.Equal(t, http.StatusSeeOther, status, "signed out, the inbox sends you to sign in")
	assert.Equal(t, "/login", h.Get("Location"))
	status, _, page := b.send(http.MethodGet, "/login", nil)
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, page, `<label for="token">Access token</label>`)

	status, _, page = b.send(http.MethodPost, "/login", url.Values{"token": {"oncerun_wrong"}})
	assert.Equal(t, http.StatusUnauthorized, status)
	assert.Contains(t, page, "That token is not valid.")

	status, h, _ = b.send(http.MethodPost, "/login", url.Values{"token": {a.tokens["dana"]}})
	require.Equal(t, http.StatusSeeOther, status)
	var tokenCookie *http.Cookie
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == "oncerun_token" {
			tokenCookie = c
		}
	}
	require.NotNil(t, tokenCookie, "the token is kept in a cookie")
	assert.True(t, tokenCookie.HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, tokenCookie.SameSite)
	assert.Equal(t, "/", tokenCookie.Path)

	// Over TLS the cookies are Secure too.
	req := httptest.NewRequest(http.MethodPost, "https://inbox.example/login", strings.NewReader(url.Values{"token": {a.tokens["dana"]}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	a.srv.Config.Handler.ServeHTTP(rec, req)
	require.Equal(t, http.StatusSeeOther, rec.Code)
	require.Len(t, rec.Result().Cookies(), 2)
	for _, c := range rec.Result().Cookies() {
		assert.True(t, c.Secure, c.Name)
	}
	assert.False(t, tokenCookie.Secure, "not over plain HTTP, unless configured")

	status, h, page = b.send(http.MethodGet, "/", nil)
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, page, "dana · tenant <strong>acme</strong> · approver")
	assert.Contains(t, page, "Nothing is waiting for a decision.")
	assert.Contains(t, h.Get("Content-Security-Policy"), "frame-ancestors 'none'")

	// Signing out needs the form's CSRF token, then clears the cookies.
	m := csrfField.FindStringSubmatch(page)
	require.NotNil(t, m)
	status, _, _ = b.send(http.MethodPost, "/logout", url.Values{"csrf": {"forged"}})
	assert.Equal(t, http.StatusForbidden, status)
	status, h, _ = b.send(http.MethodPost, "/logout", url.Values{"csrf": {m[1]}})
	require.Equal(t, http.StatusSeeOther, status)
	assert.Equal(t, "/login", h.Get("Location"))
	status, _, _ = b.send(http.MethodGet, "/", nil)
	assert.Equal(t, http.StatusSeeOther, status, "signed out again")
}

func TestInboxDecisionFormsAreProtected(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", worker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("csrf")
	step := a.startPending("ops", run)
	b := a.browser()
	page, csrf := b.signIn("dana")
	assert.Contains(t, page, "issue_credit — step 2 of run")
	path := "/runs/" + run + "/steps/2/decide"
	form := func(token string) url.Values {
		return url.Values{"csrf": {token}, "args_hash": {step.ArgsHash}, "decision": {"approve"}}
	}

	status, _, page := b.send(http.MethodPost, path, form(""))
	assert.Equal(t, http.StatusForbidden, status, "no CSRF token")
	assert.Contains(t, page, "not sent from this inbox")
	status, _, _ = b.send(http.MethodPost, path, form("forged"))
	assert.Equal(t, http.StatusForbidden, status, "a wrong CSRF token")
	status, _, _ = b.send(http.MethodPost, path, form(csrf), "Sec-Fetch-Site", "cross-site")
	assert.Equal(t, http.StatusForbidden, status, "a cross-site form post, even with the right token")
	status, _, _ = b.send(http.MethodPost, path, form(csrf), "Origin", "https://evil.example")
	assert.Equal(t, http.StatusForbidden, status, "a post from another origin")
	status, _, page = a.browser().send(http.MethodPost, path, form(csrf))
	assert.Equal(t, http.StatusUnauthorized, status, "a browser that is not signed in")
	assert.Contains(t, page, "sign in again")

	// A viewer sees the step without the buttons, and cannot post them.
	vb := a.browser()
	vpage, vcsrf := vb.signIn("vic")
	assert.Contains(t, vpage, "may read but not decide")
	assert.NotContains(t, vpage, `value="approve"`)
	status, _, _ = vb.send(http.MethodPost, path, form(vcsrf))
	assert.Equal(t, http.StatusForbidden, status)

	// Another args hash is refused and the step stays.
	bad := form(csrf)
	bad.Set("args_hash", strings.Repeat("1", 64))
	status, _, page = b.send(http.MethodPost, path, bad)
	assert.Equal(t, http.StatusConflict, status)
	assert.Contains(t, page, "is not the pending step&#39;s")
	assert.Contains(t, page, "issue_credit — step 2 of run", "the inbox is shown again with the step")

	assert.Equal(t, 0, e.count("approval_decisions", "outcome = 'accepted'"))
	st, err := e.runs.Status(context.Background(), "acme", run)
	require.NoError(t, err)
	assert.Equal(t, workflows.StepPendingApproval, st.Steps[1].State)

	// The right form decides: redirect, a message, and an empty list.
	status, h, _ := b.send(http.MethodPost, path, url.Values{"csrf": {csrf}, "args_hash": {step.ArgsHash}, "decision": {"reject"}, "comment": {"no photos"}})
	require.Equal(t, http.StatusSeeOther, status)
	status, _, page = b.send(http.MethodGet, h.Get("Location"), nil)
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, page, "You rejected step 2 of run "+run+".")
	assert.Contains(t, page, "Nothing is waiting for a decision.")
	assert.Equal(t, 1, e.count("approval_decisions", "outcome = 'accepted' AND via = 'inbox' AND decision = 'reject' AND comment = 'no photos'"))
	final := e.result("acme", run)
	assert.Equal(t, workflows.StepRejected, final.Steps[1].State)

	// The run page shows the steps as a timeline.
	status, _, page = b.send(http.MethodGet, "/runs/"+run, nil)
	require.Equal(t, http.StatusOK, status)
	assert.Regexp(t, `(?s)<ol class="timeline">.*Step 1: lookup_order.*Step 2: issue_credit <span class="state">rejected</span>`, page)
	assert.Contains(t, page, "reject by dana")
	status, _, _ = b.send(http.MethodGet, "/runs/nope", nil)
	assert.Equal(t, http.StatusNotFound, status)
}

// chromium finds the browser: $ONCERUN_CHROMIUM, or chromium on the PATH.
// A missing browser fails the test: CI installs it (.ci/run).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ONCERUN_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium: install it (apt-get install -y chromium chromium-driver) or set ONCERUN_CHROMIUM")
	return ""
}

func TestInboxInBrowser(t *testing.T) {
	t.Parallel()
	exe := chromium(t)
	e := setup(t)
	e.startWorker("w1", worker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("browser")
	a.startPending("ops", run)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true), chromedp.WindowSize(1200, 1000))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	// The browser lives as long as ctx: the limit cancels it rather than
	// bounding the first call, which starts the browser.
	stop := time.AfterFunc(2*time.Minute, cancel)
	defer stop.Stop()

	article := chromedp.CSS(`article[data-run="` + run + `"][data-step="2"]`)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(a.srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), a.tokens["dana"]),
		chromedp.Submit(chromedp.CSS(`#token`)),
		chromedp.WaitVisible(article),
	))
	pending, err := chromedp.Run(ctx, chromedp.Text(article))
	require.NoError(t, err)
	shotPending, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	assert.Contains(t, pending, "issue_credit — step 2 of run "+run)
	assert.Contains(t, pending, "amount_cents")
	assert.Contains(t, pending, "25900")
	assert.Contains(t, pending, "Goal: refund order 1001")
	assert.Contains(t, pending, "lookup_order", "the run's earlier steps")
	assert.Contains(t, pending, "by a run started by ops")

	// Every form control has a label, and the page says its language.
	unlabelled, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll(
		'input:not([type=hidden]), textarea, select')).filter(el => el.labels.length === 0).map(el => el.outerHTML)`))
	require.NoError(t, err)
	assert.Empty(t, unlabelled, "form controls without a label")
	lang, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.lang`))
	require.NoError(t, err)
	assert.Equal(t, "en", lang)

	// Decide with the keyboard alone: type the comment, Tab to Approve,
	// press Enter.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Focus(article+` textarea`),
		chromedp.KeyEvent("photos confirm the damage"),
		chromedp.KeyEvent("\t"),
	))
	focused, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.activeElement.textContent.trim()`))
	require.NoError(t, err)
	require.Equal(t, "Approve", focused, "Tab from the comment reaches the Approve button")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(chromedp.CSS(`.flash`)),
	))
	after, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`main`)))
	require.NoError(t, err)
	shotAfter, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	assert.Contains(t, after, "You approved step 2 of run "+run+".")
	assert.Contains(t, after, "Nothing is waiting for a decision.", "the decided step left the pending list")

	artifacts := filepath.Join("..", "..", "test-artifacts")
	require.NoError(t, os.MkdirAll(artifacts, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(artifacts, "inbox-pending.png"), shotPending, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(artifacts, "inbox-approved.png"), shotAfter, 0o644))

	st := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
	assert.Equal(t, workflows.StepDone, st.Steps[1].State)
	assert.Equal(t, "dana", st.Steps[1].Approval.Approver)
	assert.Equal(t, "photos confirm the damage", st.Steps[1].Approval.Comment)
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND order_id = '1001'"))
	assert.Equal(t, 1, e.count("approval_decisions", "run_id = $1 AND outcome = 'accepted' AND via = 'inbox'", run))
}
