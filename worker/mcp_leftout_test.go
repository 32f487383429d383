package worker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/internal/mcptest"
	"github.com/oncerun/oncerun/tools"
)

// serverConfig writes an MCP configuration of one server, name, optional
// as optional says, that offers and lists the tools.
func serverConfig(t *testing.T, name string, optional bool, offered ...*mcpsdk.Tool) string {
	t.Helper()
	listed := map[string]any{}
	for _, tool := range offered {
		listed[tool.Name] = map[string]any{}
	}
	raw, err := json.Marshal(map[string]any{"servers": []any{map[string]any{
		"name": name, "transport": "http", "url": mcptest.ServeTools(t, offered...), "optional": optional, "tools": listed,
	}}})
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "mcp.json")
	require.NoError(t, os.WriteFile(p, raw, 0o600))
	return p
}

// collidingConfig is server ctl, offering ctl_out and CTL-OUT (both
// ctl_ctl_out once normalised) and status.
func collidingConfig(t *testing.T, optional bool) string {
	t.Helper()
	return serverConfig(t, "ctl", optional, &mcpsdk.Tool{Name: "ctl_out"}, &mcpsdk.Tool{Name: "CTL-OUT"}, &mcpsdk.Tool{Name: "status"})
}

// An optional server whose tools collide once normalised does not stop the
// worker: the registry is built without them, with its other tool, an
// error is logged and oncerun_mcp_tools_left_out_total counts them.
func TestAnOptionalServersCollidingToolsAreLeftOutOfTheWorker(t *testing.T) {
	t.Parallel()
	logs := &zaptest.Buffer{}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), logs, zap.DebugLevel))
	cfg, closeMCP, err := WithMCP(context.Background(), Config{MCPConfig: collidingConfig(t, true), Logger: log})
	require.NoError(t, err)
	t.Cleanup(func() { _ = closeMCP() })

	reg, err := Registry(cfg)
	require.NoError(t, err)
	_, ok := reg.Lookup("ctl_status")
	assert.True(t, ok, "the server's other tool is offered: %v", reg.Names())
	_, ok = reg.Lookup("ctl_ctl_out")
	assert.False(t, ok)
	assert.Contains(t, logs.String(), "MCP tool of an optional server left out of the registry")
	assert.Contains(t, logs.String(), `"reason":"name_collision"`)

	prom := prometheus.NewRegistry()
	prom.MustRegister(cfg.mcp.leftOutCounter())
	require.NoError(t, testutil.GatherAndCompare(prom, strings.NewReader(`
# HELP oncerun_mcp_tools_left_out_total Tools of optional MCP servers left out at the worker's start, by server and reason (name_collision, name_too_long, description_too_long, schema_too_large, paired_left_out, not_offered, invalid).
# TYPE oncerun_mcp_tools_left_out_total counter
oncerun_mcp_tools_left_out_total{reason="name_collision",server="ctl"} 2
`), "oncerun_mcp_tools_left_out_total"))
}

// The same server required stops the worker's start, naming both tools.
func TestARequiredServersCollidingToolsStopTheWorker(t *testing.T) {
	t.Parallel()
	_, _, err := WithMCP(context.Background(), Config{MCPConfig: collidingConfig(t, false)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `tool name ctl_ctl_out would name both MCP tool "CTL-OUT" of server ctl and MCP tool "ctl_out" of server ctl`)
}

// ownNameConfig is server lookup, offering order (lookup_order once
// prefixed: the built-in tool's name) and status.
func ownNameConfig(t *testing.T, optional bool) string {
	t.Helper()
	return serverConfig(t, "lookup", optional, &mcpsdk.Tool{Name: "order"}, &mcpsdk.Tool{Name: "status"})
}

// An optional server's tool that would take the name of one of the
// worker's own tools is left out, the built-in tool kept; a required
// server's stops the start naming it.
func TestAnMCPToolNamedAsTheWorkersOwnIsLeftOutOrStopsTheStart(t *testing.T) {
	t.Parallel()
	cfg, closeMCP, err := WithMCP(context.Background(), Config{MCPConfig: ownNameConfig(t, true)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = closeMCP() })
	reg, err := Registry(cfg)
	require.NoError(t, err, "an optional server cannot stop the worker")
	_, ok := reg.Lookup("lookup_status")
	assert.True(t, ok, "the server's other tool is offered")
	own, ok := reg.Lookup("lookup_order")
	require.True(t, ok)
	assert.Equal(t, tools.ClassRead, own.Class, "the built-in lookup_order keeps its name")
	require.Len(t, cfg.mcp.leftOut, 1)
	assert.Equal(t, []string{"lookup", "order", "lookup_order", mcp.ReasonNameCollision},
		[]string{cfg.mcp.leftOut[0].Server, cfg.mcp.leftOut[0].Tool, cfg.mcp.leftOut[0].Name, cfg.mcp.leftOut[0].Reason})

	_, _, err = WithMCP(context.Background(), Config{MCPConfig: ownNameConfig(t, false)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `tool name lookup_order of MCP tool "order" of server lookup is the name of one of the worker's own tools`)
}
