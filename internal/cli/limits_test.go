package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/mocks"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/sdkfake"
	"github.com/oncerun/oncerun/internal/spend"
	"github.com/oncerun/oncerun/workflows"
)

// charge counts amount EUR of step 2 of tenant acme's run r1 as applied.
func charge(t *testing.T, db pgtest.DB, amount int64) {
	t.Helper()
	_, err := spend.ChargeTx(context.Background(), pgtest.Connect(t, db), spend.Charge{Tenant: "acme", RunID: "r1", Step: 2,
		Tool: "issue_credit", Key: "v1/acme/r1/2/issue_credit", Amounts: spend.Amounts{"EUR": amount}})
	require.NoError(t, err)
}

// TestLimitsDirect: without ONCERUN_API, limits set, list and delete the
// --tenant's caps in the database, checked against the deployment's
// tools, as --as (default $USER); the list prints money and the share
// used, and --json the API's shape.
func TestLimitsDirect(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	env := Env{DatabaseURL: db.URL, User: "dana"}

	out, err := run(t, env, "limits", "set", "credits", "--tenant", "acme", "--tools", "issue_credit", "--currency", "eur", "--amount", "200000")
	require.NoError(t, err, out)
	assert.Regexp(t, `^limit credits: 2,000.00 EUR per UTC day for issue_credit\n`+
		`NAME +TOOLS +PERIOD +CAP +SPENT +HELD +USED%\ncredits +issue_credit +utc_day +2,000.00 EUR +0.00 EUR +0.00 EUR +0.0%\n$`, out)

	charge(t, db, 25900)
	out, err = run(t, env, "limits", "set", "refunds", "--tenant", "acme", "--tools", "refund_payment,issue_credit",
		"--currency", "EUR", "--amount", "50000", "--period", "rolling_24h", "--as", "ops", "--other-currencies", "allow")
	require.NoError(t, err, out)
	out, err = run(t, env, "limits", "--tenant", "acme")
	require.NoError(t, err, out)
	assert.Regexp(t, `NAME +TOOLS +PERIOD +CAP +SPENT +HELD +USED%\n`+
		`credits +issue_credit +utc_day +2,000.00 EUR +259.00 EUR +0.00 EUR +13.0%\n`+
		`refunds +issue_credit,refund_payment +rolling_24h +500.00 EUR +259.00 EUR +0.00 EUR +51.8%\n$`, out)

	out, err = run(t, env, "limits", "--tenant", "acme", "--json")
	require.NoError(t, err, out)
	var list approvals.LimitList
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	require.Len(t, list.Limits, 2)
	assert.Equal(t, []any{"credits", "dana", int64(25900)}, []any{list.Limits[0].Name, list.Limits[0].UpdatedBy, list.Limits[0].Spent})
	assert.Equal(t, "ops", list.Limits[1].UpdatedBy, "--as")
	assert.Equal(t, []string{spend.OtherPark, spend.OtherAllow}, []string{list.Limits[0].OtherCurrencies, list.Limits[1].OtherCurrencies},
		"--other-currencies, park by default")
	assert.Contains(t, out, `"limits": [`)

	out, err = run(t, env, "limits", "--tenant", "globex")
	require.NoError(t, err, out)
	assert.Equal(t, "no limit is set\n", out, "another tenant's limits are its own")

	out, err = run(t, env, "limits", "delete", "credits", "--tenant", "acme")
	require.NoError(t, err, out)
	assert.Equal(t, "deleted limit credits of tenant acme\n", out)
	_, err = run(t, env, "limits", "delete", "credits", "--tenant", "acme")
	require.ErrorIs(t, err, spend.ErrNotFound)
	_, err = run(t, env, "limits", "delete", "refunds", "--tenant", "globex")
	require.ErrorIs(t, err, spend.ErrNotFound)
}

// TestLimitsRefuseBadFlags: a bad limit is refused naming the field, and
// writes nothing; without ONCERUN_API, --tenant is required.
func TestLimitsRefuseBadFlags(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	env := Env{DatabaseURL: db.URL, User: "dana"}
	set := []string{"limits", "set", "credits", "--tenant", "acme"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"zero amount", []string{"--tools", "issue_credit", "--currency", "EUR", "--amount", "0"}, "amount: 0: a cap is a whole number of minor units above 0"},
		{"fractional amount", []string{"--tools", "issue_credit", "--currency", "EUR", "--amount", "1.5"}, `invalid argument "1.5" for "--amount"`},
		{"unknown currency", []string{"--tools", "issue_credit", "--currency", "ZZZ", "--amount", "100"}, `currency: "ZZZ" is not an ISO 4217 currency code`},
		{"unknown tool", []string{"--tools", "issue_bonus", "--currency", "EUR", "--amount", "100"}, `tools: "issue_bonus" is not a registered tool`},
		{"tool without an amount", []string{"--tools", "lookup_order", "--currency", "EUR", "--amount", "100"}, "tools: lookup_order declares no amount"},
		{"unknown period", []string{"--tools", "issue_credit", "--currency", "EUR", "--amount", "100", "--period", "weekly"}, `period: "weekly"`},
		{"no amount", []string{"--tools", "issue_credit", "--currency", "EUR"}, `required flag(s) "amount" not set`},
		{"numeric currency", []string{"--tools", "issue_credit", "--currency", "978", "--amount", "100"}, `currency: "978" is not an ISO 4217 currency code`},
		{"unknown rule for other currencies", []string{"--tools", "issue_credit", "--currency", "EUR", "--amount", "100", "--other-currencies", "bogus"},
			`other_currencies: "bogus" is neither park nor allow`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := run(t, env, append(set, tc.args...)...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := run(t, env, "limits", "set", "Credits", "--tenant", "acme", "--tools", "issue_credit", "--currency", "EUR", "--amount", "1")
	require.ErrorIs(t, err, spend.ErrInvalid)
	assert.Contains(t, err.Error(), `name: "Credits" is not a limit name`)
	for _, args := range [][]string{{"limits"}, {"limits", "delete", "credits"},
		{"limits", "set", "credits", "--tools", "issue_credit", "--currency", "EUR", "--amount", "1"}} {
		_, err := run(t, unreachable, args...)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "give --tenant T", args)
	}
	t.Cleanup(func() {
		us, err := spend.ListCaps(context.Background(), pgtest.Connect(t, db), "acme")
		require.NoError(t, err)
		assert.Empty(t, us, "nothing was set")
	})
}

// TestLimitsThroughTheAPI: with ONCERUN_API, limits lists, sets and
// deletes through the approvals service and prints its answers; --tenant
// and --as are refused.
func TestLimitsThroughTheAPI(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	credits := approvals.Limit{Name: "credits", Tools: []string{"issue_credit"}, Currency: "EUR", Amount: 200000, Period: "utc_day",
		UpdatedBy: "ops", UpdatedAt: at, Since: at.Truncate(24 * time.Hour), Spent: 195000, Held: 12000, Ratio: 1.035}
	var cs controlServer
	url := cs.start(t, func(path string) any {
		if path == "/v1/limits" {
			return approvals.LimitList{Limits: []approvals.Limit{credits}}
		}
		return credits
	})
	env := Env{APIURL: url, Token: "oncerun_x"}

	out, err := run(t, env, "limits")
	require.NoError(t, err, out)
	assert.Regexp(t, `NAME +TOOLS +PERIOD +CAP +SPENT +HELD +USED%\ncredits +issue_credit +utc_day +2,000.00 EUR +1,950.00 EUR +120.00 EUR +103.5%\n$`, out)
	out, err = run(t, env, "limits", "--json")
	require.NoError(t, err, out)
	var list approvals.LimitList
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	assert.Equal(t, []approvals.Limit{credits}, list.Limits)

	out, err = run(t, env, "limits", "set", "credits", "--tools", "issue_credit,refund_payment", "--currency", "EUR", "--amount", "200000",
		"--period", "rolling_24h", "--json")
	require.NoError(t, err, out)
	var l approvals.Limit
	require.NoError(t, json.Unmarshal([]byte(out), &l), out)
	assert.Equal(t, credits, l)
	out, err = run(t, env, "limits", "delete", "credits")
	require.NoError(t, err, out)
	assert.Equal(t, "deleted limit credits\n", out)

	assert.Equal(t, []string{"GET /v1/limits", "GET /v1/limits", "PUT /v1/limits/credits", "DELETE /v1/limits/credits"}, cs.paths)
	assert.JSONEq(t, `{"tools":["issue_credit","refund_payment"],"currency":"EUR","amount":200000,"period":"rolling_24h"}`, cs.bodies[2])

	for _, args := range [][]string{{"limits", "--tenant", "acme"}, {"limits", "delete", "credits", "--tenant", "acme"},
		{"limits", "set", "credits", "--tools", "issue_credit", "--currency", "EUR", "--amount", "1", "--as", "dana"}} {
		_, err := run(t, env, args...)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "with ONCERUN_API set", args)
	}
}

// TestLimitsThroughTheAPIShowTheServicesRefusal: a refusal of the
// service reaches the command's error with its message.
func TestLimitsThroughTheAPIShowTheServicesRefusal(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"error": {"code": "forbidden", "message": "dana is an approver; setting limits takes an operator token"}}`))
	}))
	t.Cleanup(srv.Close)
	_, err := run(t, Env{APIURL: srv.URL, Token: "oncerun_x"}, "limits", "set", "credits", "--tools", "issue_credit", "--currency", "EUR", "--amount", "1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "dana is an approver; setting limits takes an operator token (HTTP 403, forbidden)")
}

// TestStartTakesSpend: --spend, as JSON or as CODE=MINOR pairs, reaches
// the run as limits.spend; a bad budget is refused naming it.
func TestStartTakesSpend(t *testing.T) {
	t.Parallel()
	var cs controlServer
	env := Env{APIURL: cs.start(t, func(string) any { return approvals.StartResponse{RunID: "r1"} }), Token: "oncerun_x"}
	for _, v := range []string{`{"EUR":50000,"USD":100}`, "EUR=50000,USD=100", " EUR = 50000 , USD=100 "} {
		out, err := run(t, env, "start", "--run-id", "r1", "--goal", "refund order 1001", "--spend", v)
		require.NoError(t, err, out)
	}
	require.Len(t, cs.bodies, 3)
	for _, body := range cs.bodies {
		assert.JSONEq(t, `{"run_id":"r1","goal":"refund order 1001","limits":{"spend":{"EUR":50000,"USD":100}}}`, body)
	}
	for _, rule := range []string{"allow", "park"} {
		out, err := run(t, env, "start", "--run-id", "r1", "--goal", "refund order 1001", "--spend", "EUR=100", "--spend-other-currencies", rule)
		require.NoError(t, err, out)
	}
	require.Len(t, cs.bodies, 5)
	assert.JSONEq(t, `{"run_id":"r1","goal":"refund order 1001","limits":{"spend":{"EUR":100},"other_currencies":"allow"}}`, cs.bodies[3])
	assert.JSONEq(t, `{"run_id":"r1","goal":"refund order 1001","limits":{"spend":{"EUR":100}}}`, cs.bodies[4], "park is the default")
	_, err := run(t, env, "start", "--run-id", "r1", "--goal", "refund", "--spend", "EUR=100", "--spend-other-currencies", "count")
	require.ErrorContains(t, err, `--spend-other-currencies "count": want park or allow`)

	for _, tc := range []struct{ spend, want string }{
		{`{"EUR":1.5}`, "--spend: EUR is a number that does not fit; want a whole number"},
		{`{"EUR":1,"EUR":2}`, `--spend: field "EUR" appears twice`},
		{"EUR=1.5", "--spend: EUR=1.5 is not a whole number of minor units"},
		{"EUR=1,EUR=2", "--spend: EUR is given twice"},
		{"EUR:100", "want CODE=MINOR pairs such as EUR=50000,USD=100"},
		{"EUR=-1", "limits.spend.EUR is -1"},
		{"eur=100", `limits.spend: "eur" is not an ISO 4217 currency code in upper case`},
		{"ZZZ=100", `limits.spend: "ZZZ" is not an ISO 4217 currency code`},
	} {
		_, err := run(t, unreachable, "start", "--tenant", "acme", "--run-id", "r1", "--goal", "refund", "--spend", tc.spend)
		require.Error(t, err, tc.spend)
		assert.Contains(t, err.Error(), tc.want, tc.spend)
	}
}

// TestStatusPrintsSpend: status prints what the run spent against its
// budget, per currency, as money; --json carries it. Without ONCERUN_API
// it is read from the database.
func TestStatusPrintsSpend(t *testing.T) {
	t.Parallel()
	budget := int64(50000)
	st := workflows.Status{Tenant: "acme", RunID: "r1", Planner: "script", State: workflows.RunRunning,
		Budget: map[string]int64{"EUR": 50000},
		Spend:  []workflows.SpendTotal{{Currency: "EUR", Spent: 25900, Held: 10000, Budget: &budget}, {Currency: "USD", Spent: 100}}}
	var cs controlServer
	env := Env{APIURL: cs.start(t, func(string) any { return st }), Token: "oncerun_x"}
	out, err := run(t, env, "status", "--run-id", "r1")
	require.NoError(t, err, out)
	assert.Contains(t, out, "run r1 of tenant acme: running\n"+
		"spend: 259.00 EUR spent, 100.00 EUR held, of a budget of 500.00 EUR (71.8% used)\n"+
		"spend: 1.00 USD spent, 0.00 USD held, no budget in USD\n")
	out, err = run(t, env, "status", "--run-id", "r1", "--json")
	require.NoError(t, err, out)
	var got workflows.Status
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	assert.Equal(t, st.Spend, got.Spend)
	assert.Equal(t, st.Budget, got.Budget)

	db := pgtest.NewDB(t)
	charge(t, db, 25900)
	tc := &mocks.Client{}
	tc.On("QueryWorkflow", mock.Anything, workflows.WorkflowID("acme", "r1"), "", workflows.QueryStatus).Return(
		sdkfake.Value{V: workflows.Status{Tenant: "acme", RunID: "r1", State: workflows.RunRunning, Budget: map[string]int64{"EUR": 50000}}}, nil)
	out, err = run(t, Env{Temporal: tc, DatabaseURL: db.URL}, "status", "--tenant", "acme", "--run-id", "r1")
	require.NoError(t, err, out)
	assert.Contains(t, out, "spend: 259.00 EUR spent, 0.00 EUR held, of a budget of 500.00 EUR (51.8% used)\n")
	assert.False(t, strings.Contains(out, "USD"))
}

// TestApprovalsSayWhichStepsWaitAtALimit: the approvals list's KIND says
// limit for a step that waits at a spend limit, in both modes, and --json
// carries it.
func TestApprovalsSayWhichStepsWaitAtALimit(t *testing.T) {
	t.Parallel()
	var cs controlServer
	env := Env{APIURL: cs.start(t, func(string) any {
		return approvals.ApprovalList{State: "pending", Approvals: []approvals.Item{
			{Kind: approvals.KindApproval, ApprovalKind: approvalstore.KindLimit, RunID: "r1", Step: 2, Tool: "issue_credit",
				Args: json.RawMessage(`{}`), State: "pending"},
			{Kind: approvals.KindApproval, ApprovalKind: approvalstore.KindRule, RunID: "r2", Step: 2, Tool: "issue_credit",
				Args: json.RawMessage(`{}`), State: "pending"}}}
	}), Token: "oncerun_x"}
	out, err := run(t, env, "approvals")
	require.NoError(t, err, out)
	assert.Regexp(t, `\nr1 +2 +issue_credit +limit +- +\{\} +pending`, out)
	assert.Regexp(t, `\nr2 +2 +issue_credit +approval +- +\{\} +pending`, out)

	db := pgtest.NewDB(t)
	now := time.Now()
	for _, a := range []approvalstore.Request{
		{RunID: "r1", Kind: approvalstore.KindLimit, Reason: "over the daily cap for issue_credit"},
		{RunID: "r2", Reason: "amount_cents above 10000"},
	} {
		a.Tenant, a.Step, a.Tool, a.Args, a.ArgsHash, a.RequestedAt, a.Deadline = "acme", 2, "issue_credit", json.RawMessage(`{}`),
			strings.Repeat("a", 64), now, now.Add(time.Hour)
		require.NoError(t, approvalstore.RecordPending(context.Background(), pgtest.Connect(t, db), a))
	}
	direct := Env{Temporal: &mocks.Client{}, DatabaseURL: db.URL}
	out, err = run(t, direct, "approvals", "--tenant", "acme")
	require.NoError(t, err, out)
	assert.Regexp(t, `TENANT +RUN +STEP +TOOL +KIND +AMOUNT +ARGS`, out)
	assert.Regexp(t, `\nacme +r1 +2 +issue_credit +limit +- +\{\}`, out)
	assert.Regexp(t, `\nacme +r2 +2 +issue_credit +rule +- +\{\}`, out)
	out, err = run(t, direct, "approvals", "--tenant", "acme", "--json")
	require.NoError(t, err, out)
	assert.Contains(t, out, `"kind": "limit"`)
}
