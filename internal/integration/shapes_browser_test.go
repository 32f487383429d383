package integration

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/workflows"
)

// TestParallelTurnAndCancelInBrowser decides two cards of one turn out of
// order, then cancels the run from its page while a step of the turn still
// runs, and reads the receipt, at phone and desktop widths.
func TestParallelTurnAndCancelInBrowser(t *testing.T) {
	t.Parallel()
	ctx := headless(t, 3*time.Minute)
	e := setup(t)
	release := make(chan struct{})
	e.tools = append(e.tools, slowTool(release))
	model := e.serveModel(func(n int, _ modelRequest) []modelCall {
		return []modelCall{
			{ID: "call_check", Tool: "slow_check", Args: map[string]any{"order_id": "1001"}},
			creditCall("call_first", "first-card"),
			creditCall("call_second", "second-card"),
		}
	})
	e.startWorker("w1", sdkworker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("browser-turn")
	a.startModelRun(run, "check and credit order 1001")
	e.waitFor("acme", run, "both cards", func(s workflows.Status) bool {
		return len(s.Steps) == 3 && s.Steps[1].State == workflows.StepPendingApproval && s.Steps[2].State == workflows.StepPendingApproval &&
			e.count("approvals", "tenant = 'acme' AND run_id = $1 AND state = 'pending'", run) == 2
	})
	dir := screenshotDir(t)
	card := func(step string) string { return `article[data-run="` + run + `"][data-step="` + step + `"]` }

	require.NoError(t, chromedp.Do(ctx,
		phone,
		chromedp.Navigate(a.srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), a.tokens["ops"]),
		chromedp.Submit(chromedp.CSS(`#token`)),
		chromedp.WaitVisible(chromedp.CSS(card("2"))),
		chromedp.WaitVisible(chromedp.CSS(card("3"))),
	))
	checkLayout(t, ctx, dir, "phone-inbox-turn.png")
	// The later card first: approve step 3, then reject step 2.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(card("3")+` textarea`), "second card first"),
		chromedp.Click(chromedp.CSS(card("3")+` button.approve[value=approve]`)),
		chromedp.WaitNotPresent(chromedp.CSS(card("3"))),
		chromedp.WaitVisible(chromedp.CSS(`.flash`)),
	))
	flash, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`.flash`)))
	require.NoError(t, err)
	assert.Contains(t, flash, "You approved step 3 of run "+run+".")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(card("2"))),
		chromedp.Click(chromedp.CSS(card("2")+` button.reject[value=reject]`)),
		chromedp.WaitNotPresent(chromedp.CSS(card("2"))),
		chromedp.WaitVisible(chromedp.CSS(`.flash`)),
	))
	flash, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`.flash`)))
	require.NoError(t, err)
	assert.Contains(t, flash, "You rejected step 2 of run "+run+".")
	decided := e.waitFor("acme", run, "both decisions applied", func(s workflows.Status) bool {
		return s.Steps[1].State == workflows.StepRejected && s.Steps[2].State == workflows.StepDone
	})
	assert.Equal(t, "second card first", decided.Steps[2].Approval.Comment, "each decision on its own step")

	// The run page shows the three steps as one turn; cancel it there while
	// step 1 still runs.
	require.NoError(t, chromedp.Do(ctx,
		desktop,
		chromedp.Navigate(a.srv.URL+"/runs/"+run),
		chromedp.WaitVisible(chromedp.CSS(`#turn-1`)),
	))
	turn, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#turn-1`)))
	require.NoError(t, err)
	assert.Contains(t, turn, "Turn 1 · 3 steps proposed together")
	checkLayout(t, ctx, dir, "desktop-run-turn.png")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#cancel-reason`), "the customer withdrew the claim"),
		chromedp.Click(chromedp.CSS(`section.controls button.reject`)),
		chromedp.WaitVisible(chromedp.CSS(`section.receipt`)),
	))
	receipt, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`section.receipt`)))
	require.NoError(t, err)
	assert.Contains(t, receipt, "Cancelled by ops")
	assert.Contains(t, receipt, "the customer withdrew the claim")
	assert.Contains(t, receipt, "step 1", "the step still running is named")
	state, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(`section.receipt`), "data-state"))
	require.NoError(t, err)
	assert.Equal(t, string(workflows.RunCancelling), state.Value)
	checkLayout(t, ctx, dir, "desktop-run-cancelling.png")

	// Step 1 ends on its own terms; the receipt then says how each ended.
	close(release)
	final := e.result("acme", run)
	require.Equal(t, workflows.RunCancelled, final.State)
	require.NoError(t, chromedp.Do(ctx,
		phone,
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`section.receipt[data-state="cancelled"]`)),
	))
	receipt, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`section.receipt`)))
	require.NoError(t, err)
	assert.Contains(t, receipt, "No step of the run is running.")
	for _, want := range []string{"slow_check", "rejected", "done: its effect was applied once"} {
		assert.Contains(t, receipt, want)
	}
	checkLayout(t, ctx, dir, "phone-run-cancelled.png")
	require.NoError(t, chromedp.Do(ctx, desktop, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`section.receipt`))))
	checkLayout(t, ctx, dir, "desktop-run-cancelled.png")
	assert.Len(t, model.seen(), 1, "no planner asked after the cancel")
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND reason = 'second-card'"))
	assert.Equal(t, 0, e.count("credits", "tenant = 'acme' AND reason = 'first-card'"))
}
