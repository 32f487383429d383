package inbox

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstest"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// limitReason is why a step waits at a limit, as the run words it.
const limitReason = "over the daily cap for issue_credit: 1,950.00 of 2,000.00 EUR spent, this call 259.00"

// TestLimitsPage: the limits page, linked from every page's header, lists
// the tenant's caps with their tools, window, cap, spend, holds and the
// share used as a bar, and nothing of another tenant's; signed out, it
// sends the browser to sign in.
func TestLimitsPage(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	// Counted before the caps, so that both count whatever the caps say.
	e.SpendOn(2, 25900, false)
	e.SpendOn(3, 10000, true)
	for _, body := range []string{approvalstest.CreditsCap, `{"tools": ["issue_credit"], "currency": "EUR", "amount": 30000, "period": "rolling_24h"}`} {
		name := "credits"
		if body != approvalstest.CreditsCap {
			name = "small"
		}
		status, _, answer := e.Call("ops", http.MethodPut, "/v1/limits/"+name, body)
		require.Equal(t, http.StatusOK, status, answer)
	}
	vic := e.signIn("vic")

	assert.Contains(t, mustGet(t, vic, "/"), `<a href="/limits">Limits</a>`, "the header links the page")
	page := mustGet(t, vic, "/limits")
	assert.Contains(t, page, `<h2 id="limits">Spend limits (2)</h2>`)
	credits := regexp.MustCompile(`(?s)<article class="cap"[^>]*data-limit="credits">.*?</article>`).FindString(page)
	require.NotEmpty(t, credits, page)
	assert.Contains(t, credits, `issue_credit · 2,000.00 EUR per UTC day`)
	assert.Contains(t, credits, `<dt>Cap</dt><dd class="money">2,000.00 EUR</dd>`)
	assert.Contains(t, credits, `<dt>Spent</dt><dd class="money">259.00 EUR</dd>`)
	assert.Contains(t, credits, `>100.00 EUR</dd>`, "held")
	assert.Contains(t, credits, `<dd class="used ok">17.9%</dd>`)
	assert.Contains(t, credits, `<div class="bar ok" role="img" aria-label="17.9% used"><span style="width: 17%"></span></div>`)
	small := regexp.MustCompile(`(?s)<article class="cap"[^>]*data-limit="small">.*?</article>`).FindString(page)
	assert.Contains(t, small, `per rolling 24 hours`)
	assert.Contains(t, small, `<dd class="used over">119.7%</dd>`, "over its cap")
	assert.Contains(t, small, `<span style="width: 100%">`, "a bar never wider than its track")

	other := mustGet(t, e.signIn("omar"), "/limits")
	assert.Contains(t, other, `Spend limits (0)`)
	assert.Contains(t, other, "No limit is set")
	assert.NotContains(t, other, "credits")

	status, _ := (&browser{e: e, http: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}).get("/limits")
	assert.Equal(t, http.StatusSeeOther, status)
}

// TestBarOf: the share of a limit used, its bar's width and its level.
func TestBarOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		used, limit int64
		want        usageBar
	}{
		{0, 100, usageBar{"0.0%", 0, "ok"}},
		{79, 100, usageBar{"79.0%", 79, "ok"}},
		{80, 100, usageBar{"80.0%", 80, "warn"}},
		{100, 100, usageBar{"100.0%", 100, "over"}},
		{250, 100, usageBar{"250.0%", 100, "over"}},
		{0, 0, usageBar{"0.0%", 0, "ok"}},
		{1, 0, usageBar{"100.0%", 100, "over"}},
	} {
		assert.Equal(t, tc.want, barOf(tc.used, tc.limit), "%d of %d", tc.used, tc.limit)
	}
}

// TestInboxCardOfAStepAtALimit: a step that waits at a spend limit says
// so first, with the limit's reason, and its approve button reads as the
// exception it is; a step that waits by its tool's rule keeps "Approve".
func TestInboxCardOfAStepAtALimit(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	e.Pending("r1", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "", approvalstest.LookupStep(e.Now))
	p, err := e.Reg.Prepare(tools.ProposedCall{Tool: "issue_credit", Args: json.RawMessage(approvalstest.CreditArgs)})
	require.NoError(t, err)
	require.NoError(t, approvalstore.RecordPending(context.Background(), e.Pool, approvalstore.Request{
		Tenant: "acme", RunID: "r2", Step: 2, Tool: "issue_credit", Args: p.Args, ArgsHash: p.ArgsHash,
		Goal: "refund order 1002", Reason: limitReason, Kind: approvalstore.KindLimit, RequestedBy: "ops",
		RequestedAt: e.Now.Add(-time.Minute), Deadline: e.Now.Add(time.Hour),
	}))

	page := mustGet(t, e.signIn("dana"), "/")
	limit := regexp.MustCompile(`(?s)<article [^>]*data-run="r2" data-step="2" class="limit" data-kind="limit">.*?</article>`).FindString(page)
	require.NotEmpty(t, limit, page)
	assert.Contains(t, limit, `<p class="limit-reason"><strong>Over a spend limit.</strong> `+limitReason+`. Approving lets this call past the limit as an exception`)
	assert.NotContains(t, limit, "Needs approval:")
	assert.Contains(t, limit, `<button type="submit" class="approve" name="decision" value="approve">Approve as an exception</button>`)
	assert.Less(t, regexp.MustCompile(`limit-reason`).FindStringIndex(limit)[0], regexp.MustCompile(`<h3>Arguments</h3>`).FindStringIndex(limit)[0],
		"the reason comes before the arguments")

	rule := regexp.MustCompile(`(?s)<article [^>]*data-run="r1" data-step="2">.*?</article>`).FindString(page)
	require.NotEmpty(t, rule, page)
	assert.Contains(t, rule, `value="approve">Approve</button>`)
	assert.NotContains(t, rule, "exception")

	status, _, body := e.Call("vic", http.MethodGet, "/v1/approvals", "")
	require.Equal(t, http.StatusOK, status, body)
	var list approvals.ApprovalList
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	kinds := map[string]string{}
	for _, it := range list.Approvals {
		kinds[it.RunID] = it.ApprovalKind
		assert.Equal(t, []approvals.Money{{Field: "amount_cents", Minor: 25900, Currency: "EUR", Text: "259.00 EUR"}}, it.Amounts,
			"each item carries the amounts its tool declares, as money")
	}
	assert.Equal(t, map[string]string{"r1": approvalstore.KindRule, "r2": approvalstore.KindLimit}, kinds, "the API says which")
}

// TestRunPageShowsSpendAgainstTheBudget: the run page shows, per
// currency, what the run spent and holds against its budget, as money,
// with a bar; a currency it spent without a budget says so.
func TestRunPageShowsSpendAgainstTheBudget(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	e.Temporal.SetStatus(workflows.Status{Tenant: "acme", RunID: "r1", Planner: "script", State: workflows.RunRunning,
		Budget: map[string]int64{"EUR": 50000}, Steps: []workflows.Step{approvalstest.LookupStep(e.Now)}, StartedAt: e.Now, UpdatedAt: e.Now})
	e.SpendOn(2, 25900, false)
	e.SpendOn(3, 10000, true)
	_, err := e.Pool.Exec(context.Background(), `UPDATE spend_entries SET currency = 'USD' WHERE key LIKE '%/3/%'`)
	require.NoError(t, err)

	page := mustGet(t, e.signIn("vic"), "/runs/r1")
	eur := regexp.MustCompile(`(?s)<div class="spend" data-currency="EUR">.*?</div>\s*</div>`).FindString(page)
	require.NotEmpty(t, eur, page)
	assert.Contains(t, eur, `<span class="money">259.00 EUR</span> spent · <span class="money">0.00 EUR</span> held · budget <span class="money">500.00 EUR</span> · <span class="used ok">51.8% used</span>`)
	assert.Contains(t, eur, `<div class="bar ok" role="img" aria-label="51.8% used"><span style="width: 51%"></span></div>`)
	assert.Contains(t, page, `<span class="money">100.00 USD</span> held · no budget in USD`)

	status, _, body := e.Call("vic", http.MethodGet, "/v1/runs/r1", "")
	require.Equal(t, http.StatusOK, status, body)
	var st workflows.Status
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	budget := int64(50000)
	assert.Equal(t, []workflows.SpendTotal{{Currency: "EUR", Spent: 25900, Budget: &budget}, {Currency: "USD", Held: 10000}}, st.Spend,
		"the API's status carries it too")
}

// TestADecisionForAnEarlierRoundIsRefused: a step approved under its rule
// that then waits at a limit is in round 2; the card's forms carry that
// round, and a decision sent for round 1 is 409 round_changed.
func TestADecisionForAnEarlierRoundIsRefused(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	ctx := context.Background()
	p, err := e.Reg.Prepare(tools.ProposedCall{Tool: "issue_credit", Args: json.RawMessage(approvalstest.CreditArgs)})
	require.NoError(t, err)
	row := approvalstore.Approval{Request: approvalstore.Request{
		Tenant: "acme", RunID: "r3", Step: 1, Tool: "issue_credit", Args: p.Args, ArgsHash: p.ArgsHash,
		Goal: "refund order 1003", Reason: "amount_cents above 10000", RequestedBy: "ops",
		RequestedAt: e.Now.Add(-time.Hour), Deadline: e.Now.Add(time.Hour),
	}}
	require.NoError(t, approvalstore.RecordPending(ctx, e.Pool, row.Request))
	decided := e.Now.Add(-30 * time.Minute)
	_, err = approvalstore.RecordOutcome(ctx, e.Pool, approvalstore.Approval{Request: approvalstore.Request{
		Tenant: "acme", RunID: "r3", Step: 1, Round: 1,
	}, State: approvalstore.StateApproved, DecidedBy: "dana", DecidedAt: &decided})
	require.NoError(t, err)
	row.Kind, row.Round, row.Reason, row.RequestedAt = approvalstore.KindLimit, 2, limitReason, e.Now.Add(-time.Minute)
	require.NoError(t, approvalstore.RecordPending(ctx, e.Pool, row.Request))

	page := mustGet(t, e.signIn("dana"), "/")
	card := regexp.MustCompile(`(?s)<article [^>]*data-run="r3" data-step="1"[^>]*>.*?</article>`).FindString(page)
	require.NotEmpty(t, card, page)
	assert.Contains(t, card, `<input type="hidden" name="round" value="2">`)

	status, _, body := e.Call("dana", http.MethodPost, "/v1/runs/r3/steps/1/approve", `{"args_hash": "`+p.ArgsHash+`", "round": 1}`)
	require.Equal(t, http.StatusConflict, status, body)
	assert.Contains(t, body, `"round_changed"`)
	assert.Contains(t, body, "round 2")
	var n int
	require.NoError(t, e.Pool.QueryRow(ctx, `SELECT count(*) FROM approval_decisions WHERE run_id = 'r3' AND outcome = 'accepted' AND round = 2`).Scan(&n))
	assert.Zero(t, n, "nothing was decided for round 2")
}
