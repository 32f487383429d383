package spend_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/money"
	"github.com/oncerun/oncerun/internal/spend"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// FuzzCurrencyRules sends a currency and an amount through every rule a
// limit rests on: a call (tools.Registry.Prepare) and an approver's edit
// of it (PrepareEdit), what the call counts (spend.Of), a cap
// (spend.CheckCap) and a run's budget at its start (RunInput.Validate).
// Each takes exactly the currencies of the table, in one canonical form:
// no spelling is accepted by one rule and left uncounted by another.
func FuzzCurrencyRules(f *testing.F) {
	for _, code := range []string{"EUR", "eur", "Eur", "978", "€", "EURO", "XXX", "XTS", "ZZZ", "", " EUR", "JPY", "CLF", "ANG", "ＥＵＲ", "E\x00R"} {
		f.Add(code, int64(20000))
	}
	f.Add("KWD", int64(-1))
	f.Add("USD", int64(spend.MaxAmount+1))
	schema := `{"type":"object","properties":{"amount_cents":{"type":"integer"},"currency":{"type":"string"}},"required":["amount_cents"]}`
	voucher := tools.Tool{Name: "voucher", Schema: json.RawMessage(schema), Class: tools.ClassNatural, Edits: tools.EditAllowed,
		Run:     func(context.Context, tools.Call) (any, error) { return nil, nil },
		Amounts: []tools.Amount{{Field: "amount_cents", Currency: "currency"}}}
	calls, err := tools.NewRegistry(tools.RegistryConfig{}, voucher)
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, code string, amount int64) {
		c, known := money.Lookup(code)
		if known {
			assert.Equal(t, strings.ToUpper(code), c.Code)
		}
		quoted, _ := json.Marshal(code)
		args := []byte(`{"amount_cents":` + strconv.FormatInt(amount, 10) + `,"currency":` + string(quoted) + `}`)

		p, err := calls.Prepare(tools.ProposedCall{Tool: "voucher", Args: args})
		switch {
		case !known:
			require.ErrorIs(t, err, tools.ErrInvalidCall, "currency %q", code)
			if amount >= 0 {
				assert.Contains(t, err.Error(), "currency", "the refusal names the field")
			}
		case amount < 0:
			require.ErrorIs(t, err, tools.ErrInvalidCall, "an amount below zero")
		default:
			require.NoError(t, err, "currency %q", code)
		}
		_, editErr := calls.PrepareEdit("voucher", []byte(`{"amount_cents":1,"currency":"EUR"}`), args)
		assert.Equal(t, err == nil, editErr == nil, "an edit to the call is taken exactly when the call is: %v / %v", err, editErr)
		if err == nil {
			got, err := spend.Of(voucher, p.Args)
			if amount > spend.MaxAmount {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
				assert.Equal(t, spend.Amounts{c.Code: amount}, got, "a call taken counts, in the canonical currency")
			}
		}

		cp := spend.Cap{Name: "x", Tools: []string{"issue_credit"}, Currency: code, Amount: 1}
		err = spend.CheckCap(reg, &cp)
		assert.Equal(t, known, err == nil, "a cap in %q: %v", code, err)
		if known {
			assert.Equal(t, c.Code, cp.Currency)
		} else {
			assert.True(t, errors.Is(err, spend.ErrInvalid) && strings.Contains(err.Error(), ": currency: "), "%v", err)
		}

		in := workflows.RunInput{Tenant: "acme", RunID: "r1", Goal: "g", Limits: workflows.Limits{Spend: map[string]int64{code: amount}}}
		err = in.Validate()
		want := known && c.Code == code && amount >= 0 && amount <= spend.MaxAmount
		assert.Equal(t, want, err == nil, "a budget of %d %q: %v", amount, code, err)
		if err != nil {
			assert.Contains(t, err.Error(), "limits.spend")
		}
	})
}
