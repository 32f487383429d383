package inbox

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstest"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

func TestArgRows(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		raw  string
		want []argRow
	}{
		{
			name: "object keys sorted, strings as text, the rest as compact JSON",
			raw: `{
				"zone": "eu-west-1",
				"amount": 1250,
				"ratio": 1.50,
				"dry_run": true,
				"order": {"id" : "o-1",  "lines": [1, 2]},
				"note": "say \"hi\"\n",
				"empty": ""
			}`,
			want: []argRow{
				{Name: "amount", Value: "1250"},
				{Name: "dry_run", Value: "true"},
				{Name: "empty", Value: ""},
				{Name: "note", Value: "say \"hi\"\n"},
				{Name: "order", Value: `{"id":"o-1","lines":[1,2]}`},
				{Name: "ratio", Value: "1.50"},
				{Name: "zone", Value: "eu-west-1"},
			},
		},
		{
			name: "keys sorted bytewise",
			raw:  `{"b":"2","B":"1","a":"3"}`,
			want: []argRow{{Name: "B", Value: "1"}, {Name: "a", Value: "3"}, {Name: "b", Value: "2"}},
		},
		{
			name: "empty object has no rows",
			raw:  `{}`,
			want: []argRow{},
		},
		{
			name: "array is one row",
			raw:  `[1,2]`,
			want: []argRow{{Name: "(arguments)", Value: `[1,2]`}},
		},
		{
			name: "string is one row, shown as written",
			raw:  `"restart everything"`,
			want: []argRow{{Name: "(arguments)", Value: `"restart everything"`}},
		},
		{
			name: "number is one row",
			raw:  `42`,
			want: []argRow{{Name: "(arguments)", Value: `42`}},
		},
		{
			name: "a null argument shows as null, not as an empty string",
			raw:  `{"a":null,"b":""}`,
			want: []argRow{{Name: "a", Value: "null"}, {Name: "b", Value: ""}},
		},
		{
			name: "null arguments are one row",
			raw:  `null`,
			want: []argRow{{Name: "(arguments)", Value: `null`}},
		},
		{
			name: "not JSON is one row with the raw text",
			raw:  `{not json`,
			want: []argRow{{Name: "(arguments)", Value: `{not json`}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, argRows(json.RawMessage(tt.raw)))
		})
	}
}

func TestTimeLeft(t *testing.T) {
	t.Parallel()
	tests := []struct {
		seconds int64
		want    string
	}{
		{2*86400 + 4*3600 + 59*60, "2 d 4 h"},
		{3 * 86400, "3 d"},
		{3*3600 + 20*60 + 5, "3 h 20 min"},
		{5 * 3600, "5 h"},
		{45*60 + 59, "45 min"},
		{59, "less than a minute"},
		{0, ""},
		{-5, ""},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, approvals.TimeLeft(tt.seconds), "%d s", tt.seconds)
	}
	assert.Equal(t, "then it is rejected", expiryText(workflows.ExpiryReject))
	assert.Equal(t, "then it expires and does not run", expiryText(workflows.ExpiryExpire))
	assert.Equal(t, "then it expires and does not run", expiryText(""))
}

func TestArgChanges(t *testing.T) {
	t.Parallel()
	proposed := []argRow{{Name: "amount_cents", Value: "259.00 EUR"}, {Name: "note", Value: "x"}, {Name: "order_id", Value: "1001"}}
	ran := []argRow{{Name: "amount_cents", Value: "150.00 EUR"}, {Name: "order_id", Value: "1001"}, {Name: "reason", Value: "late"}}
	assert.Equal(t, []argChange{
		{Name: "amount_cents", Proposed: "259.00 EUR", Ran: "150.00 EUR"},
		{Name: "note", Proposed: "x"},
		{Name: "reason", Ran: "late"},
	}, argChanges(proposed, ran))
	assert.Empty(t, argChanges(proposed, proposed))
}

// toolsOnly is an API that knows tools and nothing else.
type toolsOnly struct {
	API
	reg *tools.Registry
}

func (a toolsOnly) Tool(name string) (tools.Tool, bool) {
	if a.reg == nil {
		return tools.Tool{}, false
	}
	return a.reg.Lookup(name)
}

// noTools is an inbox whose API knows no tool.
func noTools(t *testing.T) *Inbox {
	t.Helper()
	ib, err := New(Config{API: toolsOnly{}})
	require.NoError(t, err)
	return ib
}

// editServer is an inbox that knows the shop's tools and the test tools,
// for the edit form's pure functions.
func editServer(t *testing.T) *Inbox {
	t.Helper()
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, append(shop.Tools(shop.Config{}), approvalstest.TuneWidget, approvalstest.LockedTool)...)
	require.NoError(t, err)
	ib, err := New(Config{API: toolsOnly{reg: reg}})
	require.NoError(t, err)
	return ib
}

func TestEditFormOf(t *testing.T) {
	t.Parallel()
	s := editServer(t)

	credit := s.editFormOf("issue_credit", json.RawMessage(`{"amount_cents":25900,"currency":"EUR","order_id":"1001","reason":"damaged"}`), nil)
	require.NotNil(t, credit)
	assert.Contains(t, credit.Rule, "amount_cents may only be lowered")
	assert.Equal(t, []editField{
		{Name: "amount_cents", Input: inputMoney, Value: "259.00", Currency: "EUR",
			Hint: "Amount in EUR, with up to 2 decimals; proposed 259.00 EUR. May only be lowered."},
		{Name: "currency", Input: inputText, Value: "EUR", Hint: "The currency cannot change.", ReadOnly: true},
		{Name: "order_id", Input: inputText, Value: "1001"},
		{Name: "reason", Input: inputText, Value: "damaged"},
	}, credit.Fields)
	assert.False(t, credit.Open)

	yen := s.editFormOf("issue_credit", json.RawMessage(`{"amount_cents":25900,"currency":"JPY","order_id":"1001","reason":"damaged"}`), nil)
	require.NotNil(t, yen)
	assert.Equal(t, editField{Name: "amount_cents", Input: inputMoney, Value: "25900", Currency: "JPY",
		Hint: "Amount in JPY, in whole units; proposed 25,900 JPY. May only be lowered."}, yen.Fields[0])

	widget := s.editFormOf("tune_widget", json.RawMessage(`{"name":"a\nb","count":3,"ratio":1.5,"enabled":true,"labels":{"k":"v"},"note":null}`), nil)
	require.NotNil(t, widget)
	inputs := map[string]string{}
	for _, f := range widget.Fields {
		inputs[f.Name] = f.Input
	}
	assert.Equal(t, map[string]string{"name": inputTextarea, "count": inputInteger, "ratio": inputNumber, "enabled": inputBool,
		"labels": inputJSON, "note": inputText}, inputs)
	assert.Equal(t, "You may change any argument, within the tool's schema.", widget.Rule)

	again := s.editFormOf("issue_credit", json.RawMessage(`{"amount_cents":25900,"currency":"EUR","order_id":"1001","reason":"damaged"}`),
		url.Values{"arg.amount_cents": {"300.00"}, "comment": {"more"}})
	require.NotNil(t, again)
	assert.True(t, again.Open, "a refused form comes back open")
	assert.Equal(t, "300.00", again.Fields[0].Value, "with what was typed")
	assert.Equal(t, "more", again.Comment)

	assert.Nil(t, s.editFormOf("restart_cluster", json.RawMessage(`{"zone":"eu"}`), nil), "the tool forbids edits")
	assert.Nil(t, s.editFormOf("no_such_tool", json.RawMessage(`{"zone":"eu"}`), nil), "a tool the server does not know")
	assert.Nil(t, noTools(t).editFormOf("issue_credit", json.RawMessage(`{"amount_cents":1}`), nil), "a server without tools")
}

func TestEditArgs(t *testing.T) {
	t.Parallel()
	s := editServer(t)
	credit := json.RawMessage(`{"amount_cents":25900,"currency":"EUR","order_id":"1001","reason":"damaged"}`)
	widget := json.RawMessage(`{"name":"w","count":3,"ratio":1.5,"enabled":true,"labels":{"k":"v"},"note":"n"}`)
	tests := []struct {
		name     string
		tool     string
		proposed json.RawMessage
		form     url.Values
		want     string
		err      string
	}{
		{
			name: "an amount typed in euros is sent in cents, as a JSON integer",
			tool: "issue_credit", proposed: credit,
			form: url.Values{"arg.amount_cents": {"150.5"}, "arg.currency": {"EUR"}, "arg.order_id": {"1001"}, "arg.reason": {"damaged"}},
			want: `{"amount_cents":15050,"currency":"EUR","order_id":"1001","reason":"damaged"}`,
		},
		{
			name: "an amount in yen has no decimals",
			tool: "issue_credit", proposed: json.RawMessage(`{"amount_cents":25900,"currency":"JPY","order_id":"1","reason":"r"}`),
			form: url.Values{"arg.amount_cents": {"20000"}},
			want: `{"amount_cents":20000,"currency":"JPY","order_id":"1","reason":"r"}`,
		},
		{
			name: "an amount in an unknown currency is in minor units",
			tool: "issue_credit", proposed: json.RawMessage(`{"amount_cents":25900,"currency":"ZZZ","order_id":"1","reason":"r"}`),
			form: url.Values{"arg.amount_cents": {"20000"}},
			want: `{"amount_cents":20000,"currency":"ZZZ","order_id":"1","reason":"r"}`,
		},
		{
			name: "a field left out of the form keeps its proposed value",
			tool: "issue_credit", proposed: credit,
			form: url.Values{"arg.amount_cents": {"99"}},
			want: `{"amount_cents":9900,"currency":"EUR","order_id":"1001","reason":"damaged"}`,
		},
		{
			name: "an amount with too many decimals names the field",
			tool: "issue_credit", proposed: credit,
			form: url.Values{"arg.amount_cents": {"1.005"}},
			err:  `amount_cents: amount in EUR: "1.005" has 3 decimals; the currency has 2`,
		},
		{
			name: "each JSON type from its input",
			tool: "tune_widget", proposed: widget,
			form: url.Values{"arg.name": {"two\r\nlines"}, "arg.count": {" 7 "}, "arg.ratio": {"2.25"}, "arg.enabled": {"false"},
				"arg.labels": {`{"k": "w"}`}, "arg.note": {""}},
			want: `{"count":7,"enabled":false,"labels":{"k":"w"},"name":"two\nlines","note":"","ratio":2.25}`,
		},
		{
			name: "an emptied integer is left out, for the schema to name",
			tool: "tune_widget", proposed: widget,
			form: url.Values{"arg.count": {""}},
			want: `{"enabled":true,"labels":{"k":"v"},"name":"w","note":"n","ratio":1.5}`,
		},
		{
			name: "an integer that is not one names the field",
			tool: "tune_widget", proposed: widget,
			form: url.Values{"arg.count": {"3.5"}},
			err:  `count: "3.5" is not a whole number`,
		},
		{
			name: "a number that is not one names the field",
			tool: "tune_widget", proposed: widget,
			form: url.Values{"arg.ratio": {"NaN"}},
			err:  `ratio: "NaN" is not a number`,
		},
		{
			name: "JSON that is not JSON names the field",
			tool: "tune_widget", proposed: widget,
			form: url.Values{"arg.labels": {`{"k":`}},
			err:  `labels: not valid JSON`,
		},
		{
			name: "a boolean that is not one names the field",
			tool: "tune_widget", proposed: widget,
			form: url.Values{"arg.enabled": {"yes"}},
			err:  `enabled: "yes" is not true or false`,
		},
		{
			name: "a text that is not UTF-8 names the field, not turned into U+FFFD",
			tool: "tune_widget", proposed: widget,
			form: url.Values{"arg.name": {"a\xffb"}},
			err:  `name is not valid UTF-8 (at byte 1)`,
		},
		{
			name: "JSON that is not UTF-8 names the field",
			tool: "tune_widget", proposed: widget,
			form: url.Values{"arg.labels": {`{"k":"` + "\xc3" + `"}`}},
			err:  `labels is not valid UTF-8 (at byte 6)`,
		},
		{
			name: "the whole arguments as JSON, not UTF-8",
			tool: "issue_credit", proposed: credit,
			form: url.Values{"args": {`{"reason":"` + "\xff" + `"}`}},
			err:  `args is not valid UTF-8 (at byte 11)`,
		},
		{
			name: "the whole arguments as JSON",
			tool: "issue_credit", proposed: credit,
			form: url.Values{"args": {`{"amount_cents":100,"currency":"EUR","order_id":"1001","reason":"damaged"}`}, "arg.amount_cents": {"5"}},
			want: `{"amount_cents":100,"currency":"EUR","order_id":"1001","reason":"damaged"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := s.editArgs(tt.tool, tt.proposed, tt.form)
			if tt.err != "" {
				require.Error(t, err)
				assert.Equal(t, tt.err, err.Error())
				return
			}
			require.NoError(t, err)
			assert.JSONEq(t, tt.want, string(got))
			assert.Equal(t, tt.want, string(got), "integers stay integers, keys sorted")
		})
	}
}

func TestResultLine(t *testing.T) {
	t.Parallel()
	s := editServer(t)
	assert.Equal(t, "amount_cents: 150.00 EUR · created: true · currency: EUR · order_id: 1001",
		s.resultLine("issue_credit", json.RawMessage(`{"order_id":"1001","amount_cents":15000,"currency":"EUR","created":true,"lines":[1,2]}`)))
	assert.Equal(t, "[1,2,3]", s.resultLine("lookup_order", json.RawMessage(`[1, 2, 3]`)))
	assert.Equal(t, "", s.resultLine("lookup_order", nil))
	long := s.resultLine("lookup_order", json.RawMessage(`{"text":"`+strings.Repeat("x", 400)+`"}`))
	assert.Equal(t, "text: "+strings.Repeat("x", resultLineBytes-len("text: "))+"…", long, "cut, and says so")
}
