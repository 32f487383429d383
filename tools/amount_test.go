package tools_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/tools"
)

// voucherSchema has an amount with no bound, as many MCP servers declare
// theirs; ledgerSchema's amount may be below zero (a debit or a credit).
const (
	voucherSchema = `{"type":"object","properties":{"amount_cents":{"type":"integer"},"currency":{"type":"string"},"note":{"type":"string"}}}`
	ledgerSchema  = `{"type":"object","properties":{"amount_cents":{"type":"integer","minimum":-1000000},"currency":{"type":"string"}}}`
)

func amountTool(name, schema string, rule tools.EditRule) tools.Tool {
	return tools.Tool{Name: name, Schema: json.RawMessage(schema), Class: tools.ClassNatural, Run: noop,
		Edits: rule, Amounts: []tools.Amount{{Field: "amount_cents", Currency: "currency"}}}
}

func TestAToolWithAmountsAndNoEditRuleMayNotRaiseThem(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry(tools.RegistryConfig{},
		amountTool("voucher", voucherSchema, tools.EditDefault), amountTool("loose", voucherSchema, tools.EditAllowed),
		tools.Tool{Name: "plain", Schema: json.RawMessage(voucherSchema), Class: tools.ClassNatural, Run: noop})
	require.NoError(t, err)
	for name, want := range map[string]tools.EditRule{"voucher": tools.EditNoIncrease, "loose": tools.EditAllowed, "plain": tools.EditAllowed} {
		tool, ok := reg.Lookup(name)
		require.True(t, ok)
		assert.Equal(t, want, tool.Edits, name)
	}
	_, err = reg.PrepareEdit("voucher", []byte(`{"amount_cents":5000,"currency":"EUR"}`), []byte(`{"amount_cents":5001,"currency":"EUR"}`))
	require.ErrorIs(t, err, tools.ErrEditRefused)
	_, err = reg.PrepareEdit("loose", []byte(`{"amount_cents":5000,"currency":"EUR"}`), []byte(`{"amount_cents":9000,"currency":"EUR"}`))
	require.NoError(t, err, "loosening the rule is written down, and then holds")
}

func TestAnAmountBelowZeroIsRefusedUnlessTheSchemaAllowsIt(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry(tools.RegistryConfig{},
		amountTool("voucher", voucherSchema, tools.EditDefault), amountTool("ledger", ledgerSchema, tools.EditDefault))
	require.NoError(t, err)

	_, err = reg.Prepare(tools.ProposedCall{Tool: "voucher", Args: json.RawMessage(`{"amount_cents":-999999,"currency":"EUR"}`)})
	require.ErrorIs(t, err, tools.ErrInvalidCall)
	assert.Contains(t, err.Error(), "amount_cents is -999999: an amount is at least 0")
	_, err = reg.Prepare(tools.ProposedCall{Tool: "voucher", Args: json.RawMessage(`{"amount_cents":0,"currency":"EUR"}`)})
	require.NoError(t, err)
	_, err = reg.Prepare(tools.ProposedCall{Tool: "ledger", Args: json.RawMessage(`{"amount_cents":-5000,"currency":"EUR"}`)})
	require.NoError(t, err, "the schema's negative minimum allows it")
}

func TestNoIncreaseIsARuleOnValues(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry(tools.RegistryConfig{},
		amountTool("voucher", voucherSchema, tools.EditNoIncrease), amountTool("ledger", ledgerSchema, tools.EditNoIncrease))
	require.NoError(t, err)
	for _, tc := range []struct {
		name, tool, proposed, edited string
		refused                      string // "" when the edit passes
	}{
		{"sign flipped", "voucher", `{"amount_cents":5000,"currency":"EUR"}`, `{"amount_cents":-999999,"currency":"EUR"}`,
			"amount_cents is -999999: an amount is at least 0"},
		{"lowered to zero", "voucher", `{"amount_cents":5000,"currency":"EUR"}`, `{"amount_cents":0,"currency":"EUR"}`, ""},
		{"added where none was proposed", "voucher", `{"currency":"EUR","note":"n"}`, `{"amount_cents":100,"currency":"EUR","note":"n"}`,
			"amount_cents may not be added in an edit of voucher: none was proposed, 100 asked"},
		{"left out", "voucher", `{"amount_cents":5000,"currency":"EUR"}`, `{"currency":"EUR"}`,
			"amount_cents may not be left out in an edit of voucher: 5000 was proposed"},
		{"beyond 64 bits", "voucher", `{"amount_cents":5000,"currency":"EUR"}`, `{"amount_cents":100000000000000000000,"currency":"EUR"}`,
			"amount_cents may not increase"},
		{"a debit lowered", "ledger", `{"amount_cents":-5000,"currency":"EUR"}`, `{"amount_cents":-4000,"currency":"EUR"}`, ""},
		{"a debit raised", "ledger", `{"amount_cents":-5000,"currency":"EUR"}`, `{"amount_cents":-6000,"currency":"EUR"}`,
			"amount_cents may not increase in an edit of ledger: -5000 was proposed, -6000 asked"},
		{"a debit made a credit", "ledger", `{"amount_cents":-5000,"currency":"EUR"}`, `{"amount_cents":10,"currency":"EUR"}`,
			"amount_cents may not change sign in an edit of ledger: -5000 was proposed, 10 asked"},
		{"a credit made a debit", "ledger", `{"amount_cents":5000,"currency":"EUR"}`, `{"amount_cents":-10,"currency":"EUR"}`,
			"may not change sign"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := reg.PrepareEdit(tc.tool, []byte(tc.proposed), []byte(tc.edited))
			if tc.refused == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.refused)
		})
	}
}

// Limits fail closed: an amount whose currency no limit could count is an
// invalid call, proposed or edited, naming the field.
func TestAnAmountWhoseCurrencyIsNoCurrencyIsAnInvalidCall(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, amountTool("voucher", voucherSchema, tools.EditAllowed))
	require.NoError(t, err)
	for _, tc := range []struct{ args, says string }{
		{`{"amount_cents":20000,"currency":"978"}`, `currency is "978": not an ISO 4217 currency code`},
		{`{"amount_cents":20000,"currency":"€"}`, `currency is "€": not an ISO 4217 currency code`},
		{`{"amount_cents":20000,"currency":"EURO"}`, `currency is "EURO": not an ISO 4217 currency code`},
		{`{"amount_cents":20000,"currency":"XXX"}`, `currency is "XXX": not an ISO 4217 currency code`},
		{`{"amount_cents":20000,"currency":"XTS"}`, `currency is "XTS": not an ISO 4217 currency code`},
		{`{"amount_cents":20000,"currency":"ZZZ"}`, `currency is "ZZZ": not an ISO 4217 currency code`},
		{`{"amount_cents":20000,"currency":""}`, `currency is "": not an ISO 4217 currency code`},
		{`{"amount_cents":20000,"currency":" EUR"}`, `currency is " EUR": not an ISO 4217 currency code`},
		{`{"amount_cents":20000}`, "currency is missing: amount amount_cents needs the ISO 4217 code of its currency"},
	} {
		_, err := reg.Prepare(tools.ProposedCall{Tool: "voucher", Args: json.RawMessage(tc.args)})
		require.ErrorIs(t, err, tools.ErrInvalidCall, tc.args)
		assert.Contains(t, err.Error(), tc.says, tc.args)
		_, err = reg.PrepareEdit("voucher", []byte(`{"amount_cents":20000,"currency":"EUR"}`), []byte(tc.args))
		require.ErrorIs(t, err, tools.ErrInvalidCall, "an edit to %s", tc.args)
	}
	for _, args := range []string{`{"amount_cents":20000,"currency":"eur"}`, `{"amount_cents":20000,"currency":"EUR"}`,
		`{"currency":"nothing to count"}`} {
		_, err := reg.Prepare(tools.ProposedCall{Tool: "voucher", Args: json.RawMessage(args)})
		require.NoError(t, err, args)
	}
}
