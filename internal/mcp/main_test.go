package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/tools"
)

// TestMain runs the tests, unless the binary was started as a stdio MCP
// server by a test (serverEnv set): then it is that server.
func TestMain(m *testing.M) {
	if variant := os.Getenv(serverEnv); variant != "" {
		os.Exit(runStdioServer(variant))
	}
	os.Exit(m.Run())
}

// payTools is the configuration of the refund servers' tools: refund
// external, approved above 100.00, paired with find_refund, and idempotent
// when idempotent is true.
func payTools(idempotent bool) map[string]mcp.ToolConfig {
	return map[string]mcp.ToolConfig{
		"refund": {
			Class:      tools.ClassExternal,
			Approval:   mcp.Approval{Rule: "above", Field: "amount_cents", Above: 10000},
			PairedRead: mcp.PairedRead{Tool: "find_refund"},
			Idempotent: idempotent,
		},
		"find_refund": {Class: tools.ClassRead},
		"decline":     {},
		"slow":        {Timeout: mcp.Duration(5 * time.Second)},
	}
}

// stdioPayTools adds the stdio servers' own tools to payTools.
func stdioPayTools(idempotent bool) map[string]mcp.ToolConfig {
	t := payTools(idempotent)
	t["crash"] = mcp.ToolConfig{}
	t["whoami"] = mcp.ToolConfig{Class: tools.ClassRead}
	return t
}

func httpConfig(name, url string, tools map[string]mcp.ToolConfig) mcp.ServerConfig {
	return mcp.ServerConfig{Name: name, Transport: mcp.TransportHTTP, URL: url, Tools: tools}
}

// load loads servers and closes them at the test's end.
func load(t *testing.T, servers ...mcp.ServerConfig) mcp.Discovered {
	t.Helper()
	d, err := mcp.Load(context.Background(), mcp.Config{Servers: servers}, mcp.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// loadErr loads servers, which must fail, and returns the error's text.
func loadErr(t *testing.T, servers ...mcp.ServerConfig) string {
	t.Helper()
	d, err := mcp.Load(context.Background(), mcp.Config{Servers: servers}, mcp.Options{ConnectTimeout: 5 * time.Second})
	if err == nil {
		_ = d.Close()
	}
	require.Error(t, err)
	return err.Error()
}

func toolOf(t *testing.T, d mcp.Discovered, name string) tools.Tool {
	t.Helper()
	for _, tool := range d.Tools {
		if tool.Name == name {
			return tool
		}
	}
	t.Fatalf("no tool %s among %v", name, names(d))
	return tools.Tool{}
}

func names(d mcp.Discovered) []string {
	out := make([]string, len(d.Tools))
	for i, tool := range d.Tools {
		out[i] = tool.Name
	}
	return out
}

// callOf is step step of run run-1 of tenant acme calling tool with args.
func callOf(t *testing.T, tool string, step int64, args string) tools.Call {
	t.Helper()
	key, err := keys.New("acme", "run-1", step, tool)
	require.NoError(t, err)
	return tools.Call{Key: key, Args: json.RawMessage(args)}
}

const refundArgs = `{"amount_cents":500,"payment_id":"pay_1"}`

// run runs tool's Run on call, within ctx if one is given, and decodes a
// successful result into out.
func run(t *testing.T, tool tools.Tool, call tools.Call, out any, ctx ...context.Context) error {
	t.Helper()
	c := context.Background()
	if len(ctx) > 0 {
		c = ctx[0]
	}
	res, err := tool.Run(c, call)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(res)
	require.NoError(t, err)
	if out != nil {
		require.NoError(t, json.Unmarshal(raw, out), "result %s", raw)
	}
	return nil
}

// permanent reports whether err is a non-retryable Temporal error.
func permanent(err error) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app) && app.NonRetryable()
}
