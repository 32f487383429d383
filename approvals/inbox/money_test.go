package inbox

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/money"
	"github.com/oncerun/oncerun/tools"
)

func TestParseAmount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in    string
		scale int
		want  int64
		err   string
	}{
		{"150", 2, 15000, ""},
		{"150.5", 2, 15050, ""},
		{" 150.50 ", 2, 15050, ""},
		{"0.05", 2, 5, ""},
		{"-3.25", 2, -325, ""},
		{"0", 2, 0, ""},
		{"25900", 0, 25900, ""},
		{"1.234", 3, 1234, ""},
		{"150.005", 2, 0, "has 3 decimals; the currency has 2"},
		{"1.5", 0, 0, "has 1 decimals; the currency has 0"},
		{"1,500.00", 2, 0, "without thousands separators"},
		{"150,00", 2, 0, "without thousands separators"},
		{"abc", 2, 0, "is not an amount"},
		{"1.", 2, 0, "is not an amount"},
		{".5", 2, 0, "is not an amount"},
		{"1e3", 2, 0, "is not an amount"},
		{"", 2, 0, "no amount"},
		{"99999999999999999999", 2, 0, "too large"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := parseAmount(tt.in, tt.scale)
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseAmountRoundTripsFormat(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"EUR", "JPY", "KWD"} {
		scale, _, ok := money.Scale(code)
		require.True(t, ok, code)
		for _, minor := range []int64{0, 1, 5, 99, 100, 25900, 123456789, -25950} {
			got, err := parseAmount(money.Decimal(minor, scale, false), scale)
			require.NoError(t, err, "%d %s", minor, code)
			assert.Equal(t, minor, got, "%d %s", minor, code)
		}
	}
}

func TestMoneyValues(t *testing.T) {
	t.Parallel()
	tool := tools.Tool{Name: "issue_credit", Amounts: []tools.Amount{{Field: "amount_cents", Currency: "currency"}}}
	obj := func(raw string) map[string]json.RawMessage {
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(raw), &m))
		return m
	}
	assert.Equal(t, map[string]string{"amount_cents": "259.00 EUR"},
		moneyValues(tool, obj(`{"amount_cents": 25900, "currency": "EUR", "order_id": "1001"}`)))
	assert.Equal(t, map[string]string{"amount_cents": "25900"},
		moneyValues(tool, obj(`{"amount_cents": 25900}`)), "no currency: the integer as it is")
	assert.Nil(t, moneyValues(tool, obj(`{"amount_cents": "25900", "currency": "EUR"}`)), "not an integer: not money")
	assert.Nil(t, moneyValues(tool, obj(`{"amount_cents": 259.5, "currency": "EUR"}`)))
	assert.Nil(t, moneyValues(tools.Tool{Name: "lookup_order"}, obj(`{"amount_cents": 25900, "currency": "EUR"}`)),
		"a tool that declares no amounts")
}
