package inbox

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstest"
	"github.com/oncerun/oncerun/internal/events"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/workflows"
)

// liveWait bounds each wait of the live tests for a page to change: long
// enough for a slow machine (a missed notification is read again within
// the stream's poll of five seconds), and never asserted as a latency.
const liveWait = 90 * time.Second

// liveSizes are the windows the live pages are tried in: a phone held
// upright, and a laptop.
var liveSizes = []struct {
	name string
	view chromedp.Action[chromedp.Void]
}{
	{"phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulatePortrait)},
	{"laptop", chromedp.EmulateViewport(1366, 768)},
}

// setupLive serves the inbox as setupInbox does, with dana's token, and
// stops the API's event hub when the test ends, after the server.
func setupLive(t *testing.T) *inboxEnv {
	t.Helper()
	e := &inboxEnv{World: approvalstest.New(t)}
	tok, entry, err := approvals.NewToken(approvals.Identity{Name: "dana", Tenant: "acme", Role: approvals.RoleApprover})
	require.NoError(t, err)
	e.Tokens["dana"] = tok
	raw, err := json.Marshal([]approvals.TokenEntry{entry})
	require.NoError(t, err)
	toks, err := approvals.ParseTokens(raw)
	require.NoError(t, err)
	api, err := approvals.New(approvals.Config{Runs: &runs.Client{Temporal: e.Temporal, Pool: e.Pool}, Pool: e.Pool, Tokens: toks,
		Tools: e.Reg, Now: e.Clock})
	require.NoError(t, err)
	t.Cleanup(api.Close)
	ib, err := New(Config{API: api})
	require.NoError(t, err)
	e.srv = httptest.NewServer(ib.Handler())
	t.Cleanup(func() {
		// Streams last as long as their clients: end them first.
		e.srv.CloseClientConnections()
		e.srv.Close()
	})
	e.URL = e.srv.URL
	return e
}

// liveChromium finds the browser: $ONCERUN_CHROMIUM, or chromium on the
// PATH. A missing browser fails the test: CI installs it (.ci/run).
func liveChromium(t *testing.T) string {
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

// liveBrowser starts a headless Chromium for the test, signed in to e's
// inbox as dana, in the window view. The browser is closed when the test
// ends, before the server.
func liveBrowser(t *testing.T, e *inboxEnv, view chromedp.Action[chromedp.Void]) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(liveChromium(t)), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(cancel)
	// A stuck browser ends the test rather than hang it.
	stop := time.AfterFunc(5*time.Minute, cancel)
	t.Cleanup(func() { stop.Stop() })
	require.NoError(t, chromedp.Do(ctx,
		view,
		chromedp.Navigate(e.srv.URL+"/login"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), e.Tokens["dana"]),
		chromedp.Submit(chromedp.CSS(`#token`)),
		chromedp.WaitVisible(chromedp.CSS(`#pending`)),
	))
	return ctx
}

// openLive opens path and waits until the page follows its events; it
// marks the page, so that waitLive can tell it was not loaded again.
func openLive(t *testing.T, ctx context.Context, e *inboxEnv, path string) {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+path)))
	_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.sameLoad = true`))
	require.NoError(t, err)
	waitLive(t, ctx, `document.getElementById("live").dataset.state === "live"`, "the page follows its events")
}

// waitLive waits until expression is true on the page, loaded once: a
// reload fails it.
func waitLive(t *testing.T, ctx context.Context, expression, what string) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expression,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(liveWait)))
	require.NoError(t, err, "waiting until %s", what)
	same, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.sameLoad === true`))
	require.NoError(t, err)
	require.True(t, same, "%s without a reload", what)
}

// record writes facts of tenant acme's run to its log.
func record(t *testing.T, e *inboxEnv, facts ...events.Fact) {
	t.Helper()
	require.NoError(t, events.Record(context.Background(), e.Pool, "acme", facts))
}

// waitingFacts are the facts of a run that started and whose step waits
// for approval.
func waitingFacts(run string, step int64) []events.Fact {
	return []events.Fact{
		{RunID: run, Source: "run:started", Type: "run.started", Data: json.RawMessage(`{"goal":"refund order 1001"}`)},
		{RunID: run, Source: fmt.Sprintf("step:%d:proposed", step), Step: step, Type: "step.proposed", Data: json.RawMessage(`{"tool":"issue_credit"}`)},
		{RunID: run, Source: fmt.Sprintf("step:%d:pending_approval:1", step), Step: step, Type: "step.waiting_for_approval", Data: json.RawMessage(`{"tool":"issue_credit"}`)},
	}
}

func cardSelector(run string, step string) string {
	return `article[data-run="` + run + `"][data-step="` + step + `"]`
}

func TestLiveEventRoutesNeedASession(t *testing.T) {
	t.Parallel()
	e := setupLive(t)
	record(t, e, waitingFacts("r1", 2)...)
	for _, path := range []string{"/events", "/runs/r1/events"} {
		resp, err := http.Get(e.srv.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s without a session", path)
		assert.Empty(t, resp.Header.Get("Location"), "%s is not sent to the login page", path)
	}

	b := e.signIn("dana")
	status, body := b.get("/runs/r1/events")
	require.Equal(t, http.StatusOK, status, body)
	var page approvals.EventPage
	require.NoError(t, json.Unmarshal([]byte(body), &page))
	require.Len(t, page.Events, 3, "the run's events, as the API's JSON page")
	assert.Equal(t, "step.waiting_for_approval", page.Events[2].Type)
	status, body = b.get("/events")
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `"step.waiting_for_approval"`)

	// The page loads the script, which its policy allows.
	resp, err := b.http.Get(e.srv.URL + "/")
	require.NoError(t, err)
	resp.Body.Close()
	csp := resp.Header.Get("Content-Security-Policy")
	assert.Contains(t, csp, "script-src 'self'")
	assert.Contains(t, csp, "connect-src 'self'")
	assert.NotRegexp(t, `script-src[^;]*unsafe-inline`, csp, "no inline script")
	status, js := b.get(liveScriptPath)
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, js, "new EventSource(")
}

// TestLiveInboxAddsAndDropsCards: a step that starts waiting for approval
// appears in an open inbox, and leaves it once decided, without a reload.
func TestLiveInboxAddsAndDropsCards(t *testing.T) {
	t.Parallel()
	for _, size := range liveSizes {
		t.Run(size.name, func(t *testing.T) {
			e := setupLive(t)
			ctx := liveBrowser(t, e, size.view)
			openLive(t, ctx, e, "/")
			text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#live-region`)))
			require.NoError(t, err)
			require.Contains(t, text, "Nothing is waiting for a decision.")

			hash := e.Pending("r1", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "")
			record(t, e, waitingFacts("r1", 2)...)
			waitLive(t, ctx, `document.querySelector('`+cardSelector("r1", "2")+`') !== null`, "the new card appears")
			card, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(cardSelector("r1", "2"))))
			require.NoError(t, err)
			assert.Contains(t, card, "issue_credit — step 2 of run r1")
			assert.Contains(t, card, "259.00 EUR")

			// A card the person is typing in stays as it is while another
			// arrives.
			require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(cardSelector("r1", "2")+` textarea`), "checking with finance")))
			e.Pending("r3", 1, "issue_credit", approvalstest.CreditArgs, 72*time.Hour, "")
			record(t, e, waitingFacts("r3", 1)...)
			waitLive(t, ctx, `document.querySelector('`+cardSelector("r3", "1")+`') !== null`, "a second card appears")
			typed, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('`+cardSelector("r1", "2")+` textarea').value`))
			require.NoError(t, err)
			assert.Equal(t, "checking with finance", typed, "what was typed is kept")

			// Someone else decides it: the card leaves.
			other := e.signIn("dana")
			status, _, _ := other.post("/runs/r1/steps/2/decide", url.Values{"csrf": {other.csrf}, "args_hash": {hash}, "decision": {"reject"}})
			require.Equal(t, http.StatusSeeOther, status)
			waitLive(t, ctx, `document.querySelector('`+cardSelector("r1", "2")+`') === null`, "the decided card leaves")
			text, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#live-region`)))
			require.NoError(t, err)
			assert.Contains(t, text, "Waiting for a decision (1)")
			assert.Contains(t, text, "step 1 of run r3", "the other card stays")
		})
	}
}

// TestLiveRunPageShowsStepsAndModelText: a run's page shows its step's new
// state and the text its model writes, as they happen.
func TestLiveRunPageShowsStepsAndModelText(t *testing.T) {
	t.Parallel()
	for _, size := range liveSizes {
		t.Run(size.name, func(t *testing.T) {
			e := setupLive(t)
			step := approvalstest.LookupStep(e.Now)
			running := step
			running.State, running.Result, running.FinishedAt = workflows.StepRunning, nil, time.Time{}
			e.Running("r1", false, running)
			record(t, e,
				events.Fact{RunID: "r1", Source: "run:started", Type: "run.started"},
				events.Fact{RunID: "r1", Source: "step:1:proposed", Step: 1, Type: "step.proposed", Data: json.RawMessage(`{"tool":"lookup_order"}`)},
				events.Fact{RunID: "r1", Source: "step:1:running:1", Step: 1, Type: "step.running", Data: json.RawMessage(`{"tool":"lookup_order"}`)})
			ctx := liveBrowser(t, e, size.view)
			openLive(t, ctx, e, "/runs/r1")
			state, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("step-1").dataset.state`))
			require.NoError(t, err)
			require.Equal(t, "running", state)

			// The step completes.
			e.Running("r1", false, step)
			record(t, e, events.Fact{RunID: "r1", Source: "step:1:done:1", Step: 1, Type: "step.completed", Data: json.RawMessage(`{"tool":"lookup_order"}`)})
			waitLive(t, ctx, `document.getElementById("step-1").dataset.state === "done"`, "the step shows done")
			li, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#step-1`)))
			require.NoError(t, err)
			assert.Contains(t, li, "total_cents: 25900", "with its result")

			// The model writes: the text shows as it comes. A delta sent
			// before the stream listens is lost, as the stream says, so the
			// first is sent until one shows.
			delta := func(text string) {
				t.Helper()
				require.NoError(t, events.Publish(context.Background(), e.Pool, "acme", events.Event{RunID: "r1", Type: "text.delta",
					At: time.Now(), Data: json.RawMessage(`{"message_id":"m1","text":` + strings.TrimSpace(jsonString(t, text)) + `}`)}))
			}
			deadline := time.Now().Add(liveWait)
			for {
				delta("The order ")
				shown, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("model-text").textContent`))
				require.NoError(t, err)
				if strings.Contains(shown, "The order ") {
					break
				}
				require.True(t, time.Now().Before(deadline), "no streamed text showed")
				time.Sleep(250 * time.Millisecond)
			}
			delta("was found.")
			waitLive(t, ctx, `document.getElementById("model-text").textContent.endsWith("The order was found.")`, "the streamed text shows")
			visible, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!document.getElementById("model-writing").hidden`))
			require.NoError(t, err)
			assert.True(t, visible, "the model's text is shown")

			// The turn ends: the text goes, the page has the turn's steps.
			record(t, e, events.Fact{RunID: "r1", Source: "turn:1:ended", Type: "turn.ended", Data: json.RawMessage(`{"turn":1}`)})
			waitLive(t, ctx, `document.getElementById("model-writing").hidden && document.getElementById("model-text").textContent === ""`,
				"the model's text is cleared")
		})
	}
}

func jsonString(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	require.NoError(t, err)
	return string(b)
}

// TestLivePagesCatchUpAfterADrop: the server drops the pages' connections;
// what happened meanwhile shows once the browser reconnects.
func TestLivePagesCatchUpAfterADrop(t *testing.T) {
	t.Parallel()
	for _, size := range liveSizes {
		t.Run(size.name, func(t *testing.T) {
			e := setupLive(t)
			ctx := liveBrowser(t, e, size.view)
			openLive(t, ctx, e, "/")

			e.srv.CloseClientConnections()
			e.Pending("r2", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "")
			record(t, e, waitingFacts("r2", 2)...)
			waitLive(t, ctx, `document.querySelector('`+cardSelector("r2", "2")+`') !== null`, "the card written while disconnected appears")
			waitLive(t, ctx, `document.getElementById("live").dataset.state === "live"`, "the page is live again")
			drops, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("live").dataset.drops || "0"`))
			require.NoError(t, err)
			assert.NotEqual(t, "0", drops, "the page saw its connection drop")

			// The run's page catches up the same way.
			done := approvalstest.LookupStep(e.Now)
			running := done
			running.State, running.Result, running.FinishedAt = workflows.StepRunning, nil, time.Time{}
			e.Running("r2", false, running)
			openLive(t, ctx, e, "/runs/r2")
			e.srv.CloseClientConnections()
			e.Running("r2", false, done)
			record(t, e, events.Fact{RunID: "r2", Source: "step:1:done:1", Step: 1, Type: "step.completed", Data: json.RawMessage(`{"tool":"lookup_order"}`)})
			waitLive(t, ctx, `document.getElementById("step-1") !== null && document.getElementById("step-1").dataset.state === "done"`,
				"the step written while disconnected shows")
		})
	}
}
