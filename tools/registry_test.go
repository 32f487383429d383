package tools_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
)

const objectSchema = `{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`

func noop(context.Context, tools.Call) (any, error) { return map[string]any{"ok": true}, nil }

// tool returns a valid tool of class c named name.
func tool(name string, c tools.Class) tools.Tool {
	return tools.Tool{Name: name, Schema: json.RawMessage(objectSchema), Class: c, Run: noop}
}

// with returns a valid keyed tool named name, changed by change.
func with(name string, change func(*tools.Tool)) tools.Tool {
	t := tool(name, tools.ClassKeyed)
	change(&t)
	return t
}

func TestNewRegistryRefuses(t *testing.T) {
	t.Parallel()
	// Keys must outlive a 48h approval pause plus a 1h retry horizon.
	cfg := tools.RegistryConfig{MaxApprovalPause: 48 * time.Hour, RetryHorizon: time.Hour, Margin: 24 * time.Hour}
	tests := []struct {
		name  string
		tools []tools.Tool
		bad   string // the tool the error names
		want  string
	}{
		{"upper-case name", []tools.Tool{tool("Send_Mail", tools.ClassRead)}, "Send_Mail", "name must be lower-case"},
		{"name with a dash", []tools.Tool{tool("send-mail", tools.ClassRead)}, "send-mail", "name must be lower-case"},
		{"name too long", []tools.Tool{tool("a"+strings.Repeat("b", 64), tools.ClassRead)}, "a" + strings.Repeat("b", 64), "at most 64 bytes"},
		{"duplicate", []tools.Tool{tool("note", tools.ClassKeyed), tool("note", tools.ClassRead)}, "note", "registered twice"},
		{"unknown class", []tools.Tool{tool("note", "magic")}, "note", `unknown effect class "magic"`},
		{"nil Run", []tools.Tool{with("note", func(t *tools.Tool) { t.Run = nil })}, "note", "Run is nil"},
		{"missing schema", []tools.Tool{with("note", func(t *tools.Tool) { t.Schema = json.RawMessage("  ") })}, "note", "no argument schema"},
		{"schema not JSON", []tools.Tool{with("note", func(t *tools.Tool) { t.Schema = json.RawMessage(`{"type":`) })}, "note", "schema is not JSON"},
		{"schema of a string", []tools.Tool{with("note", func(t *tools.Tool) { t.Schema = json.RawMessage(`{"type":"string"}`) })}, "note", "must describe an object"},
		{"schema of an array", []tools.Tool{with("note", func(t *tools.Tool) { t.Schema = json.RawMessage(`[]`) })}, "note", "must describe an object"},
		{"schema does not compile", []tools.Tool{with("note", func(t *tools.Tool) {
			t.Schema = json.RawMessage(`{"type":"object","properties":{"n":{"type":"nope"}}}`)
		})}, "note", "schema: "},
		{"When without predicate", []tools.Tool{with("note", func(t *tools.Tool) { t.Approval = tools.When("big ones", nil) })}, "note", `approval rule "big ones" has no predicate`},
		{"negative timeout", []tools.Tool{with("note", func(t *tools.Tool) { t.Timeout = -time.Second })}, "note", "negative retention or timeout"},
		{"paired read missing", []tools.Tool{with("pay", func(t *tools.Tool) { t.Class, t.PairedRead = tools.ClassExternal, "find_payment" })}, "pay", `paired read "find_payment" is not a registered read tool`},
		{"paired read not a read", []tools.Tool{
			tool("note", tools.ClassKeyed),
			with("pay", func(t *tools.Tool) { t.Class, t.PairedRead = tools.ClassExternal, "note" }),
		}, "pay", `paired read "note" is not a registered read tool`},
		{"keyed retention short", []tools.Tool{with("note", func(t *tools.Tool) { t.Retention = 24 * time.Hour })}, "note", "short by 49h"},
		{"external retention short", []tools.Tool{with("pay", func(t *tools.Tool) { t.Class, t.Retention = tools.ClassExternal, 24*time.Hour })}, "pay", "short by 49h"},
		{"keyed retention equal", []tools.Tool{with("note", func(t *tools.Tool) { t.Retention = 73 * time.Hour })}, "note", "not longer than the longest approval pause 48h0m0s plus the retry horizon 1h0m0s plus a margin of 24h0m0s: short by 1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reg, err := tools.NewRegistry(cfg, tt.tools...)
			require.ErrorIs(t, err, tools.ErrInvalidTool)
			assert.Nil(t, reg)
			assert.Contains(t, err.Error(), "tool "+tt.bad+": ")
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestNewRegistryAccepts(t *testing.T) {
	t.Parallel()
	cfg := tools.RegistryConfig{MaxApprovalPause: 48 * time.Hour, RetryHorizon: time.Hour, Margin: 24 * time.Hour}
	tests := []struct {
		name  string
		tools []tools.Tool
	}{
		{"keyed retention just long enough", []tools.Tool{with("note", func(t *tools.Tool) { t.Retention = 73*time.Hour + time.Second })}},
		// A natural key has no window, so its retention is not checked.
		{"natural with short retention", []tools.Tool{with("credit", func(t *tools.Tool) { t.Class, t.Retention = tools.ClassNatural, time.Hour })}},
		{"read with short retention", []tools.Tool{with("find", func(t *tools.Tool) { t.Class, t.Retention = tools.ClassRead, time.Hour })}},
		{"external with its paired read", []tools.Tool{
			with("pay", func(t *tools.Tool) { t.Class, t.PairedRead = tools.ClassExternal, "find_payment" }),
			tool("find_payment", tools.ClassRead),
		}},
		{"longest name", []tools.Tool{tool("a"+strings.Repeat("b", 63), tools.ClassRead)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reg, err := tools.NewRegistry(cfg, tt.tools...)
			require.NoError(t, err)
			assert.Len(t, reg.Names(), len(tt.tools))
		})
	}
}

func TestNewRegistryReportsEveryError(t *testing.T) {
	t.Parallel()
	_, err := tools.NewRegistry(tools.RegistryConfig{},
		tool("fine", tools.ClassRead),
		with("no_run", func(t *tools.Tool) { t.Run = nil }),
		tool("bad_class", "magic"),
		with("orphan", func(t *tools.Tool) { t.PairedRead = "nobody" }),
	)
	require.ErrorIs(t, err, tools.ErrInvalidTool)
	for _, want := range []string{"tool no_run: Run is nil", "tool bad_class: unknown effect class", `tool orphan: paired read "nobody"`} {
		assert.Contains(t, err.Error(), want)
	}
	assert.NotContains(t, err.Error(), "tool fine")
}

func TestNewRegistryDefaultRetentionIsCheckedToo(t *testing.T) {
	t.Parallel()
	// The default retention of 30 days does not outlast a 30-day pause.
	_, err := tools.NewRegistry(tools.RegistryConfig{MaxApprovalPause: tools.DefaultRetention}, tool("note", tools.ClassKeyed))
	require.ErrorIs(t, err, tools.ErrInvalidTool)
	assert.Contains(t, err.Error(), "tool note: retention 720h0m0s")
}

func TestShopRegistryAppliesDefaults(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, shop.Tools(shop.Config{})...)
	require.NoError(t, err)

	assert.Equal(t, []string{shop.ToolAddOrderNote, shop.ToolGetCredit, shop.ToolIssueCredit, shop.ToolLookupOrder}, reg.Names())
	assert.Equal(t, tools.RegistryConfig{MaxApprovalPause: tools.DefaultMaxApprovalPause, RetryHorizon: tools.DefaultRetryHorizon, Margin: tools.DefaultWindowMargin}, reg.Config())
	for _, name := range reg.Names() {
		got, ok := reg.Lookup(name)
		require.True(t, ok, name)
		assert.Equal(t, tools.DefaultRetention, got.Retention, name)
		assert.Equal(t, tools.DefaultTimeout, got.Timeout, name)
	}
	classes := map[string]tools.Class{}
	for _, name := range reg.Names() {
		got, _ := reg.Lookup(name)
		classes[name] = got.Class
	}
	assert.Equal(t, map[string]tools.Class{
		shop.ToolLookupOrder: tools.ClassRead, shop.ToolGetCredit: tools.ClassRead,
		shop.ToolIssueCredit: tools.ClassNatural, shop.ToolAddOrderNote: tools.ClassKeyed,
	}, classes)

	_, ok := reg.Lookup("refund_payment")
	assert.False(t, ok)
}

func TestLookupKeepsSetValues(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, with("note", func(t *tools.Tool) {
		t.Retention, t.Timeout = 90*24*time.Hour, 5*time.Second
	}))
	require.NoError(t, err)
	got, ok := reg.Lookup("note")
	require.True(t, ok)
	assert.Equal(t, 90*24*time.Hour, got.Retention)
	assert.Equal(t, 5*time.Second, got.Timeout)
}

func TestSpecsSortedWithSchemas(t *testing.T) {
	t.Parallel()
	shop := shop.Tools(shop.Config{})
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, shop...)
	require.NoError(t, err)

	specs := reg.Specs()
	require.Len(t, specs, len(shop))
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
		want, ok := reg.Lookup(s.Name)
		require.True(t, ok)
		assert.JSONEq(t, string(want.Schema), string(s.Schema), s.Name)
		assert.Equal(t, want.Description, s.Description)
		assert.NotEmpty(t, s.Description, s.Name)
	}
	assert.Equal(t, []string{"add_order_note", "get_credit", "issue_credit", "lookup_order"}, names)
}

// A key lifetime is the provider's promise to remember an external tool's
// key. The registry refuses one that cannot be right, because the store
// trusts it to decide whether resending under the same key is safe: a key
// the provider forgets during an attempt would turn a retry into a second
// effect.
func TestNewRegistryChecksTheKeyLifetime(t *testing.T) {
	t.Parallel()
	external := func(change func(*tools.Tool)) tools.Tool {
		return with("pay", func(t *tools.Tool) {
			t.Class = tools.ClassExternal
			change(t)
		})
	}
	tests := []struct {
		name string
		tool tools.Tool
		want string // the refusal's reason; empty when the tool is accepted
	}{
		{"negative", external(func(t *tools.Tool) { t.KeyLifetime = -time.Hour }),
			"negative key lifetime -1h0m0s"},
		{"on a keyed tool", with("pay", func(t *tools.Tool) { t.KeyLifetime = 24 * time.Hour }),
			"a key lifetime is the provider's, for external tools only; this tool is keyed"},
		{"on a natural tool", with("pay", func(t *tools.Tool) { t.Class, t.KeyLifetime = tools.ClassNatural, 24*time.Hour }),
			"for external tools only; this tool is natural"},
		{"on a read tool", with("pay", func(t *tools.Tool) { t.Class, t.KeyLifetime = tools.ClassRead, 24*time.Hour }),
			"for external tools only; this tool is read"},
		{"equal to the timeout", external(func(t *tools.Tool) { t.Timeout, t.KeyLifetime = time.Minute, time.Minute }),
			"key lifetime 1m0s is not longer than one attempt's timeout 1m0s: the provider would forget the key during a call"},
		// The default timeout of 30s applies before the comparison.
		{"shorter than the default timeout", external(func(t *tools.Tool) { t.KeyLifetime = 10 * time.Second }),
			"key lifetime 10s is not longer than one attempt's timeout 30s"},
		{"a second longer than the timeout", external(func(t *tools.Tool) { t.Timeout, t.KeyLifetime = time.Minute, time.Minute+time.Second }), ""},
		{"a provider's day", external(func(t *tools.Tool) { t.KeyLifetime = 24 * time.Hour }), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reg, err := tools.NewRegistry(tools.RegistryConfig{}, tt.tool)
			if tt.want == "" {
				require.NoError(t, err)
				got, ok := reg.Lookup("pay")
				require.True(t, ok)
				assert.Equal(t, tt.tool.KeyLifetime, got.KeyLifetime, "the lifetime is kept as declared")
				return
			}
			require.ErrorIs(t, err, tools.ErrInvalidTool)
			assert.Nil(t, reg)
			assert.Contains(t, err.Error(), "tool pay: ")
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// A schema loads nothing: a "$ref" to a local file (an MCP server's
// schema is the server's word) is refused, and nothing of the file comes
// back, in the error or in the checks of a call's arguments.
func TestASchemaLoadsNoFile(t *testing.T) {
	t.Parallel()
	secret := t.TempDir() + "/secret.json"
	require.NoError(t, os.WriteFile(secret, []byte(`{"type":"string","const":"hunter2"}`), 0o600))
	bad := tool("mcp_lookup", tools.ClassRead)
	bad.Schema = json.RawMessage(`{"type":"object","properties":{"x":{"$ref":"file://` + secret + `"}}}`)
	_, err := tools.NewRegistry(tools.RegistryConfig{}, bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "mcp_lookup")
	assert.NotContains(t, err.Error(), "hunter2")
}
