package worker_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/oncerun/oncerun/internal/sandbox/desk"
	"github.com/oncerun/oncerun/worker"
)

// deskConfig serves a sandbox desk and writes an MCP configuration that
// lists its open_ticket and find_ticket.
func deskConfig(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r, err := desk.Serve(ctx, "127.0.0.1:0", desk.Config{})
	require.NoError(t, err)
	raw, err := json.Marshal(map[string]any{"servers": []any{map[string]any{
		"name": "desk", "transport": "http", "url": r.URL(),
		"tools": map[string]any{
			"open_ticket": map[string]any{"idempotent": true, "paired_read": "find_ticket"},
			"find_ticket": map[string]any{"class": "read"},
		},
	}}})
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "mcp.json")
	require.NoError(t, os.WriteFile(p, raw, 0o600))
	return p
}

func TestRegistryRefusesAConfigurationWhoseMCPServersWereNotAsked(t *testing.T) {
	t.Parallel()
	_, err := worker.Registry(worker.Config{MCPConfig: "/etc/oncerun/mcp.yaml"})
	require.Error(t, err, "a plan checked without the MCP tools would be refused by the worker, or the other way round")
	assert.Contains(t, err.Error(), "ONCERUN_MCP_CONFIG /etc/oncerun/mcp.yaml")
	assert.Contains(t, err.Error(), "worker.WithMCP")
}

func TestWithMCPAddsTheServersToolsToTheOneRegistry(t *testing.T) {
	t.Parallel()
	cfg, closeMCP, err := worker.WithMCP(context.Background(), worker.Config{MCPConfig: deskConfig(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = closeMCP() })
	reg, err := worker.Registry(cfg)
	require.NoError(t, err)
	open, ok := reg.Lookup("desk_open_ticket")
	require.True(t, ok, "registered: %v", reg.Names())
	assert.Equal(t, "desk_find_ticket", open.PairedRead)
	assert.Equal(t, "once", open.Guarantee())
	_, ok = reg.Lookup("refund_payment")
	assert.True(t, ok, "beside the built-in tools")

	list, err := worker.Describe(cfg)
	require.NoError(t, err)
	sources := map[string]string{}
	for _, ti := range list {
		sources[ti.Name] = ti.Source + "/" + ti.Server
	}
	assert.Equal(t, "mcp/desk", sources["desk_open_ticket"])
	assert.Equal(t, "built-in/", sources["issue_credit"])
}

func TestWithMCPNamesTheFileOfABadConfiguration(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "mcp.yaml")
	require.NoError(t, os.WriteFile(p, []byte("servers:\n  - name: desk\n    transport: carrier-pigeon\n"), 0o600))
	_, _, err := worker.WithMCP(context.Background(), worker.Config{MCPConfig: p})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ONCERUN_MCP_CONFIG")
	assert.Contains(t, err.Error(), "carrier-pigeon")
}

func TestWithMCPLogsAServerDownAtStartWithoutItsPassword(t *testing.T) {
	t.Parallel()
	raw, err := json.Marshal(map[string]any{"servers": []any{map[string]any{
		"name": "desk", "transport": "http", "url": "http://ops:s3cret@127.0.0.1:1/mcp?token=s3cret", "optional": true,
		"tools": map[string]any{"open_ticket": map[string]any{}},
	}}})
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "mcp.json")
	require.NoError(t, os.WriteFile(p, raw, 0o600))
	logs := &zaptest.Buffer{}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), logs, zap.DebugLevel))

	_, closeMCP, err := worker.WithMCP(context.Background(), worker.Config{MCPConfig: p, Logger: log})
	require.NoError(t, err)
	t.Cleanup(func() { _ = closeMCP() })

	assert.Contains(t, logs.String(), "MCP server down at start")
	assert.Contains(t, logs.String(), "ops:xxxxx@127.0.0.1:1")
	assert.NotContains(t, logs.String(), "s3cret")
}
