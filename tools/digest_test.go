package tools_test

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/tools"
)

// digestTools are a registry's tools for the digest tests: a payment tool
// with a paired read, and a keyed one with an amount.
func digestTools() []tools.Tool {
	pay := tool("pay", tools.ClassExternal)
	pay.Schema = json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"},"amount_cents":{"type":"integer"},"currency":{"type":"string"}}}`)
	pay.Amounts = []tools.Amount{{Field: "amount_cents", Currency: "currency"}}
	pay.PairedRead = "find_payment"
	pay.KeyLifetime = 24 * time.Hour
	pay.Approval = tools.When("amount_cents above 10000", always)
	return []tools.Tool{pay, tool("find_payment", tools.ClassRead), tool("note", tools.ClassKeyed)}
}

func always(json.RawMessage) (bool, error) { return true, nil }

func digestOf(t *testing.T, ts []tools.Tool, more func(string) any) tools.Digest {
	t.Helper()
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, ts...)
	require.NoError(t, err)
	d, err := reg.Digest(more)
	require.NoError(t, err)
	return d
}

// TestDigestChangesWithEachIngredient: changing any part of a tool's
// definition changes that tool's digest and the registry's, and no other
// tool's.
func TestDigestChangesWithEachIngredient(t *testing.T) {
	t.Parallel()
	base := digestOf(t, digestTools(), nil)
	assert.Regexp(t, regexp.MustCompile(`^[0-9a-f]{64}$`), base.Registry)
	assert.Equal(t, base.Registry[:12], base.Short())
	require.Len(t, base.Tools, 3)

	for name, c := range map[string]struct {
		tool   string
		change func(*tools.Tool)
	}{
		"class":            {"note", func(t *tools.Tool) { t.Class = tools.ClassNatural }},
		"schema":           {"note", func(t *tools.Tool) { t.Schema = json.RawMessage(`{"type":"object"}`) }},
		"approval always":  {"note", func(t *tools.Tool) { t.Approval = tools.Always() }},
		"approval rule":    {"pay", func(t *tools.Tool) { t.Approval = tools.When("amount_cents above 50000", always) }},
		"edit rule":        {"pay", func(t *tools.Tool) { t.Edits = tools.EditForbidden }},
		"amounts":          {"pay", func(t *tools.Tool) { t.Amounts = []tools.Amount{{Field: "amount_cents"}} }},
		"paired read":      {"pay", func(t *tools.Tool) { t.PairedRead = "" }},
		"key lifetime":     {"pay", func(t *tools.Tool) { t.KeyLifetime = time.Hour }},
		"repeatable":       {"note", func(t *tools.Tool) { t.Repeatable = true }},
		"in database":      {"find_payment", func(t *tools.Tool) { t.InDatabase = true }},
		"guarantee":        {"pay", func(t *tools.Tool) { t.PairedRead, t.KeyLifetime = "", 0 }},
		"timeout":          {"note", func(t *tools.Tool) { t.Timeout = time.Minute }},
		"retention":        {"note", func(t *tools.Tool) { t.Retention = 60 * 24 * time.Hour }},
		"a schema's value": {"find_payment", func(t *tools.Tool) { t.Schema = json.RawMessage(`{"type":"object","required":[]}`) }},
	} {
		ts := digestTools()
		for i := range ts {
			if ts[i].Name == c.tool {
				c.change(&ts[i])
			}
		}
		d := digestOf(t, ts, nil)
		assert.NotEqual(t, base.Registry, d.Registry, "%s changes the registry's digest", name)
		for tool, sum := range base.Tools {
			if tool == c.tool {
				assert.NotEqual(t, sum, d.Tools[tool], "%s changes %s's digest", name, tool)
			} else {
				assert.Equal(t, sum, d.Tools[tool], "%s leaves %s's digest", name, tool)
			}
		}
	}
}

// TestDigestCoversWhatTheCallerAdds: more's value for a tool is part of
// its digest.
func TestDigestCoversWhatTheCallerAdds(t *testing.T) {
	t.Parallel()
	base := digestOf(t, digestTools(), nil)
	server := func(name string) func(string) any {
		return func(tool string) any {
			if tool == "pay" {
				return map[string]string{"server": name}
			}
			return nil
		}
	}
	a, b := digestOf(t, digestTools(), server("desk")), digestOf(t, digestTools(), server("desk2"))
	assert.NotEqual(t, base.Registry, a.Registry)
	assert.NotEqual(t, a.Registry, b.Registry)
	assert.NotEqual(t, a.Tools["pay"], b.Tools["pay"])
	assert.Equal(t, a.Tools["note"], b.Tools["note"])
	assert.Equal(t, a, digestOf(t, digestTools(), server("desk")), "the same input, the same digest")
}

// TestDigestIgnoresOrderAndForm: the order of registration, the schema's
// whitespace and key order, the description and Run leave the digest as
// it is.
func TestDigestIgnoresOrderAndForm(t *testing.T) {
	t.Parallel()
	base := digestOf(t, digestTools(), nil)
	ts := digestTools()
	reversed := []tools.Tool{ts[2], ts[1], ts[0]}
	assert.Equal(t, base, digestOf(t, reversed, nil), "the order of registration")

	ts = digestTools()
	ts[2].Schema = json.RawMessage("{\n  \"required\": [\"order_id\"],\n  \"properties\": {\"order_id\": {\"type\": \"string\"}},\n  \"type\": \"object\"\n}")
	ts[2].Description = "another wording"
	ts[2].Run = func(context.Context, tools.Call) (any, error) { return nil, nil }
	assert.Equal(t, base, digestOf(t, ts, nil), "the schema's form, the description and Run")
}

// TestDigestOfASchemaWithoutCanonicalForm: a schema keys.Canonicalize
// refuses (an integer with no exact double) still has a digest, which
// changes with it.
func TestDigestOfASchemaWithoutCanonicalForm(t *testing.T) {
	t.Parallel()
	ts := digestTools()
	ts[2].Schema = json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","maximum":9223372036854775807}}}`)
	a := digestOf(t, ts, nil)
	ts[2].Schema = json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","maximum":9223372036854775806}}}`)
	b := digestOf(t, ts, nil)
	assert.NotEqual(t, a.Tools["note"], b.Tools["note"])
}
