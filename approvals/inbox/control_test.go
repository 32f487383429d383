package inbox

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstest"
	"github.com/oncerun/oncerun/workflows"
)

// needsResolution is step n of a run, whose outcome is unknown (round 1).
func needsResolution(now time.Time, n int64) workflows.Step {
	return workflows.Step{Step: n, Tool: "refund_payment", Class: "external", Key: "v1/acme/r1/3/refund_payment",
		Args: json.RawMessage(`{"payment_id":"pay_1001"}`), ArgsHash: "c", State: workflows.StepNeedsResolution, PlannedAt: now,
		Resolution: &workflows.StepResolution{Round: 1, Known: "the provider did not answer", FirstSentAt: now, RequestedAt: now}}
}

// TestRunPageOffersTheOperatorsControls: an operator's run page has the
// cancel form and pause (or, for a paused run, resume), each with the
// session's CSRF token; an approver's and a viewer's have none, nor has a
// run that has ended or was cancelled.
func TestRunPageOffersTheOperatorsControls(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	e.Running("r1", false, approvalstest.LookupStep(e.Now))
	ops := e.signIn("ops")

	page := mustGet(t, ops, "/runs/r1")
	assert.Contains(t, page, `<form method="post" action="/runs/r1/cancel">`)
	assert.Contains(t, page, `<form method="post" action="/runs/r1/pause">`)
	assert.NotContains(t, page, `action="/runs/r1/resume"`)
	controls := regexp.MustCompile(`(?s)<section class="panel controls".*?</section>`).FindString(page)
	assert.Equal(t, 2, len(regexp.MustCompile(`name="csrf" value="`+regexp.QuoteMeta(ops.csrf)+`"`).FindAllString(controls, -1)))
	assert.Contains(t, controls, `name="reason" rows="2" maxlength="2000" required`, "a cancel says why")

	for _, who := range []string{"dana", "vic"} {
		assert.NotContains(t, mustGet(t, e.signIn(who), "/runs/r1"), `action="/runs/r1/cancel"`, who)
	}

	_, _, _ = e.Call("ops", http.MethodPost, "/v1/runs/r1/pause", `{"reason": "checking the stock"}`)
	page = mustGet(t, ops, "/runs/r1")
	assert.Contains(t, page, `<form method="post" action="/runs/r1/resume">`)
	assert.NotContains(t, page, `action="/runs/r1/pause"`)
	assert.Contains(t, page, `<strong>Paused</strong> by ops at`)
	assert.Contains(t, page, `: “checking the stock”. It starts no step`)
	assert.Contains(t, page, `<span class="badge state paused">paused</span>`)

	e.Running("r-done", false)
	e.Temporal.End("r-done", workflows.RunCompleted)
	assert.NotContains(t, mustGet(t, ops, "/runs/r-done"), `action="/runs/r-done/cancel"`)
}

// TestRunControlFormsAreProtected: a form without the session's CSRF
// token, or from a token that is not an operator's, is refused and sends
// the run nothing; only the second is audited (as forbidden): the first
// may not have been sent by the person whose cookie it carries.
func TestRunControlFormsAreProtected(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	e.Running("r1", false)
	ops := e.signIn("ops")

	status, _, page := ops.post("/runs/r1/cancel", url.Values{"reason": {"stop"}})
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, page, "The form was not sent from this inbox")
	status, _, _ = ops.post("/runs/r1/pause", url.Values{"csrf": {"forged"}})
	assert.Equal(t, http.StatusForbidden, status)

	dana := e.signIn("dana")
	status, _, page = dana.post("/runs/r1/cancel", url.Values{"csrf": {dana.csrf}, "reason": {"stop"}})
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, page, "dana is an approver; cancelling runs takes an operator token")

	assert.Empty(t, e.Temporal.Sent(), "the run was sent nothing")
	rows := e.Controls("acme", "r1")
	require.Len(t, rows, 1)
	assert.Equal(t, []string{"dana", "forbidden", "stop"}, []string{rows[0].Actor, rows[0].Outcome, rows[0].Reason})
}

// TestCancelFormShowsTheReceipt: an operator's cancel answers with the
// run page, which says what the cancel did and shows the receipt: every
// step and how it ended, and the step waiting for a person's answer with
// a link to its resolve form.
func TestCancelFormShowsTheReceipt(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	e.Pending("r1", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "", approvalstest.LookupStep(e.Now))
	st := e.Temporal.Status("r1")
	st.Steps = append(st.Steps, needsResolution(e.Now, 3))
	e.Temporal.SetStatus(st)
	ops := e.signIn("ops")

	status, h, page := ops.post("/runs/r1/cancel", url.Values{"csrf": {ops.csrf}, "reason": {"wrong customer"}})
	require.Equal(t, http.StatusSeeOther, status, page)
	assert.Equal(t, "/runs/r1", h.Get("Location"))
	state, _ := e.ApprovalRow("r1", 2)
	assert.Equal(t, "cancelled", state)

	page = mustGet(t, ops, "/runs/r1")
	assert.Contains(t, page, `<div class="panel flash" role="status">You cancelled run r1: it is cancelled. 1 pending approval was withdrawn.</div>`)
	receipt := regexp.MustCompile(`(?s)<section class="panel receipt".*?</section>`).FindString(page)
	require.NotEmpty(t, receipt)
	assert.Contains(t, receipt, `Cancelled by ops at`)
	assert.Contains(t, receipt, `: “wrong customer”.`)
	assert.Contains(t, receipt, `<tr data-step="2"><td class="num"><a href="#step-2">2</a></td><td class="tool">issue_credit</td><td class="state">cancelled</td>`)
	assert.Contains(t, receipt, `<tr data-step="1">`)
	assert.Contains(t, receipt, `Waiting for a person's answer (1)`)
	assert.Contains(t, receipt, `<li data-step="3">Step 3 <span class="tool">refund_payment</span> (key <code>v1/acme/r1/3/refund_payment</code>): <a href="#resolve-3">resolve it</a></li>`)
	resolve := regexp.MustCompile(`(?s)<div id="resolve-3" class="resolve">.*?</div>`).FindString(page)
	assert.Contains(t, resolve, `<form method="post" action="/runs/r1/steps/3/resolve">`)
	assert.Contains(t, resolve, `name="round" value="1"`)
	assert.NotContains(t, page, `action="/runs/r1/cancel"`, "a cancelled run offers no controls")
	assert.Contains(t, page, `<p class="inline-error">Not run: approval withdrawn: the run was cancelled by ops</p>`)
	assert.Contains(t, page, `Approval: amount_cents above 10000 · withdrawn when the run was cancelled</p>`)

	assert.NotContains(t, mustGet(t, e.signIn("vic"), "/runs/r1"), `href="#resolve-3"`, "a viewer cannot resolve")

	// Again: the page says it was done before.
	status, _, _ = ops.post("/runs/r1/cancel", url.Values{"csrf": {ops.csrf}, "reason": {"again"}})
	require.Equal(t, http.StatusSeeOther, status)
	assert.Contains(t, mustGet(t, ops, "/runs/r1"), "Run r1 was already cancelled by ops at")
}

// TestControlFormRefusalShowsTheRunPage: a request the run refuses
// answers with the run page and the refusal, with its status.
func TestControlFormRefusalShowsTheRunPage(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	e.Running("r1", false)
	e.Temporal.End("r1", workflows.RunCompleted)
	ops := e.signIn("ops")

	status, _, page := ops.post("/runs/r1/pause", url.Values{"csrf": {ops.csrf}})
	assert.Equal(t, http.StatusConflict, status)
	assert.Contains(t, page, `<div class="panel error" role="alert">run r1 has ended: it is completed</div>`)
	assert.Contains(t, page, `<h2 id="run-title">Run <span class="runid">r1</span></h2>`)

	status, _, page = ops.post("/runs/r1/cancel", url.Values{"csrf": {ops.csrf}})
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, page, "reason is required")
}

// TestPauseFormPausesAndResumeFormResumes: each answers with the run
// page and says what it did.
func TestPauseFormPausesAndResumeFormResumes(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	e.Running("r1", false)
	ops := e.signIn("ops")

	status, h, _ := ops.post("/runs/r1/pause", url.Values{"csrf": {ops.csrf}, "reason": {"checking"}})
	require.Equal(t, http.StatusSeeOther, status)
	assert.Equal(t, "/runs/r1", h.Get("Location"))
	assert.Contains(t, mustGet(t, ops, "/runs/r1"), "You paused run r1: it starts no step until it is resumed.")
	status, _, _ = ops.post("/runs/r1/resume", url.Values{"csrf": {ops.csrf}})
	require.Equal(t, http.StatusSeeOther, status)
	page := mustGet(t, ops, "/runs/r1")
	assert.Contains(t, page, "You resumed run r1.")
	assert.NotContains(t, page, "<strong>Paused</strong>")
	assert.Equal(t, []string{workflows.UpdatePause, workflows.UpdateResume}, e.Temporal.Sent())
	rows := e.Controls("acme", "r1")
	require.Len(t, rows, 2)
	assert.Equal(t, "checking", rows[0].Reason)
}

// TestRunPageGroupsStepsByTurn: the steps of one planning turn are
// listed under its heading; a step of a run older than turns stands
// alone, without one.
func TestRunPageGroupsStepsByTurn(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	old := approvalstest.LookupStep(e.Now)
	step := func(n int64, turn int) workflows.Step {
		s := approvalstest.LookupStep(e.Now)
		s.Step, s.Turn, s.CallID = n, turn, "call_"+string(rune('a'+n))
		return s
	}
	e.Running("r1", false, old, step(2, 1), step(3, 1), step(4, 2))

	page := mustGet(t, e.signIn("dana"), "/runs/r1")
	assert.Regexp(t, `(?s)<ol class="timeline">\s*<li class="done" id="step-1".*?</ol>\s*`+
		`<h3 class="turn" id="turn-1">Turn 1 · 2 steps proposed together</h3>\s*<ol class="timeline">\s*<li class="done" id="step-2".*?<li class="done" id="step-3".*?</ol>\s*`+
		`<h3 class="turn" id="turn-2">Turn 2</h3>\s*<ol class="timeline">\s*<li class="done" id="step-4"`, page)
}

// TestInboxListsWithdrawnApprovals: an approval withdrawn by a cancel
// leaves the pending list and is shown as cancelled, saying by whom and
// why; the API's decided list says the same.
func TestInboxListsWithdrawnApprovals(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	e.Pending("r1", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "")
	_, _, body := e.Call("ops", http.MethodPost, "/v1/runs/r1/cancel", `{"reason": "wrong customer"}`)
	require.Contains(t, body, `"receipt"`)

	page := mustGet(t, e.signIn("dana"), "/")
	assert.Contains(t, page, "Nothing is waiting for a decision.")
	withdrawn := regexp.MustCompile(`(?s)<article class="withdrawn".*?</article>`).FindString(page)
	require.NotEmpty(t, withdrawn, page)
	assert.Contains(t, withdrawn, `data-state="cancelled"`)
	assert.Contains(t, withdrawn, `<span class="badge state cancelled">cancelled</span>`)
	assert.Regexp(t, `withdrawn: the run was cancelled by ops at \S+ \(wrong customer\) before anyone decided; the step never ran\.`, withdrawn)

	status, _, body := e.Call("dana", http.MethodGet, "/v1/approvals?state=decided", "")
	require.Equal(t, http.StatusOK, status, body)
	var list approvals.ApprovalList
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Len(t, list.Approvals, 1)
	assert.Equal(t, "cancelled", list.Approvals[0].State)
	assert.Equal(t, "ops", list.Approvals[0].DecidedBy)
	assert.Contains(t, list.Approvals[0].Withdrawn, "withdrawn: the run was cancelled by ops")
}

// TestReceiptShowsControlAndFormatCharactersEscaped: what a run's
// receipt carries is escaped like everything the pages show.
func TestReceiptShowsControlAndFormatCharactersEscaped(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	at := e.Now
	e.Temporal.SetStatus(workflows.Status{Tenant: "acme", RunID: "r1", Planner: "openai", State: workflows.RunCancelled,
		StartedAt: at, UpdatedAt: at, Cancel: &workflows.ControlRecord{By: "ops", Reason: "stop\u202eevil", At: at},
		Paused: &workflows.ControlRecord{By: "ops\u200b", At: at},
		Receipt: &workflows.Receipt{State: workflows.RunCancelled, CancelledBy: "ops", CancelledAt: at, Reason: "stop\u202eevil",
			Steps: []workflows.ReceiptStep{{Step: 1, Tool: "add_order_note", State: workflows.StepDone, Ended: "done \x1b[2J"}}}})

	page := mustGet(t, e.signIn("dana"), "/runs/r1")
	assert.Contains(t, page, `“stop\u202eevil”`)
	assert.Contains(t, page, `done \u001b[2J`)
	assert.Contains(t, page, `by ops\u200b at`)
	assert.Empty(t, hiddenOutsideForms(page))
}
