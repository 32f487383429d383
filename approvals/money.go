package approvals

import (
	"encoding/json"

	"github.com/oncerun/oncerun/internal/money"

	"github.com/oncerun/oncerun/tools"
)

// formatMoney is the money package's.
var formatMoney = money.Format

// Money is an amount a tool declares (tools.Amount) as a call's arguments
// hold it: the field, its value in minor units, the currency, and the
// amount written as money ("259.00 EUR").
type Money struct {
	Field    string `json:"field"`
	Minor    int64  `json:"minor"`
	Currency string `json:"currency,omitempty"`
	Text     string `json:"text"`
}

// declared is the tool's amounts in obj, in the order the tool declares
// them; a field without an integer value is left out.
func declared(t tools.Tool, obj map[string]json.RawMessage) []Money {
	var out []Money
	for _, a := range t.Amounts {
		minor, code, ok := money.Field(obj, a.Field, a.Currency)
		if !ok {
			continue
		}
		out = append(out, Money{Field: a.Field, Minor: minor, Currency: code, Text: formatMoney(minor, code)})
	}
	return out
}

// DeclaredAmounts is the amounts tool t declares, read from a call's
// arguments: what a list of steps shows as money beside the arguments.
// Arguments that are not an object hold none.
func DeclaredAmounts(t tools.Tool, args json.RawMessage) []Money {
	var obj map[string]json.RawMessage
	if json.Unmarshal(args, &obj) != nil {
		return nil
	}
	return declared(t, obj)
}
