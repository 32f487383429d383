package approvals

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/approvalstest"
	"github.com/oncerun/oncerun/internal/spend"
)

func limitIn(t *testing.T, body string) Limit {
	t.Helper()
	var l Limit
	require.NoError(t, json.Unmarshal([]byte(body), &l), body)
	return l
}

// TestLimitsAPI: an operator sets a cap and gets it back with its usage;
// every role of the tenant reads it, alone and in the list; set again, it
// is replaced; deleted, it is gone (404), and deleting it again is 404.
func TestLimitsAPI(t *testing.T) {
	t.Parallel()
	e := setupAPI(t)
	e.SpendOn(2, 25900, false)
	e.SpendOn(3, 10000, true)

	status, _, body := e.Call("ops", http.MethodPut, "/v1/limits/credits", approvalstest.CreditsCap)
	require.Equal(t, http.StatusOK, status, body)
	for _, field := range []string{"name", "tools", "currency", "amount", "period", "other_currencies", "updated_by", "updated_at", "since", "spent", "held", "ratio"} {
		assert.Contains(t, body, `"`+field+`":`)
	}
	assert.NotContains(t, body, `"tenant"`)
	l := limitIn(t, body)
	assert.Equal(t, Limit{Name: "credits", Tools: []string{"issue_credit"}, Currency: "EUR", Amount: 200000, Period: spend.PeriodDay,
		OtherCurrencies: spend.OtherPark, UpdatedBy: "ops", UpdatedAt: l.UpdatedAt, Since: l.Since, Spent: 25900, Held: 10000, Ratio: 0.1795}, l)
	assert.False(t, l.UpdatedAt.IsZero())

	for _, who := range []string{"vic", "dana", "ops"} {
		status, _, body = e.Call(who, http.MethodGet, "/v1/limits", "")
		require.Equal(t, http.StatusOK, status, body)
		var list LimitList
		require.NoError(t, json.Unmarshal([]byte(body), &list), body)
		require.Len(t, list.Limits, 1, who)
		assert.Equal(t, l, list.Limits[0])

		status, _, body = e.Call(who, http.MethodGet, "/v1/limits/credits", "")
		require.Equal(t, http.StatusOK, status, body)
		assert.Equal(t, l, limitIn(t, body))
	}

	status, _, body = e.Call("ops", http.MethodPut, "/v1/limits/credits",
		`{"tools": ["issue_credit"], "currency": "eur", "amount": 50000, "period": "rolling_24h"}`)
	require.Equal(t, http.StatusOK, status, body)
	l = limitIn(t, body)
	assert.Equal(t, []any{"EUR", int64(50000), spend.PeriodRolling, 0.718}, []any{l.Currency, l.Amount, l.Period, l.Ratio})

	status, _, body = e.Call("ops", http.MethodPut, "/v1/limits/daily",
		`{"tools": ["issue_credit"], "currency": "EUR", "amount": 1, "other_currencies": "allow"}`)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, spend.PeriodDay, limitIn(t, body).Period, "the default period")
	assert.Equal(t, spend.OtherAllow, limitIn(t, body).OtherCurrencies)
	status, _, body = e.Call("ops", http.MethodPut, "/v1/limits/daily",
		`{"tools": ["issue_credit"], "currency": "EUR", "amount": 1, "other_currencies": "ignore"}`)
	require.Equal(t, http.StatusBadRequest, status, body)
	assert.Contains(t, errorOf(t, body).Message, "other_currencies: \"ignore\" is neither park nor allow")
	for _, code := range []string{"978", "XXX", "EURO", "€", ""} {
		status, _, body = e.Call("ops", http.MethodPut, "/v1/limits/daily",
			`{"tools": ["issue_credit"], "currency": "`+code+`", "amount": 1}`)
		require.Equal(t, http.StatusBadRequest, status, body)
		assert.Contains(t, errorOf(t, body).Message, fmt.Sprintf("currency: %q is not an ISO 4217 currency code", code))
	}
	status, _, body = e.Call("vic", http.MethodGet, "/v1/limits", "")
	require.Equal(t, http.StatusOK, status, body)
	var list LimitList
	require.NoError(t, json.Unmarshal([]byte(body), &list), body)
	require.Len(t, list.Limits, 2)
	assert.Equal(t, []string{"credits", "daily"}, []string{list.Limits[0].Name, list.Limits[1].Name}, "by name")

	status, _, body = e.Call("ops", http.MethodDelete, "/v1/limits/credits", "")
	require.Equal(t, http.StatusNoContent, status, body)
	assert.Empty(t, body)
	status, _, body = e.Call("ops", http.MethodGet, "/v1/limits/credits", "")
	assert.Equal(t, http.StatusNotFound, status, body)
	assert.Equal(t, ErrorDetail{Code: "not_found", Message: `no limit "credits"`}, errorOf(t, body))
	status, _, body = e.Call("ops", http.MethodDelete, "/v1/limits/credits", "")
	assert.Equal(t, http.StatusNotFound, status, body)
	assert.Equal(t, "not_found", errorOf(t, body).Code)

	status, header, body := e.Call("ops", http.MethodPost, "/v1/limits/credits", approvalstest.CreditsCap)
	assert.Equal(t, http.StatusMethodNotAllowed, status, body)
	assert.Equal(t, "DELETE, GET, PUT", header.Get("Allow"))
}

// TestLimitsAPITakesOperators: a viewer and an approver may read limits
// but neither set nor delete them (403, and nothing changes).
func TestLimitsAPITakesOperators(t *testing.T) {
	t.Parallel()
	e := setupAPI(t)
	status, _, body := e.Call("ops", http.MethodPut, "/v1/limits/credits", approvalstest.CreditsCap)
	require.Equal(t, http.StatusOK, status, body)
	for _, tc := range []struct{ who, method, body, want string }{
		{"vic", http.MethodPut, `{"tools": ["issue_credit"], "currency": "EUR", "amount": 1}`, "vic is a viewer; setting limits takes an operator token"},
		{"dana", http.MethodPut, `{"tools": ["issue_credit"], "currency": "EUR", "amount": 1}`, "dana is an approver; setting limits takes an operator token"},
		{"vic", http.MethodDelete, "", "vic is a viewer; deleting limits takes an operator token"},
		{"dana", http.MethodDelete, "", "dana is an approver; deleting limits takes an operator token"},
		// The role is checked before the body.
		{"dana", http.MethodPut, `{"nope": 1}`, "dana is an approver"},
	} {
		status, _, body := e.Call(tc.who, tc.method, "/v1/limits/credits", tc.body)
		assert.Equal(t, http.StatusForbidden, status, body)
		assert.Equal(t, "forbidden", errorOf(t, body).Code)
		assert.Contains(t, errorOf(t, body).Message, tc.want)
	}
	status, _, body = e.Call("vic", http.MethodGet, "/v1/limits/credits", "")
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, int64(200000), limitIn(t, body).Amount, "unchanged")
}

// TestLimitsAPIKeepsTenantsApart: another tenant's cap reads as one that
// does not exist, for reading, deleting and listing; a cap of the same
// name there is its own.
func TestLimitsAPIKeepsTenantsApart(t *testing.T) {
	t.Parallel()
	e := setupAPI(t)
	status, _, body := e.Call("ops", http.MethodPut, "/v1/limits/credits", approvalstest.CreditsCap)
	require.Equal(t, http.StatusOK, status, body)

	status, _, body = e.Call("omar", http.MethodGet, "/v1/limits/credits", "")
	assert.Equal(t, http.StatusNotFound, status, body)
	assert.Equal(t, ErrorDetail{Code: "not_found", Message: `no limit "credits"`}, errorOf(t, body))
	status, _, body = e.Call("omar", http.MethodDelete, "/v1/limits/credits", "")
	assert.Equal(t, http.StatusNotFound, status, body)
	status, _, body = e.Call("omar", http.MethodGet, "/v1/limits", "")
	require.Equal(t, http.StatusOK, status, body)
	assert.JSONEq(t, `{"limits": []}`, body)

	status, _, body = e.Call("omar", http.MethodPut, "/v1/limits/credits", `{"tools": ["issue_credit"], "currency": "USD", "amount": 5}`)
	require.Equal(t, http.StatusOK, status, body)
	e.SpendOn(2, 25900, false)
	status, _, body = e.Call("omar", http.MethodGet, "/v1/limits/credits", "")
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, []any{"USD", int64(5), int64(0)}, []any{limitIn(t, body).Currency, limitIn(t, body).Amount, limitIn(t, body).Spent},
		"acme's spend is not globex's")
	status, _, body = e.Call("ops", http.MethodGet, "/v1/limits/credits", "")
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, []any{"EUR", int64(200000), int64(25900)}, []any{limitIn(t, body).Currency, limitIn(t, body).Amount, limitIn(t, body).Spent})
}

// TestLimitsAPIRefusesBadInput: each bad value is 400 in the API's error
// shape, naming the field, and sets nothing.
func TestLimitsAPIRefusesBadInput(t *testing.T) {
	t.Parallel()
	e := setupAPI(t)
	for _, tc := range []struct{ name, path, body, want string }{
		{"unknown currency", "credits", `{"tools": ["issue_credit"], "currency": "ZZZ", "amount": 100}`, `currency: "ZZZ" is not an ISO 4217 currency code`},
		{"no currency", "credits", `{"tools": ["issue_credit"], "amount": 100}`, "currency:"},
		{"zero amount", "credits", `{"tools": ["issue_credit"], "currency": "EUR", "amount": 0}`, "amount: 0: a cap is a whole number of minor units above 0"},
		{"no amount", "credits", `{"tools": ["issue_credit"], "currency": "EUR"}`, "amount: 0"},
		{"negative amount", "credits", `{"tools": ["issue_credit"], "currency": "EUR", "amount": -5}`, "amount: -5"},
		{"fractional amount", "credits", `{"tools": ["issue_credit"], "currency": "EUR", "amount": 1.5}`, "amount is a number that does not fit; want a whole number"},
		{"amount as a string", "credits", `{"tools": ["issue_credit"], "currency": "EUR", "amount": "100"}`, "amount is a string"},
		{"unknown tool", "credits", `{"tools": ["issue_bonus"], "currency": "EUR", "amount": 100}`, `tools: "issue_bonus" is not a registered tool`},
		{"tool without an amount", "credits", `{"tools": ["lookup_order"], "currency": "EUR", "amount": 100}`, "tools: lookup_order declares no amount with a currency"},
		{"no tools", "credits", `{"currency": "EUR", "amount": 100}`, "tools: name at least one tool"},
		{"unknown period", "credits", `{"tools": ["issue_credit"], "currency": "EUR", "amount": 100, "period": "weekly"}`, `period: "weekly" is neither utc_day nor rolling_24h`},
		{"unknown field", "credits", `{"tools": ["issue_credit"], "currency": "EUR", "amount": 100, "tenant": "globex"}`, `unknown field "tenant"`},
		{"field in another case", "credits", `{"Tools": ["issue_credit"], "currency": "EUR", "amount": 100}`, `unknown field "Tools"`},
		{"bad name", "Credits", approvalstest.CreditsCap, `name: "Credits" is not a limit name`},
		{"not JSON", "credits", `{"tools": [`, "the request body is not valid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			status, _, body := e.Call("ops", http.MethodPut, "/v1/limits/"+tc.path, tc.body)
			assert.Equal(t, http.StatusBadRequest, status, body)
			detail := errorOf(t, body)
			assert.Equal(t, "invalid_request", detail.Code)
			assert.Contains(t, detail.Message, tc.want)
		})
	}
	t.Cleanup(func() {
		us, err := spend.ListCaps(context.Background(), e.Pool, "acme")
		require.NoError(t, err)
		assert.Empty(t, us, "nothing was set")
	})
}

// TestLimitsAPIAnswersANameNoLimitHasWith404: a name no cap can have is
// no cap of the tenant's.
func TestLimitsAPIAnswersANameNoLimitHasWith404(t *testing.T) {
	t.Parallel()
	e := setupAPI(t)
	for _, name := range []string{"Credits", "a%00b", "%E2%80%AEx", "x..y%2F"} {
		status, _, body := e.Call("ops", http.MethodGet, "/v1/limits/"+name, "")
		assert.Equal(t, http.StatusNotFound, status, body)
		status, _, body = e.Call("ops", http.MethodDelete, "/v1/limits/"+name, "")
		assert.Equal(t, http.StatusNotFound, status, body)
	}
}

// TestStartAPITakesSpend: limits.spend reaches the run's input as its
// budget; a value that is no budget is 400 naming limits.spend.
func TestStartAPITakesSpend(t *testing.T) {
	t.Parallel()
	e := setupAPI(t)
	s := &Server{cfg: Config{}.WithDefaults()}
	req, err := http.NewRequest(http.MethodPost, "/v1/runs", nil)
	require.NoError(t, err)
	var sr StartRequest
	require.NoError(t, json.Unmarshal([]byte(`{"run_id": "r1", "goal": "refund", "limits": {"spend": {"EUR": 50000, "USD": 0}, "other_currencies": "allow"}}`), &sr))
	in, err := s.runInput(req, Identity{Name: "ops", Tenant: "acme", Role: RoleOperator}, sr)
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"EUR": 50000, "USD": 0}, in.Limits.Spend)
	assert.Equal(t, spend.OtherAllow, in.Limits.OtherCurrencies)
	require.NoError(t, json.Unmarshal([]byte(`{"run_id": "r1", "goal": "refund", "limits": {"spend": {"EUR": 1}, "other_currencies": "park"}}`), &sr))
	in, err = s.runInput(req, Identity{Name: "ops", Tenant: "acme", Role: RoleOperator}, sr)
	require.NoError(t, err)
	assert.Empty(t, in.Limits.OtherCurrencies, "park, the default, is the same input as none")

	for _, tc := range []struct{ name, spend, want string }{
		{"a fraction", `{"EUR": 1.5}`, "limits.spend.EUR is a number that does not fit; want a whole number"},
		{"a string", `{"EUR": "500"}`, "limits.spend.EUR is a string"},
		{"not an object", `[50000]`, "limits.spend is an array; want an object"},
		{"a negative", `{"EUR": -1}`, "limits.spend.EUR is -1: a budget is a whole number of minor units, from 0 to 1000000000000000"},
		{"too large", `{"EUR": 1000000000000001}`, "limits.spend.EUR is 1000000000000001: a budget is a whole number of minor units, from 0 to"},
		{"an unknown currency", `{"ZZZ": 100}`, `limits.spend: "ZZZ" is not an ISO 4217 currency code in upper case`},
		{"a lower-case currency", `{"eur": 100}`, `limits.spend: "eur" is not an ISO 4217 currency code in upper case`},
		{"no currency", `{"XXX": 100}`, `limits.spend: "XXX" is not an ISO 4217 currency code in upper case`},
		{"a number", `{"978": 100}`, `limits.spend: "978" is not an ISO 4217 currency code in upper case`},
		{"another rule", `{"EUR": 100}, "other_currencies": "count"`, `limits.other_currencies: "count" is neither park nor allow`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			status, _, body := e.Call("ops", http.MethodPost, "/v1/runs", `{"run_id": "r2", "goal": "refund", "limits": {"spend": `+tc.spend+`}}`)
			assert.Equal(t, http.StatusBadRequest, status, body)
			detail := errorOf(t, body)
			assert.Equal(t, "invalid_request", detail.Code)
			assert.Contains(t, detail.Message, tc.want)
		})
	}
}

// TestClientLimits: the API's Go client sets, lists and deletes limits; a
// refusal is an *APIError with its status.
func TestClientLimits(t *testing.T) {
	t.Parallel()
	e := setupAPI(t)
	c := &Client{BaseURL: e.srv.URL, Token: e.Tokens["ops"]}
	ctx := context.Background()

	l, err := c.SetLimit(ctx, "credits", LimitRequest{Tools: []string{"issue_credit"}, Currency: "EUR", Amount: 200000})
	require.NoError(t, err)
	assert.Equal(t, spend.PeriodDay, l.Period)
	ls, err := c.Limits(ctx)
	require.NoError(t, err)
	assert.Equal(t, []Limit{l}, ls)
	require.NoError(t, c.DeleteLimit(ctx, "credits"))

	err = c.DeleteLimit(ctx, "credits")
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, http.StatusNotFound, ae.Status)
	_, err = (&Client{BaseURL: e.srv.URL, Token: e.Tokens["vic"]}).SetLimit(ctx, "credits", LimitRequest{})
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, http.StatusForbidden, ae.Status)
}
