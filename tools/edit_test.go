package tools_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/tools"
)

const moneySchema = `{"type":"object","properties":{
	"order_id":{"type":"string"},"amount_cents":{"type":"integer","minimum":1},"currency":{"type":"string"}},
	"required":["order_id","amount_cents","currency"],"additionalProperties":false}`

// moneyTool is a natural tool over moneySchema with edit rule rule.
func moneyTool(name string, rule tools.EditRule) tools.Tool {
	return tools.Tool{Name: name, Schema: json.RawMessage(moneySchema), Class: tools.ClassNatural, Run: noop,
		Edits: rule, Amounts: []tools.Amount{{Field: "amount_cents", Currency: "currency"}}}
}

func TestPrepareEditFollowsTheToolsRule(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry(tools.RegistryConfig{},
		moneyTool("down_only", tools.EditNoIncrease), moneyTool("any", tools.EditAllowed), moneyTool("fixed", tools.EditForbidden))
	require.NoError(t, err)
	proposed := []byte(`{"amount_cents":25900,"currency":"EUR","order_id":"o-1"}`)
	for _, tc := range []struct {
		name, tool, edited string
		// refused is what the refusal says, "" when the edit passes.
		refused string
		is      error
	}{
		{"lowered", "down_only", `{"order_id":"o-1","currency":"EUR","amount_cents":15000}`, "", nil},
		{"unchanged", "down_only", `{"order_id":"o-1","currency":"EUR","amount_cents":25900}`, "", nil},
		{"raised", "down_only", `{"order_id":"o-1","currency":"EUR","amount_cents":25901}`,
			"amount_cents may not increase in an edit of down_only: 25900 was proposed, 25901 asked", tools.ErrEditRefused},
		{"currency changed", "down_only", `{"order_id":"o-1","currency":"USD","amount_cents":100}`,
			`currency may not change in an edit of down_only: "EUR" was proposed, "USD" asked`, tools.ErrEditRefused},
		{"raised where any edit goes", "any", `{"order_id":"o-1","currency":"USD","amount_cents":99999}`, "", nil},
		{"not the schema", "any", `{"order_id":"o-1","currency":"EUR","amount_cents":0}`, "at /amount_cents", tools.ErrInvalidCall},
		{"unknown field", "down_only", `{"order_id":"o-1","currency":"EUR","amount_cents":1,"tip":5}`, "tip", tools.ErrInvalidCall},
		{"not an object", "any", `[1]`, "must be a JSON object", tools.ErrInvalidCall},
		{"no edits", "fixed", `{"order_id":"o-1","currency":"EUR","amount_cents":1}`, "fixed does not allow edits", tools.ErrEditRefused},
		{"unknown tool", "nope", `{}`, `unknown tool "nope"`, tools.ErrInvalidCall},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := reg.PrepareEdit(tc.tool, proposed, []byte(tc.edited))
			if tc.refused != "" {
				require.ErrorIs(t, err, tc.is)
				assert.Contains(t, err.Error(), tc.refused)
				return
			}
			require.NoError(t, err)
			want, err := reg.Prepare(tools.ProposedCall{Tool: tc.tool, Args: json.RawMessage(tc.edited)})
			require.NoError(t, err)
			assert.Equal(t, want.Args, p.Args, "the edit in canonical JSON")
			assert.Equal(t, want.ArgsHash, p.ArgsHash)
		})
	}
}

func TestNewRegistryChecksEditRulesAndAmounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(*tools.Tool)
		want   string
	}{
		{"no increase without an amount", func(tl *tools.Tool) { tl.Amounts = nil }, "names no amount field"},
		{"amount not in the schema", func(tl *tools.Tool) { tl.Amounts = []tools.Amount{{Field: "total"}} },
			`amount field "total" is not an integer property`},
		{"amount not an integer", func(tl *tools.Tool) { tl.Amounts = []tools.Amount{{Field: "order_id"}} },
			`amount field "order_id" is not an integer property`},
		{"currency not a string", func(tl *tools.Tool) {
			tl.Amounts = []tools.Amount{{Field: "amount_cents", Currency: "amount_cents"}}
		}, `currency field "amount_cents" of amount "amount_cents" is not a string property`},
		{"unknown rule", func(tl *tools.Tool) { tl.Edits = 7 }, "unknown edit rule 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tl := moneyTool("pay", tools.EditNoIncrease)
			tc.change(&tl)
			_, err := tools.NewRegistry(tools.RegistryConfig{}, tl)
			require.ErrorIs(t, err, tools.ErrInvalidTool)
			assert.Contains(t, err.Error(), "tool pay: ")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestOncePerRunIsTheDefaultOfKeyedAndExternalTools(t *testing.T) {
	t.Parallel()
	for class, want := range map[tools.Class]bool{
		tools.ClassRead: false, tools.ClassNatural: false, tools.ClassKeyed: true, tools.ClassExternal: true,
	} {
		assert.Equal(t, want, tools.Tool{Class: class}.OncePerRun(), "class %s", class)
		assert.False(t, tools.Tool{Class: class, Repeatable: true}.OncePerRun(), "class %s, repeatable", class)
	}
}
