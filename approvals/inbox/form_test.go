package inbox

import (
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstest"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/workflows"
)

// card is the inbox's card of a step.
func card(t *testing.T, page, runID string, step int) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<article aria-labelledby="step-` + regexp.QuoteMeta(runID) + `-` + strconv.Itoa(step) + `".*?</article>`).FindString(page)
	require.NotEmpty(t, m, "the inbox has a card for step %d of run %s", step, runID)
	return m
}

func TestInboxCardShowsMoneyTimeLeftAndTheEditForm(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	hash := e.Pending("r-later", 2, "issue_credit", approvalstest.CreditArgs, 52*time.Hour+30*time.Minute, workflows.ExpiryReject, approvalstest.LookupStep(e.Now))
	e.Pending("r-sooner", 1, "issue_credit", strings.Replace(approvalstest.CreditArgs, "25900", "99999", 1), 45*time.Minute+30*time.Second, "")
	b := e.signIn("dana")

	status, page := b.get("/")
	require.Equal(t, http.StatusOK, status)
	assert.Less(t, strings.Index(page, `data-run="r-sooner"`), strings.Index(page, `data-run="r-later"`),
		"the nearest deadline comes first")

	later := card(t, page, "r-later", 2)
	assert.Contains(t, later, `<span class="money">259.00 EUR</span>`, "the amount as money")
	assert.Contains(t, later, `<span class="raw" title="as the call has it, in minor units">25900</span>`)
	assert.Contains(t, later, `<span class="left">2 d 4 h left</span> — then it is rejected`)
	assert.Contains(t, later, `issue_credit — step 2 of run <a href="/runs/r-later">r-later</a>`)
	// The earlier step, its result summed up in a line.
	assert.Contains(t, later, `<td class="tool">lookup_order</td>`)
	assert.Contains(t, later, `currency: EUR · found: true · order_id: 1001 · total_cents: 25900`)
	// The edit form: money in euros, the currency fixed, the reviewed hash.
	assert.Contains(t, later, `<form method="post" action="/runs/r-later/steps/2/edit" class="edit-form">`)
	assert.Contains(t, later, `<input type="hidden" name="args_hash" value="`+hash+`">`)
	assert.Regexp(t, `<input type="text" inputmode="decimal" autocomplete="off" class="amount" id="edit-1-0" name="arg.amount_cents" value="259.00"`, later)
	assert.Contains(t, later, `Amount in EUR, with up to 2 decimals; proposed 259.00 EUR. May only be lowered.`)
	assert.Regexp(t, `name="arg.currency" value="EUR" data-arg="currency" readonly`, later)
	assert.Contains(t, later, `<details class="edit">`, "closed until asked for")

	sooner := card(t, page, "r-sooner", 1)
	assert.Contains(t, sooner, `<p class="deadline urgent"`)
	assert.Contains(t, sooner, `<span class="left">45 min left</span> — then it expires and does not run`)
	assert.Contains(t, sooner, `999.99 EUR`)
}

func TestInboxEditFormRefusesAnIncrease(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	hash := e.Pending("r1", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "", approvalstest.LookupStep(e.Now))
	b := e.signIn("dana")

	status, _, page := b.post("/runs/r1/steps/2/edit", url.Values{"csrf": {b.csrf}, "args_hash": {hash},
		"arg.amount_cents": {"300.00"}, "arg.currency": {"EUR"}, "arg.order_id": {"1001"}, "arg.reason": {"damaged_in_transit"},
		"comment": {"more"}})
	assert.Equal(t, http.StatusUnprocessableEntity, status)
	assert.Contains(t, page, `<div class="panel error" role="alert">amount_cents may not increase in an edit of issue_credit: 25900 was proposed, 30000 asked`)
	c := card(t, page, "r1", 2)
	assert.Contains(t, c, `<details class="edit" open>`, "the form comes back open")
	assert.Contains(t, c, `<p class="inline-error">amount_cents may not increase`, "with the reason on the card")
	assert.Contains(t, c, `name="arg.amount_cents" value="300.00"`, "with what was typed")
	assert.Contains(t, c, `>more</textarea>`)

	assert.Empty(t, e.Temporal.Approvals(), "nothing was sent to the run")
	assert.Equal(t, 1, e.Count(`run_id = 'r1' AND decision = 'edit' AND outcome = 'invalid' AND via = 'inbox' AND args_hash = $1
		AND (edited_args->>'amount_cents')::int = 30000`, hash), "the refusal is audited with what was asked")
	assert.Equal(t, 0, e.Count(`outcome = 'accepted'`))

	// A stale hash: 409, and the step is still waiting.
	status, _, page = b.post("/runs/r1/steps/2/edit", url.Values{"csrf": {b.csrf}, "args_hash": {strings.Repeat("1", 64)},
		"arg.amount_cents": {"100.00"}})
	assert.Equal(t, http.StatusConflict, status)
	assert.Contains(t, page, "review the step&#39;s arguments again")
	card(t, page, "r1", 2)
	assert.Empty(t, e.Temporal.Approvals())

	// A value that is not an amount: refused naming the field, audited.
	status, _, page = b.post("/runs/r1/steps/2/edit", url.Values{"csrf": {b.csrf}, "args_hash": {hash}, "arg.amount_cents": {"1,50"}})
	assert.Equal(t, http.StatusUnprocessableEntity, status)
	assert.Contains(t, page, `amount_cents: amount in EUR: &#34;1,50&#34;: write the amount with digits and a decimal point only`)
	assert.Equal(t, 2, e.Count(`run_id = 'r1' AND decision = 'edit' AND outcome = 'invalid'`))
}

// TestInboxEditFormRefusesInvalidUTF8: a field that is not UTF-8 is refused
// naming the field, as the API refuses the same bytes, audited, with the
// form shown again as typed; nothing reaches the run.
func TestInboxEditFormRefusesInvalidUTF8(t *testing.T) {
	t.Parallel()
	tests := []struct {
		field, value, message string
	}{
		{"arg.name", "pay\xffee", "name is not valid UTF-8 (at byte 3)"},
		{"arg.labels", `{"k":"` + "\xc3" + `"}`, "labels is not valid UTF-8 (at byte 6)"},
		{"args", `{"name":"` + "\xff" + `","count":1}`, "args is not valid UTF-8 (at byte 9)"},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			t.Parallel()
			e := setupInbox(t)
			hash := e.Pending("r1", 2, "tune_widget", `{"name":"w","count":3,"labels":{}}`, 48*time.Hour, "")
			b := e.signIn("dana")

			status, _, page := b.post("/runs/r1/steps/2/edit", url.Values{"csrf": {b.csrf}, "args_hash": {hash}, tt.field: {tt.value}})
			assert.Equal(t, http.StatusBadRequest, status)
			assert.Contains(t, page, `<div class="panel error" role="alert">`+tt.message+`</div>`)
			c := card(t, page, "r1", 2)
			assert.Contains(t, c, `<details class="edit" open>`, "the form comes back open")
			if tt.field != "args" {
				assert.Contains(t, c, `name="`+tt.field+`"`, "with what was typed")
				assert.Contains(t, c, html.EscapeString(tt.value))
			}
			assert.Empty(t, e.Temporal.Approvals(), "nothing was sent to the run")
			assert.Equal(t, 1, e.Count(`run_id = 'r1' AND decision = 'edit' AND outcome = 'invalid' AND via = 'inbox' AND detail = $1`,
				tt.message), "the refusal is audited")
			assert.Equal(t, 0, e.Count(`outcome = 'accepted'`))
		})
	}
}

func TestInboxEditFormApprovesTheEditedArguments(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	hash := e.Pending("r1", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "", approvalstest.LookupStep(e.Now))
	b := e.signIn("dana")

	status, h, _ := b.post("/runs/r1/steps/2/edit", url.Values{"csrf": {b.csrf}, "args_hash": {hash},
		"arg.amount_cents": {"150.00"}, "arg.currency": {"EUR"}, "arg.order_id": {"1001"}, "arg.reason": {"damaged_in_transit"},
		"comment": {"half, photos unclear"}})
	require.Equal(t, http.StatusSeeOther, status)
	edited := `{"amount_cents":15000,"currency":"EUR","order_id":"1001","reason":"damaged_in_transit"}`
	editedHash, err := keys.ArgsHash([]byte(edited))
	require.NoError(t, err)

	sent := e.Temporal.Approvals()
	require.Len(t, sent, 1, "the edit was sent to the run")
	assert.Equal(t, workflows.DecisionEdit, sent[0].Decision)
	assert.Equal(t, "dana", sent[0].Approver)
	assert.Equal(t, hash, sent[0].ArgsHash, "bound to the arguments reviewed")
	assert.JSONEq(t, edited, string(sent[0].Args), "the amount a JSON integer, in cents")
	assert.Equal(t, editedHash, sent[0].EditedArgsHash)
	assert.Equal(t, 1, e.Count(`run_id = 'r1' AND step = 2 AND decision = 'edit' AND outcome = 'accepted' AND via = 'inbox'
		AND approver = 'dana' AND comment = 'half, photos unclear' AND args_hash = $1 AND edited_args_hash = $2
		AND jsonb_typeof(edited_args->'amount_cents') = 'number'`, hash, editedHash))

	status, page := b.get(h.Get("Location"))
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, page, "You edited and approved step 2 of run r1.")
	assert.Contains(t, page, "Nothing is waiting for a decision.")
}

func TestInboxSendsAnEditNotAppliedAgain(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	hash := e.Pending("r1", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "")
	b := e.signIn("dana")
	status, _, _ := b.post("/runs/r1/steps/2/edit", url.Values{"csrf": {b.csrf}, "args_hash": {hash}, "arg.amount_cents": {"120.00"},
		"comment": {"less"}})
	require.Equal(t, http.StatusSeeOther, status)
	require.Len(t, e.Temporal.Approvals(), 1)

	// The run has not applied the edit after the grace period: the inbox
	// lists it, with the edited arguments, and offers to send it again.
	e.Advance(2 * approvals.DefaultResolveGrace)
	page := mustGet(t, b, "/")
	c := regexp.MustCompile(`(?s)<article class="error" data-run="r1" data-step="2">.*?</article>`).FindString(page)
	require.NotEmpty(t, c, "the step needs resolution")
	assert.Contains(t, c, "dana edited and approved this step")
	assert.Contains(t, c, `<h3>Arguments of the edit</h3>`)
	assert.Contains(t, c, `<span class="money">120.00 EUR</span>`)
	assert.Contains(t, c, `<form method="post" action="/runs/r1/steps/2/edit">`)
	assert.Contains(t, c, `name="args" value="{`)
	assert.Contains(t, c, `>Send the edit again</button>`)

	args := regexp.MustCompile(`name="args" value="([^"]*)"`).FindStringSubmatch(c)
	require.NotNil(t, args)
	status, _, page = b.post("/runs/r1/steps/2/edit", url.Values{"csrf": {b.csrf}, "args_hash": {hash},
		"args": {html.UnescapeString(args[1])}, "comment": {"less"}})
	require.Equal(t, http.StatusSeeOther, status, page)
	sent := e.Temporal.Approvals()
	require.Len(t, sent, 2, "the same edit, sent again")
	assert.Equal(t, sent[0].EditedArgsHash, sent[1].EditedArgsHash)
	assert.Equal(t, 1, e.Count(`outcome = 'accepted'`), "one decision of record")
	assert.Equal(t, 1, e.Count(`outcome = 'repeated' AND via = 'inbox'`))
}

func TestInboxEditFormIsProtected(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	hash := e.Pending("r1", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "")
	b := e.signIn("dana")
	form := url.Values{"args_hash": {hash}, "arg.amount_cents": {"100.00"}}

	status, _, page := b.post("/runs/r1/steps/2/edit", form)
	assert.Equal(t, http.StatusForbidden, status, "no CSRF token")
	assert.Contains(t, page, "not sent from this inbox")

	v := e.signIn("vic")
	assert.NotContains(t, card(t, mustGet(t, v, "/"), "r1", 2), "Edit, then approve", "a viewer gets no edit form")
	form.Set("csrf", v.csrf)
	status, _, _ = v.post("/runs/r1/steps/2/edit", form)
	assert.Equal(t, http.StatusForbidden, status, "a viewer may not edit")

	form.Set("csrf", b.csrf)
	status, _, _ = b.post("/runs/r1/steps/9/edit", form)
	assert.Equal(t, http.StatusNotFound, status, "no such step")
	assert.Empty(t, e.Temporal.Approvals())
	assert.Equal(t, 0, e.Count(`outcome = 'accepted'`))
}

func TestInboxOffersNoEditWhenTheToolForbidsIt(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	e.Pending("r1", 1, "restart_cluster", `{"zone":"eu-west-1"}`, 48*time.Hour, "")
	page := mustGet(t, e.signIn("dana"), "/")
	c := card(t, page, "r1", 1)
	assert.Contains(t, c, `value="approve"`)
	assert.NotContains(t, c, "Edit, then approve")
}

func mustGet(t *testing.T, b *browser, path string) string {
	t.Helper()
	status, page := b.get(path)
	require.Equal(t, http.StatusOK, status, page)
	return page
}

func TestRunPageTimeline(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	proposed := json.RawMessage(`{"amount_cents":25900,"currency":"EUR","order_id":"1001","reason":"damaged_in_transit"}`)
	ran := json.RawMessage(`{"amount_cents":15000,"currency":"EUR","order_id":"1001","reason":"damaged_in_transit"}`)
	result := json.RawMessage(`{"id":7,"order_id":"1001","amount_cents":15000,"currency":"EUR","created":true,"note":"` +
		strings.Repeat("long-", 60) + `"}`)
	credit := workflows.Step{Step: 2, Tool: "issue_credit", Class: "natural", Key: "v1/acme/r1/2/issue_credit", Args: ran,
		ArgsHash: strings.Repeat("b", 64), State: workflows.StepDone, Result: result,
		PlannedAt: e.Now.Add(-time.Hour), FinishedAt: e.Now.Add(-30 * time.Minute),
		Approval: &workflows.StepApproval{Reason: "amount_cents above 10000", Decision: workflows.DecisionEdit, Approver: "dana",
			DecidedAt: e.Now.Add(-31 * time.Minute), Comment: "half"},
		Edit: &workflows.StepEdit{OriginalArgs: proposed, OriginalArgsHash: strings.Repeat("a", 64), Args: ran,
			ArgsHash: strings.Repeat("b", 64), EditedBy: "dana", EditedAt: e.Now.Add(-31 * time.Minute), Comment: "half, photos unclear"}}
	dup := credit
	dup.Step, dup.State, dup.DuplicateOf, dup.Edit, dup.Approval, dup.Key = 3, workflows.StepDuplicate, 2, nil, nil, "v1/acme/r1/3/issue_credit"
	e.Temporal.SetStatus(workflows.Status{Tenant: "acme", RunID: "r1", Planner: "script", State: workflows.RunCompleted,
		Steps: []workflows.Step{approvalstest.LookupStep(e.Now), credit, dup}, StartedAt: e.Now.Add(-2 * time.Hour), UpdatedAt: e.Now})

	page := mustGet(t, e.signIn("dana"), "/runs/r1")
	assert.Regexp(t, `(?s)<ol class="timeline">.*<span class="num">Step 1</span> <span class="tool">lookup_order</span> <span class="badge state done">done</span>`+
		`.*<span class="num">Step 2</span> <span class="tool">issue_credit</span> <span class="badge state done">done</span>`+
		`.*<span class="num">Step 3</span> <span class="tool">issue_credit</span> <span class="badge state duplicate">duplicate</span>`, page)
	step2 := regexp.MustCompile(`(?s)<li class="done" id="step-2".*?</li>\s*<li`).FindString(page)
	require.NotEmpty(t, step2)
	assert.Contains(t, step2, `finished <time datetime="`+e.Now.Add(-30*time.Minute).Format(time.RFC3339)+`">`)
	assert.Contains(t, step2, `<span class="money">150.00 EUR</span>`, "the arguments that ran, as money")
	assert.Contains(t, step2, `<p class="result">Result: amount_cents: 150.00 EUR · created: true · currency: EUR · id: 7 · note: long-long-`)
	assert.Contains(t, step2, `<details class="full result-json"><summary>Full result (JSON)</summary><pre>{`, "the full JSON one click away")
	assert.Contains(t, step2, `<strong>Edited before it ran</strong> by dana`)
	assert.Contains(t, step2, `“half, photos unclear”`)
	assert.Contains(t, step2, `<span class="tool">amount_cents</span>: <del>259.00 EUR</del> → <ins>150.00 EUR</ins>`)
	assert.NotContains(t, step2, `<del>1001</del>`, "unchanged arguments are not listed as changes")
	assert.Contains(t, step2, `Proposed hash <code>`+strings.Repeat("a", 64)+`</code>`)
	assert.Contains(t, step2, `Ran with hash <code>`+strings.Repeat("b", 64)+`</code>`)
	assert.Contains(t, step2, `edited and approved by dana`)
	assert.Contains(t, page, `Repeats <a href="#step-2">step 2</a>, not executed again`)
}

func TestRunPageOfAnotherTenantsRun(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	e.Temporal.SetStatus(workflows.Status{Tenant: "globex", RunID: "r1", State: workflows.RunCompleted})
	status, _ := e.signIn("dana").get("/runs/r1")
	assert.Equal(t, http.StatusNotFound, status)
}
