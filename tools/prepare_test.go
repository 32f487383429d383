package tools_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
)

// shopRegistry returns the built-in tools' registry with cfg.
func shopRegistry(t *testing.T, cfg shop.Config) *tools.Registry {
	t.Helper()
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, shop.Tools(cfg)...)
	require.NoError(t, err)
	return reg
}

func call(tool, args string) planner.Call {
	return planner.Call{Tool: tool, Args: json.RawMessage(args)}
}

func TestPrepareRefuses(t *testing.T) {
	t.Parallel()
	reg := shopRegistry(t, shop.Config{})
	tests := []struct {
		name string
		call planner.Call
		want []string
	}{
		{"unknown tool", call("refund_payment", `{}`), []string{`unknown tool "refund_payment"`, "known: add_order_note, get_credit, issue_credit, lookup_order"}},
		{"malformed", planner.Call{Tool: shop.ToolLookupOrder, Malformed: `{"order_id": 1001`}, []string{"arguments of lookup_order are not valid JSON"}},
		{"not JSON", call(shop.ToolLookupOrder, `{"order_id":`), []string{"arguments of lookup_order", "invalid tool arguments"}},
		{"duplicate member", call(shop.ToolLookupOrder, `{"order_id":"1","order_id":"2"}`), []string{"arguments of lookup_order", "invalid tool arguments"}},
		{"array", call(shop.ToolLookupOrder, `["1001"]`), []string{"arguments of lookup_order must be a JSON object"}},
		{"string", call(shop.ToolLookupOrder, `"1001"`), []string{"must be a JSON object"}},
		{"empty means no arguments", call(shop.ToolLookupOrder, ``), []string{"do not match its schema", "missing property 'order_id'"}},
		{"wrong type", call(shop.ToolIssueCredit, `{"order_id":"1001","reason":"damaged","amount_cents":"500","currency":"EUR"}`), []string{"do not match its schema", "at /amount_cents"}},
		{"below minimum", call(shop.ToolIssueCredit, `{"order_id":"1001","reason":"damaged","amount_cents":0,"currency":"EUR"}`), []string{"at /amount_cents"}},
		{"not an integer", call(shop.ToolIssueCredit, `{"order_id":"1001","reason":"damaged","amount_cents":1.5,"currency":"EUR"}`), []string{"at /amount_cents"}},
		{"bad pattern", call(shop.ToolIssueCredit, `{"order_id":"1001","reason":"damaged","amount_cents":500,"currency":"eur"}`), []string{"at /currency"}},
		{"missing property", call(shop.ToolIssueCredit, `{"order_id":"1001","reason":"damaged","currency":"EUR"}`), []string{"missing property 'amount_cents'"}},
		{"extra property", call(shop.ToolAddOrderNote, `{"order_id":"1001","text":"hi","urgent":true}`), []string{"additional properties 'urgent'"}},
		{"several mismatches", call(shop.ToolAddOrderNote, `{"order_id":7,"text":""}`), []string{"at /order_id", "at /text"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := reg.Prepare(tt.call)
			require.ErrorIs(t, err, tools.ErrInvalidCall)
			assert.Zero(t, p)
			for _, want := range tt.want {
				assert.Contains(t, err.Error(), want)
			}
		})
	}
}

func TestPrepareCanonicalizes(t *testing.T) {
	t.Parallel()
	reg := shopRegistry(t, shop.Config{})
	const canonical = `{"amount_cents":500,"currency":"EUR","order_id":"1001","reason":"damaged"}`
	variants := []string{
		canonical,
		`{"reason":"damaged","order_id":"1001","currency":"EUR","amount_cents":500}`,
		"{\n  \"order_id\" : \"1001\",\t\"reason\":\"damaged\",\n \"amount_cents\": 5E2, \"currency\":\"\\u0045UR\" }",
	}
	sum := sha256.Sum256([]byte(canonical))
	for _, args := range variants {
		p, err := reg.Prepare(call(shop.ToolIssueCredit, args))
		require.NoError(t, err, args)
		assert.Equal(t, canonical, string(p.Args), args)
		assert.Equal(t, hex.EncodeToString(sum[:]), p.ArgsHash, args)
		assert.Equal(t, shop.ToolIssueCredit, p.Tool.Name)
		assert.Equal(t, tools.DefaultTimeout, p.Tool.Timeout)
	}

	other, err := reg.Prepare(call(shop.ToolIssueCredit, `{"amount_cents":501,"currency":"EUR","order_id":"1001","reason":"damaged"}`))
	require.NoError(t, err)
	assert.NotEqual(t, hex.EncodeToString(sum[:]), other.ArgsHash)
}

func TestPrepareCreditApproval(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		cfg        shop.Config
		amount     string
		need       bool
		wantReason string
	}{
		{"above default threshold", shop.Config{}, "10001", true, "amount_cents above 10000"},
		{"at default threshold", shop.Config{}, "10000", false, ""},
		{"below default threshold", shop.Config{}, "1", false, ""},
		{"above custom threshold", shop.Config{CreditApprovalThresholdCents: 500}, "501", true, "amount_cents above 500"},
		{"at custom threshold", shop.Config{CreditApprovalThresholdCents: 500}, "500", false, ""},
		{"negative threshold approves every credit", shop.Config{CreditApprovalThresholdCents: -1}, "1", true, "amount_cents above -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reg := shopRegistry(t, tt.cfg)
			p, err := reg.Prepare(call(shop.ToolIssueCredit, `{"order_id":"1001","reason":"damaged","currency":"EUR","amount_cents":`+tt.amount+`}`))
			require.NoError(t, err)
			assert.Equal(t, tt.need, p.NeedsApproval)
			assert.Equal(t, tt.wantReason, p.ApprovalReason)
		})
	}
}

func TestPrepareApprovalRules(t *testing.T) {
	t.Parallel()
	bigNote := func(args json.RawMessage) (bool, error) {
		var a struct{ Text string }
		if err := json.Unmarshal(args, &a); err != nil {
			return false, err
		}
		return len(a.Text) > 3, nil
	}
	failing := func(json.RawMessage) (bool, error) { return false, errors.New("rule engine down") }
	tests := []struct {
		name       string
		rule       tools.ApprovalRule
		text       string
		need       bool
		wantReason string
		wantErr    string
	}{
		{"zero value", tools.ApprovalRule{}, "hello", false, "", ""},
		{"never", tools.Never(), "hello", false, "", ""},
		{"always", tools.Always(), "hi", true, "every call needs approval", ""},
		{"when, holds", tools.When("text longer than 3 bytes", bigNote), "hello", true, "text longer than 3 bytes", ""},
		{"when, does not hold", tools.When("text longer than 3 bytes", bigNote), "hi", false, "", ""},
		{"when, fails", tools.When("asks the rule engine", failing), "hi", false, "", "approval rule of note: rule engine down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reg, err := tools.NewRegistry(tools.RegistryConfig{}, tools.Tool{
				Name: "note", Class: tools.ClassKeyed, Run: noop, Approval: tt.rule,
				Schema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`),
			})
			require.NoError(t, err)
			p, err := reg.Prepare(call("note", `{"text":"`+tt.text+`"}`))
			if tt.wantErr != "" {
				require.ErrorIs(t, err, tools.ErrInvalidCall)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.need, p.NeedsApproval)
			assert.Equal(t, tt.wantReason, p.ApprovalReason)
		})
	}
}

func TestApprovalRuleString(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "never", tools.Never().String())
	assert.Equal(t, "always", tools.Always().String())
	assert.Equal(t, "when amount above 5", tools.When("amount above 5", nil).String())
}
