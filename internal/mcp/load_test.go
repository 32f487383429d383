package mcp_test

import (
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/tools"
)

func TestLoadListsEveryPageOfToolsAndNamesThemAfterTheirServer(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	d := load(t, httpConfig("pay", s.URL, payTools(true)))

	// The server answers tools/list two tools a page.
	assert.Equal(t, []string{"pay_decline", "pay_find_refund", "pay_refund", "pay_slow"}, names(d))
	assert.Equal(t, mcp.Source{Server: "pay", Transport: "http", Tool: "refund", Idempotent: true,
		ClassFrom: mcp.FromConfig, ApprovalFrom: mcp.FromConfig,
		Hints: mcp.Hints{Annotated: true, Idempotent: true}, KeyClaim: mcp.KeyUnverified}, d.Sources["pay_refund"])
	assert.Empty(t, d.Skipped)

	refund := toolOf(t, d, "pay_refund")
	assert.Equal(t, "[MCP server pay] Refund (part of) a payment.", refund.Description)
	var schema struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(refund.Schema, &schema))
	assert.Equal(t, "object", schema.Type)
	assert.Contains(t, schema.Properties, "amount_cents")
	assert.Contains(t, schema.Properties, "payment_id")

	_, err := tools.NewRegistry(tools.RegistryConfig{}, d.Tools...)
	require.NoError(t, err, "the worker's registry takes the discovered tools")
}

func TestLoadGivesEachToolTheClassAndPairedReadOfItsConfiguration(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	d := load(t, httpConfig("pay", s.URL, payTools(true)))

	refund, find := toolOf(t, d, "pay_refund"), toolOf(t, d, "pay_find_refund")
	assert.Equal(t, tools.ClassExternal, refund.Class)
	assert.Equal(t, tools.ClassRead, find.Class)
	assert.Equal(t, "pay_find_refund", refund.PairedRead, "the paired read is named as oncerun names it")
	assert.Equal(t, 5*time.Second+mcp.DefaultLiveWait, toolOf(t, d, "pay_slow").Timeout,
		"a step's attempt lasts the call's timeout and the wait for a person's answer to a live question")
	assert.Equal(t, tools.ClassExternal, toolOf(t, d, "pay_decline").Class, "external is the default class")
}

func TestTheApprovalRuleOfAFieldAsksForApprovalAboveTheThreshold(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	d := load(t, httpConfig("pay", s.URL, payTools(true)))
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, d.Tools...)
	require.NoError(t, err)

	tests := []struct {
		args string
		want bool
	}{
		{`{"payment_id":"pay_1","amount_cents":10000}`, false},
		{`{"payment_id":"pay_1","amount_cents":10001}`, true},
	}
	for _, tt := range tests {
		p, err := reg.Prepare(planner.Call{Tool: "pay_refund", Args: json.RawMessage(tt.args)})
		require.NoError(t, err)
		assert.Equal(t, tt.want, p.NeedsApproval, tt.args)
	}
	need, why, err := toolOf(t, d, "pay_refund").Approval.Needs(json.RawMessage(`{"payment_id":"pay_1"}`))
	require.NoError(t, err)
	assert.True(t, need, "a call that does not say how much is not known to be small")
	assert.Equal(t, "amount_cents above 10000", why)

	p, err := reg.Prepare(planner.Call{Tool: "pay_slow", Args: json.RawMessage(`{"payment_id":"pay_1","amount_cents":1}`)})
	require.NoError(t, err)
	assert.False(t, p.NeedsApproval, "never is the rule of a tool its server marks not destructive")
	p, err = reg.Prepare(planner.Call{Tool: "pay_decline", Args: json.RawMessage(`{"payment_id":"pay_1","amount_cents":1}`)})
	require.NoError(t, err)
	assert.True(t, p.NeedsApproval, "a tool that says nothing of itself is destructive, as MCP defaults it")
}

func TestAToolPromisesOnceOnlyWhenItsServerHonoursTheKeyOrAPairedReadCanTell(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	noRead := payTools(false)
	noRead["refund"] = mcp.ToolConfig{}
	tests := []struct {
		name  string
		tools map[string]mcp.ToolConfig
		want  string
		life  time.Duration
	}{
		{"idempotent", payTools(true), tools.GuaranteeOnce, mcp.DefaultKeyLifetime},
		{"paired read", payTools(false), tools.GuaranteeOnce, 0},
		{"neither", noRead, tools.GuaranteeAtLeastOnce, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			refund := toolOf(t, load(t, httpConfig("pay", s.URL, tt.tools)), "pay_refund")
			assert.Equal(t, tt.want, refund.Guarantee())
			assert.Equal(t, tt.life, refund.KeyLifetime)
		})
	}
	t.Run("key lifetime", func(t *testing.T) {
		t.Parallel()
		cfg := payTools(true)
		r := cfg["refund"]
		r.KeyLifetime = mcp.Duration(time.Hour)
		cfg["refund"] = r
		assert.Equal(t, time.Hour, toolOf(t, load(t, httpConfig("pay", s.URL, cfg)), "pay_refund").KeyLifetime)
	})
}

func TestAServerThatIsDownAtStartIsAnErrorNamingIt(t *testing.T) {
	t.Parallel()
	down := httptest.NewServer(nil)
	down.Close()
	missing := stdioConfig(t, "tools", honouring)
	missing.Command = filepath.Join(t.TempDir(), "no-such-server")
	missing.Tools = stdioPayTools(true)

	assert.Contains(t, loadErr(t, httpConfig("pay", down.URL, payTools(true))), "MCP server pay (http "+down.URL+")")
	assert.Contains(t, loadErr(t, missing), "MCP server tools (stdio "+missing.Command+")")
}

func TestAnOptionalServerThatIsDownIsSkippedAndSaysWhy(t *testing.T) {
	t.Parallel()
	up := startHTTP(t, honouring)
	down := httptest.NewServer(nil)
	down.Close()
	optional := httpConfig("gone", down.URL, payTools(true))
	optional.Optional = true

	d := load(t, httpConfig("pay", up.URL, payTools(true)), optional)

	require.Len(t, d.Skipped, 1)
	assert.Equal(t, "gone", d.Skipped[0].Name)
	assert.ErrorContains(t, d.Skipped[0].Err, "connect to MCP server gone")
	assert.Equal(t, []string{"pay_decline", "pay_find_refund", "pay_refund", "pay_slow"}, names(d))
}

func TestUnlistedToolsAreLeftOutByDefault(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	d := load(t, httpConfig("pay", s.URL, map[string]mcp.ToolConfig{"find_refund": {Class: tools.ClassRead}}))
	assert.Equal(t, []string{"pay_find_refund"}, names(d))
}

func TestUnlistedToolsAreExternalAndAlwaysApprovedWhenTheServerSaysApprove(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	cfg := httpConfig("pay", s.URL, map[string]mcp.ToolConfig{"find_refund": {Class: tools.ClassRead}})
	cfg.Unlisted = mcp.UnlistedApprove
	d := load(t, cfg)

	assert.Equal(t, []string{"pay_decline", "pay_find_refund", "pay_refund", "pay_slow"}, names(d))
	refund := toolOf(t, d, "pay_refund")
	assert.Equal(t, tools.ClassExternal, refund.Class)
	assert.Equal(t, "always", refund.Approval.String())
	assert.Equal(t, tools.GuaranteeAtLeastOnce, refund.Guarantee())
	assert.Equal(t, tools.EditForbidden, refund.Edits, "approved as the server offers it: nothing is known of its arguments")
	assert.True(t, d.Sources["pay_refund"].Unlisted)
	assert.False(t, d.Sources["pay_find_refund"].Unlisted)
}

func TestAConfiguredToolTheServerDoesNotOfferIsAnErrorNamingIt(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	cfg := payTools(true)
	cfg["chargeback"] = mcp.ToolConfig{}
	msg := loadErr(t, httpConfig("pay", s.URL, cfg))
	assert.Contains(t, msg, `MCP server pay (http `+s.URL+`): tool "chargeback" is configured but the server does not offer it`)

	// An optional server that no longer offers a listed tool offers the
	// rest: the tool is left out, naming why.
	optional := httpConfig("pay", s.URL, cfg)
	optional.Optional = true
	d := load(t, optional)
	assert.Contains(t, names(d), "pay_refund")
	require.Len(t, d.LeftOut, 1)
	assert.Equal(t, []string{"chargeback", mcp.ReasonNotOffered}, []string{d.LeftOut[0].Tool, d.LeftOut[0].Reason})
	assert.ErrorContains(t, d.LeftOut[0].Err, `tool "chargeback" is configured but the server does not offer it`)
}

func TestASchemaTheRegistryRefusesIsAnErrorNamingServerAndTool(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, odd)
	tests := []struct{ tool, want string }{
		{"array_args", `input schema must describe an object ("type": "object"); it is {"type":"array"}`},
		{"bad_schema", "the tool registry refuses it: tool odd_bad_schema: schema:"},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			t.Parallel()
			msg := loadErr(t, httpConfig("odd", s.URL, map[string]mcp.ToolConfig{tt.tool: {}}))
			assert.Contains(t, msg, `MCP server odd (http `+s.URL+`): tool "`+tt.tool+`": `+tt.want)
		})
	}
}

func TestARetentionTheRegistryRefusesIsAnErrorNamingServerAndTool(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	cfg := payTools(true)
	r := cfg["refund"]
	r.Retention = mcp.Duration(24 * time.Hour)
	cfg["refund"] = r
	msg := loadErr(t, httpConfig("pay", s.URL, cfg))
	assert.Contains(t, msg, `tool "refund": the tool registry refuses it: tool pay_refund: retention 24h0m0s is not longer than`)
}

func TestAnApprovalFieldTheSchemaDoesNotHaveIsAnError(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	cfg := payTools(true)
	r := cfg["refund"]
	r.Approval = mcp.Approval{Rule: "above", Field: "amount", Above: 1}
	cfg["refund"] = r
	msg := loadErr(t, httpConfig("pay", s.URL, cfg))
	assert.Contains(t, msg, `tool "refund": approval: field "amount" is not a number property of the input schema`)
}

func TestToolNamesAreLowerCasedWithOtherCharactersReplaced(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, odd)
	d := load(t, httpConfig("odd", s.URL, map[string]mcp.ToolConfig{"get.Status": {Class: tools.ClassRead}}))
	assert.Equal(t, []string{"odd_get_status"}, names(d))
	assert.Equal(t, "get.Status", d.Sources["odd_get_status"].Tool)
	assert.Equal(t, "odd_get_status", mcp.ToolName("odd", "get.Status"))
}

func TestNamesThatCollideOrGrowTooLongAreRefused(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, odd)
	long := "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
	tests := []struct {
		name  string
		tools map[string]mcp.ToolConfig
		want  string
	}{
		{"collision", map[string]mcp.ToolConfig{"Refund": {}, "refund": {}},
			`tool name odd_refund would name both MCP tool "Refund" of server odd and MCP tool "refund" of server odd`},
		{"too long", map[string]mcp.ToolConfig{long: {}},
			`tool "` + long + `": its oncerun name odd_` + long + ` is 74 bytes, the limit is 64`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Contains(t, loadErr(t, httpConfig("odd", s.URL, tt.tools)), tt.want)
		})
	}
}

func TestToolNamesOfTwoServersMayNotCollide(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, odd)
	a := httpConfig("odd", s.URL, map[string]mcp.ToolConfig{"get.Status": {Class: tools.ClassRead}})
	b := httpConfig("odd_get", s.URL, map[string]mcp.ToolConfig{"status": {Class: tools.ClassRead}})
	assert.Contains(t, loadErr(t, a, b),
		`tool name odd_get_status would name both MCP tool "get.Status" of server odd and MCP tool "status" of server odd_get`)
}

func TestAStdioServerIsDiscoveredLikeAnHTTPOne(t *testing.T) {
	t.Parallel()
	cfg := stdioConfig(t, "local", honouring)
	cfg.Tools = stdioPayTools(true)
	d := load(t, cfg)
	assert.Equal(t, []string{"local_crash", "local_decline", "local_find_refund", "local_refund", "local_slow", "local_whoami"}, names(d))
	assert.Equal(t, mcp.Source{Server: "local", Transport: "stdio", Tool: "refund", Idempotent: true,
		ClassFrom: mcp.FromConfig, ApprovalFrom: mcp.FromConfig,
		Hints: mcp.Hints{Annotated: true, Idempotent: true}, KeyClaim: mcp.KeyUnverified}, d.Sources["local_refund"])
	assert.Equal(t, "local_find_refund", toolOf(t, d, "local_refund").PairedRead)
}

func TestABearerTokenVariableThatIsNotSetIsAnErrorEvenForAnOptionalServer(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	cfg := httpConfig("pay", s.URL, payTools(true))
	cfg.BearerTokenEnv = "ONCERUN_MCP_TEST_UNSET_TOKEN"
	cfg.Optional = true
	_, err := mcp.Load(t.Context(), mcp.Config{Servers: []mcp.ServerConfig{cfg}},
		mcp.Options{LookupEnv: func(string) (string, bool) { return "", false }})
	require.ErrorContains(t, err, "MCP server pay: bearer_token_env: ONCERUN_MCP_TEST_UNSET_TOKEN is not set")
}

func TestTheBearerTokenIsSentToAnHTTPServer(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	cfg := httpConfig("pay", s.URL, payTools(true))
	cfg.BearerTokenEnv = "PAY_TOKEN"
	d, err := mcp.Load(t.Context(), mcp.Config{Servers: []mcp.ServerConfig{cfg}},
		mcp.Options{LookupEnv: func(k string) (string, bool) { return "sekrit", k == "PAY_TOKEN" }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	require.NoError(t, run(t, toolOf(t, d, "pay_refund"), callOf(t, "pay_refund", 1, refundArgs), nil))
	assert.Equal(t, "Bearer sekrit", s.LastAuthorization())
}
