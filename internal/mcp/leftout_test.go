package mcp_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/tools"
)

// unrulyConfig lists every tool of the unruly server at url.
func unrulyConfig(url string, optional bool) mcp.ServerConfig {
	cfg := httpConfig("unruly", url, map[string]mcp.ToolConfig{
		"ctl_out": {}, "CTL-OUT": {}, "huge": {}, "noisy": {}, "status": {}, "wide": {},
	})
	cfg.Optional = optional
	return cfg
}

// reasons maps each left-out tool (its name at the server) to why.
func reasons(d mcp.Discovered) map[string]string {
	out := map[string]string{}
	for _, l := range d.LeftOut {
		out[l.Tool] = l.Reason
	}
	return out
}

// An optional server's tools that collide once normalised, or whose
// description or schema is past the bound, are left out, each with why;
// its other tools are offered, and the registry takes them.
func TestAnOptionalServersBadToolsAreLeftOutAndItsOthersKept(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, unruly)
	d := load(t, unrulyConfig(s.URL, true))

	assert.Equal(t, []string{"unruly_noisy", "unruly_status"}, names(d))
	assert.Equal(t, map[string]string{
		"ctl_out": mcp.ReasonNameCollision, "CTL-OUT": mcp.ReasonNameCollision,
		"huge": mcp.ReasonDescriptionTooLong, "wide": mcp.ReasonSchemaTooLarge,
	}, reasons(d))
	for _, l := range d.LeftOut {
		assert.Equal(t, "unruly", l.Server)
		switch l.Tool {
		case "ctl_out", "CTL-OUT":
			assert.Equal(t, "unruly_ctl_out", l.Name)
			assert.ErrorContains(t, l.Err, `tool name unruly_ctl_out would name both MCP tool "CTL-OUT" of server unruly and MCP tool "ctl_out" of server unruly`)
		case "huge":
			assert.ErrorContains(t, l.Err, `tool "huge": its description is 3145728 bytes once escaped, the limit is 8192`)
		case "wide":
			assert.ErrorContains(t, l.Err, fmt.Sprintf(`tool "wide": its input schema is %d bytes, the limit is %d`,
				mcp.MaxSchemaBytes+len(`{"type":"object","properties":{"note":{"type":"string","description":""}}}`), mcp.MaxSchemaBytes))
		}
	}
	_, err := tools.NewRegistry(tools.RegistryConfig{}, d.Tools...)
	require.NoError(t, err)
}

// A required server's bad tools fail the load with one error that names
// every problem, not the first alone.
func TestARequiredServersBadToolsFailTheLoadNamingEveryProblem(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, unruly)
	msg := loadErr(t, unrulyConfig(s.URL, false))
	for _, want := range []string{
		`tool name unruly_ctl_out would name both MCP tool "CTL-OUT" of server unruly and MCP tool "ctl_out" of server unruly`,
		`tool "huge": its description is 3145728 bytes once escaped, the limit is 8192`,
		`tool "wide": its input schema is`,
	} {
		assert.Contains(t, msg, want)
	}
	assert.Less(t, len(msg), 4096, "the error names the description's size, not the description")
}

// What the model reads of a tool is escaped: a CRLF line end becomes a
// newline and a NUL or an escape sequence reads as \u escapes, inert.
func TestADescriptionIsEscapedBeforeTheModelReadsIt(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, unruly)
	d := load(t, httpConfig("unruly", s.URL, map[string]mcp.ToolConfig{"noisy": {}}))
	assert.Equal(t, `[MCP server unruly] Prints the status.`+"\n"+`In colour: \u0000\u001b[31mred\u001b[0m`,
		toolOf(t, d, "unruly_noisy").Description)
}

// A name a required server's tool and an optional server's tool would
// both have goes to the required one; the optional one is left out.
func TestARequiredServersToolKeepsANameAnOptionalServersToolWouldShare(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, odd)
	required := httpConfig("odd", s.URL, map[string]mcp.ToolConfig{"get.Status": {Class: tools.ClassRead}})
	optional := httpConfig("odd_get", s.URL, map[string]mcp.ToolConfig{"status": {Class: tools.ClassRead}, "Refund": {}})
	optional.Optional = true
	d := load(t, required, optional)

	assert.Equal(t, []string{"odd_get_refund", "odd_get_status"}, names(d))
	assert.Equal(t, "odd", d.Sources["odd_get_status"].Server)
	require.Len(t, d.LeftOut, 1)
	assert.Equal(t, mcp.LeftOutTool{Server: "odd_get", Tool: "status", Name: "odd_get_status", Reason: mcp.ReasonNameCollision,
		Err: d.LeftOut[0].Err}, d.LeftOut[0])
}

// A tool of an optional server whose paired read is left out is left out
// with it: its registry would refuse it.
func TestAToolWhosePairedReadIsLeftOutIsLeftOutToo(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, unruly)
	cfg := httpConfig("unruly", s.URL, map[string]mcp.ToolConfig{
		"status":  {PairedRead: mcp.PairedRead{Tool: "ctl_out"}},
		"ctl_out": {Class: tools.ClassRead}, "CTL-OUT": {}, "noisy": {},
	})
	cfg.Optional = true
	d := load(t, cfg)

	assert.Equal(t, []string{"unruly_noisy"}, names(d))
	assert.Equal(t, mcp.ReasonPairedLeftOut, reasons(d)["status"])
	_, err := tools.NewRegistry(tools.RegistryConfig{}, d.Tools...)
	require.NoError(t, err)
}
