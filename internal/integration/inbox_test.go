package integration

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"image/png"
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

	"github.com/oncerun/oncerun/internal/shop"
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

	// Over TLS the cookies are Secure __Host- cookies.
	req := httptest.NewRequest(http.MethodPost, "https://inbox.example/login", strings.NewReader(url.Values{"token": {a.tokens["dana"]}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	a.srv.Config.Handler.ServeHTTP(rec, req)
	require.Equal(t, http.StatusSeeOther, rec.Code)
	require.Len(t, rec.Result().Cookies(), 2)
	for _, c := range rec.Result().Cookies() {
		assert.True(t, c.Secure, c.Name)
		assert.True(t, strings.HasPrefix(c.Name, "__Host-"), "%s: no other host can set it", c.Name)
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
	st := e.status("acme", run)
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
	assert.Regexp(t, `(?s)<ol class="timeline">.*<span class="num">Step 1</span> <span class="tool">lookup_order</span>`+
		`.*<span class="num">Step 2</span> <span class="tool">issue_credit</span> <span class="badge state rejected">rejected</span>`, page)
	assert.Contains(t, page, "rejected by dana")
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

// headless starts a headless Chromium for the test, with a window of
// 1200×1000, and returns its context. The browser is closed when the test
// ends, and after limit at the latest: the limit cancels it rather than
// bounding the first call, which starts the browser.
func headless(t *testing.T, limit time.Duration) context.Context {
	t.Helper()
	exe := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true), chromedp.WindowSize(1200, 1000))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(cancel)
	stop := time.AfterFunc(limit, cancel)
	t.Cleanup(func() { stop.Stop() })
	return ctx
}

// screenshotDir is where the browser tests write their screenshots:
// $ONCERUN_SCREENSHOT_DIR (created if need be), or test-artifacts/ at the
// repository's root (ignored by git), where a person can look at them.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := cmp.Or(os.Getenv("ONCERUN_SCREENSHOT_DIR"), filepath.Join("..", "..", "test-artifacts"))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// saveScreenshot checks that shot is a PNG image that is not empty and
// writes it to dir as name.
func saveScreenshot(t *testing.T, dir, name string, shot []byte) {
	t.Helper()
	require.Greater(t, len(shot), 1000, "%s: a screenshot of a page is not that small", name)
	require.True(t, bytes.HasPrefix(shot, []byte("\x89PNG\r\n\x1a\n")), "%s is a PNG", name)
	cfg, err := png.DecodeConfig(bytes.NewReader(shot))
	require.NoError(t, err, name)
	require.Positive(t, cfg.Width*cfg.Height, name)
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, shot, 0o644))
	t.Logf("screenshot %s (%d×%d)", path, cfg.Width, cfg.Height)
}

func TestInboxInBrowser(t *testing.T) {
	t.Parallel()
	ctx := headless(t, 2*time.Minute)
	e := setup(t)
	e.startWorker("w1", worker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("browser")
	a.startPending("ops", run)

	card := `article[data-run="` + run + `"][data-step="2"]`
	article := chromedp.CSS(card)
	a.logIn(ctx, "dana", card)
	pending, err := chromedp.Run(ctx, chromedp.Text(article))
	require.NoError(t, err)
	shotPending, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	assert.Contains(t, pending, "issue_credit — step 2 of run "+run)
	assert.Contains(t, pending, "amount_cents")
	assert.Contains(t, pending, "259.00 EUR", "the amount as money")
	assert.Contains(t, pending, "25900", "and as the call has it")
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

	dir := screenshotDir(t)
	saveScreenshot(t, dir, "inbox-pending.png", shotPending)
	saveScreenshot(t, dir, "inbox-approved.png", shotAfter)

	st := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
	assert.Equal(t, workflows.StepDone, st.Steps[1].State)
	assert.Equal(t, "dana", st.Steps[1].Approval.Approver)
	assert.Equal(t, "photos confirm the damage", st.Steps[1].Approval.Comment)
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND order_id = '1001'"))
	assert.Equal(t, 1, e.count("approval_decisions", "run_id = $1 AND outcome = 'accepted' AND via = 'inbox'", run))

	// The decided list and the runs list, from Temporal's own visibility
	// store, each at a phone's width and a laptop's.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(a.srv.URL+"/decided"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-run="`+run+`"][data-step="2"]`))))
	decided, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`tr[data-run="`+run+`"]`)))
	require.NoError(t, err)
	assert.Contains(t, decided, "259.00 EUR")
	assert.Contains(t, decided, "dana")
	assert.Contains(t, decided, "photos confirm the damage")
	checkLayoutAtBothSizes(t, ctx, dir, `table.decided`, "decided")
	// Other tests' runs of the tenant share the server: the run is on one
	// of the pages, followed by their Older links.
	var listed bool
	for deadline := time.Now().Add(30 * time.Second); !listed && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		next := a.srv.URL + "/runs"
		for pages := 0; !listed && next != "" && pages < 100; pages++ {
			require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(next), chromedp.WaitVisible(chromedp.CSS(`main`))))
			n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('tr[data-run="`+run+`"]').length`))
			require.NoError(t, err)
			listed = n == 1
			next, err = chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector('a[rel=next]') || {href: ""}).href`))
			require.NoError(t, err)
		}
	}
	require.True(t, listed, "/runs lists the run once")
	row, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`tr[data-run="`+run+`"]`)))
	require.NoError(t, err)
	assert.Contains(t, row, "completed")
	checkLayoutAtBothSizes(t, ctx, dir, `table.runs`, "runs")
}

// logIn logs who in to the inbox in the browser of ctx, and waits until
// the page shows selector.
func (a *approvalsEnv) logIn(ctx context.Context, who, selector string) {
	a.t.Helper()
	require.NoError(a.t, chromedp.Do(ctx,
		chromedp.Navigate(a.srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), a.tokens[who]),
		chromedp.Submit(chromedp.CSS(`#token`)),
		chromedp.WaitVisible(chromedp.CSS(selector)),
	))
}

// Checks of a page's layout, run in the browser.
const (
	// overflowJS is how far the page is wider than the window, in CSS
	// pixels: 0 when nothing overflows sideways. (A phone may zoom out
	// to show a page that overflows, which widens window.innerWidth: the
	// layout viewport, clientWidth, does not move.)
	overflowJS = `Math.max(document.documentElement.scrollWidth, document.body.scrollWidth) -
		Math.min(window.innerWidth, document.documentElement.clientWidth)`
	// splitNamesJS lists the tool names, argument names and table headings
	// that the browser laid out on more than one line.
	splitNamesJS = `Array.from(document.querySelectorAll('.tool, th, .num')).filter(el => {
		const r = document.createRange();
		r.selectNodeContents(el);
		const tops = new Set(Array.from(r.getClientRects()).filter(x => x.width > 0).map(x => Math.round(x.top)));
		return tops.size > 1;
	}).map(el => el.textContent)`
)

// Window sizes of the layout checks: a phone held upright, and a laptop.
var (
	phone   = chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulatePortrait)
	desktop = chromedp.EmulateViewport(1280, 800)
)

// checkLayoutAtBothSizes reloads the page at a phone's size and a
// laptop's, waits for selector, and checks each layout (name-phone.png,
// name-desktop.png).
func checkLayoutAtBothSizes(t *testing.T, ctx context.Context, dir, selector, name string) {
	t.Helper()
	for _, size := range []struct {
		name string
		view chromedp.Action[chromedp.Void]
	}{{"phone", phone}, {"desktop", desktop}} {
		require.NoError(t, chromedp.Do(ctx, size.view, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(selector))))
		checkLayout(t, ctx, dir, name+"-"+size.name+".png")
	}
}

// checkLayout asserts that the page does not scroll sideways and that no
// name is broken across lines, and saves a full-page screenshot as name.
func checkLayout(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	over, err := chromedp.Run(ctx, chromedp.Evaluate[int](overflowJS))
	require.NoError(t, err)
	assert.LessOrEqual(t, over, 0, "%s: the page is %d px wider than the window", name, over)
	split, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](splitNamesJS))
	require.NoError(t, err)
	assert.Empty(t, split, "%s: names broken across lines", name)
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	saveScreenshot(t, dir, name, shot)
}

func TestInboxEditInBrowser(t *testing.T) {
	t.Parallel()
	ctx := headless(t, 3*time.Minute)
	e := setup(t)
	e.startWorker("w1", worker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("browser-edit")
	proposed := a.startPending("ops", run)
	require.Equal(t, "issue_credit", proposed.Tool)
	dir := screenshotDir(t)

	article := `article[data-run="` + run + `"][data-step="2"]`
	amount := chromedp.CSS(article + ` input[name="arg.amount_cents"]`)
	send := chromedp.CSS(article + ` form.edit-form button[type=submit]`)
	require.NoError(t, chromedp.Do(ctx, phone))
	a.logIn(ctx, "dana", article)
	card, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(article)))
	require.NoError(t, err)
	assert.Contains(t, card, "259.00 EUR", "the amount as money")
	assert.Regexp(t, `\d+ d \d+ h left — then it expires and does not run`, card, "the time left and what the deadline does")
	assert.Contains(t, card, "lookup_order", "the run's earlier steps")

	// Edit, then approve: the form opens prefilled, in euros.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(article+` details.edit > summary`)),
		chromedp.WaitVisible(amount),
	))
	value, err := chromedp.Run(ctx, chromedp.Value(amount))
	require.NoError(t, err)
	assert.Equal(t, "259.00", value)
	checkLayout(t, ctx, dir, "phone-inbox-edit.png")
	require.NoError(t, chromedp.Do(ctx, desktop, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(article))))
	checkLayout(t, ctx, dir, "desktop-inbox.png")

	// More than proposed is refused, on the page; the step stays pending.
	require.NoError(t, chromedp.Do(ctx,
		phone,
		chromedp.Reload(),
		chromedp.Click(chromedp.CSS(article+` details.edit > summary`)),
		chromedp.WaitVisible(amount),
		chromedp.Clear(amount),
		chromedp.SendKeys(amount, "300.00"),
		chromedp.Click(send),
		chromedp.WaitVisible(chromedp.CSS(article+` .inline-error`)),
	))
	refused, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(article+` .inline-error`)))
	require.NoError(t, err)
	assert.Contains(t, refused, "amount_cents may not increase")
	value, err = chromedp.Run(ctx, chromedp.Value(amount))
	require.NoError(t, err)
	assert.Equal(t, "300.00", value, "the form comes back as it was sent")
	alert, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`.panel.error[role=alert]`)))
	require.NoError(t, err)
	assert.Contains(t, alert, "amount_cents may not increase")
	checkLayout(t, ctx, dir, "phone-inbox-refused.png")
	st := e.status("acme", run)
	require.Equal(t, workflows.StepPendingApproval, st.Steps[1].State, "a refused edit leaves the step pending")

	// Less is accepted: the run goes on with the edited amount.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Clear(amount),
		chromedp.SendKeys(amount, "150.00"),
		chromedp.SendKeys(chromedp.CSS(article+` form.edit-form textarea[name=comment]`), "half: the photos show one damaged item"),
		chromedp.Click(send),
		chromedp.WaitVisible(chromedp.CSS(`.flash`)),
	))
	flash, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`.flash`)))
	require.NoError(t, err)
	assert.Equal(t, "You edited and approved step 2 of run "+run+".", strings.TrimSpace(flash))

	final := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, final.State, "%+v", final)
	credit := final.Steps[1]
	assert.Equal(t, workflows.StepDone, credit.State)
	var ran struct {
		AmountCents int64  `json:"amount_cents"`
		Currency    string `json:"currency"`
	}
	require.NoError(t, json.Unmarshal(credit.Args, &ran))
	assert.Equal(t, int64(15000), ran.AmountCents, "the step ran with the edited amount")
	require.NotNil(t, credit.Edit, "the step keeps its lineage")
	assert.Equal(t, proposed.ArgsHash, credit.Edit.OriginalArgsHash)
	assert.Equal(t, credit.ArgsHash, credit.Edit.ArgsHash)
	assert.NotEqual(t, proposed.ArgsHash, credit.ArgsHash)
	assert.Equal(t, "dana", credit.Edit.EditedBy)
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND order_id = '1001' AND amount_cents = 15000 AND currency = 'EUR'"),
		"the credit granted is the edited one")
	assert.Equal(t, 0, e.count("credits", "tenant = 'acme' AND order_id = '1001' AND amount_cents <> 15000"))
	// The API says the same.
	var api workflows.Status
	a.do(http.MethodGet, "/v1/runs/"+run, "vic", nil).json(t, &api)
	assert.Equal(t, credit.ArgsHash, api.Steps[1].ArgsHash)
	// The audit: the refusal, and the edit with both hashes.
	assert.Equal(t, 1, e.count("approval_decisions", `run_id = $1 AND step = 2 AND decision = 'edit' AND outcome = 'invalid'
		AND via = 'inbox' AND args_hash = $2 AND (edited_args->>'amount_cents')::int = 30000`, run, proposed.ArgsHash))
	assert.Equal(t, 1, e.count("approval_decisions", `run_id = $1 AND step = 2 AND decision = 'edit' AND outcome = 'accepted'
		AND via = 'inbox' AND approver = 'dana' AND comment = 'half: the photos show one damaged item'
		AND args_hash = $2 AND edited_args_hash = $3 AND (edited_args->>'amount_cents')::int = 15000`,
		run, proposed.ArgsHash, credit.ArgsHash))

	// The run page: a timeline with the lineage, money as money.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(a.srv.URL+"/runs/"+run),
		chromedp.WaitVisible(chromedp.CSS(`ol.timeline`)),
	))
	step2, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#step-2`)))
	require.NoError(t, err)
	assert.Contains(t, step2, "Step 2")
	assert.Contains(t, step2, "issue_credit")
	assert.Contains(t, step2, "done")
	assert.Contains(t, step2, "Edited before it ran by dana")
	assert.Contains(t, step2, "half: the photos show one damaged item")
	assert.Contains(t, step2, "amount_cents: 259.00 EUR → 150.00 EUR")
	assert.Contains(t, step2, "Result: amount_cents: 150.00 EUR")
	// The full result is one click away, and wraps in its box.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#step-2 details.result-json > summary`)),
		chromedp.WaitVisible(chromedp.CSS(`#step-2 details.result-json pre`)),
	))
	full, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#step-2 details.result-json pre`)))
	require.NoError(t, err)
	assert.Contains(t, full, `"idempotency_key": "v1/acme/`+run+`/2/issue_credit"`)
	checkLayout(t, ctx, dir, "phone-run.png")
	require.NoError(t, chromedp.Do(ctx, desktop, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`ol.timeline`))))
	checkLayout(t, ctx, dir, "desktop-run.png")
}

// TestLimitPagesLayout: the limits page (with caps set, one of a group of
// tools with a large amount), the inbox card of a step waiting at its
// run's budget and that run's page, with its spend against the budget, lay
// out at a phone's and a laptop's width.
func TestLimitPagesLayout(t *testing.T) {
	t.Parallel()
	ctx := headless(t, 3*time.Minute)
	e := setup(t)
	e.tools = shop.Tools(shop.Config{CreditApprovalThresholdCents: 100000})
	e.startWorker("w1", worker.Options{})
	a := e.serveApprovals(nil)
	a.setLimit(shop.ToolIssueCredit, 200000, shop.ToolIssueCredit)
	a.setLimit("all-money-moving-tools-of-the-support-desk", 9999999999999, shop.ToolIssueCredit, "refund_payment")
	run := e.id("layout")
	a.startRun(run, map[string]any{"spend": map[string]int64{"EUR": 50000}},
		creditOf("layout-1", 20000), creditOf("layout-2", 20000), creditOf("layout-3", 20000))
	reason := "over the run's budget: 400.00 of 500.00 EUR spent, this call 200.00"
	it := a.pendingItem(run, 3, 1)
	require.Equal(t, []any{"limit", reason}, []any{it.ApprovalKind, it.Reason})
	dir := screenshotDir(t)

	card := chromedp.CSS(`article.limit[data-run="` + run + `"][data-step="3"]`)
	require.NoError(t, chromedp.Do(ctx,
		phone,
		chromedp.Navigate(a.srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), a.tokens["dana"]),
		chromedp.Submit(chromedp.CSS(`#token`)),
		chromedp.WaitVisible(card),
	))
	text, err := chromedp.Run(ctx, chromedp.Text(card))
	require.NoError(t, err)
	assert.Contains(t, text, "Over a spend limit. "+reason)
	assert.Contains(t, text, "Approve as an exception")
	checkLayout(t, ctx, dir, "phone-inbox-limit.png")
	require.NoError(t, chromedp.Do(ctx, desktop, chromedp.Reload(), chromedp.WaitVisible(card)))
	checkLayout(t, ctx, dir, "desktop-inbox-limit.png")

	capCard := chromedp.CSS(`article.cap[data-limit="issue_credit"]`)
	require.NoError(t, chromedp.Do(ctx, phone, chromedp.Navigate(a.srv.URL+"/limits"), chromedp.WaitVisible(capCard)))
	text, err = chromedp.Run(ctx, chromedp.Text(capCard))
	require.NoError(t, err)
	assert.Contains(t, text, "2,000.00 EUR per UTC day")
	assert.Contains(t, text, "400.00 EUR", "the two credits the run made")
	assert.Contains(t, text, "20.0%")
	group, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`article.cap[data-limit="all-money-moving-tools-of-the-support-desk"]`)))
	require.NoError(t, err)
	assert.Contains(t, group, "issue_credit, refund_payment")
	assert.Contains(t, group, "99,999,999,999.99 EUR")
	checkLayout(t, ctx, dir, "phone-limits.png")
	require.NoError(t, chromedp.Do(ctx, desktop, chromedp.Reload(), chromedp.WaitVisible(capCard)))
	checkLayout(t, ctx, dir, "desktop-limits.png")

	step3 := chromedp.CSS(`#step-3`)
	require.NoError(t, chromedp.Do(ctx, phone, chromedp.Navigate(a.srv.URL+"/runs/"+run), chromedp.WaitVisible(step3)))
	text, err = chromedp.Run(ctx, chromedp.Text(step3))
	require.NoError(t, err)
	assert.Contains(t, text, "pending_approval")
	assert.Contains(t, text, reason)
	spent, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`.spend[data-currency="EUR"]`)))
	require.NoError(t, err)
	assert.Contains(t, spent, "400.00 EUR spent")
	assert.Contains(t, spent, "budget 500.00 EUR")
	assert.Contains(t, spent, "80.0% used")
	checkLayout(t, ctx, dir, "phone-run-limit.png")
	require.NoError(t, chromedp.Do(ctx, desktop, chromedp.Reload(), chromedp.WaitVisible(step3)))
	checkLayout(t, ctx, dir, "desktop-run-limit.png")
}
