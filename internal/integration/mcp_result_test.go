package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/workflows"
)

// oddDesk is an MCP server whose open_ticket opens a ticket and answers
// with a result PostgreSQL cannot hold: a NUL in a string. It counts the
// calls it gets.
type oddDesk struct {
	url   string
	calls atomic.Int64
}

func startOddDesk(t *testing.T) *oddDesk {
	t.Helper()
	d := &oddDesk{}
	s := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "odd-desk", Version: "v1"}, nil)
	s.AddTool(&mcpsdk.Tool{Name: "open_ticket", InputSchema: json.RawMessage(`{"type":"object","properties":{"subject":{"type":"string"}}}`),
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: new(false)}},
		func(context.Context, *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
			n := d.calls.Add(1)
			return &mcpsdk.CallToolResult{StructuredContent: map[string]any{"ticket": n, "note": "a\x00b"}}, nil
		})
	srv := httptest.NewServer(mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return s }, nil))
	t.Cleanup(srv.Close)
	d.url = srv.URL
	return d
}

// TestMCPToolWhoseResultCannotBeStoredWaitsForAPerson: the server answered,
// so its effect was made, but its answer holds a NUL: the step waits in
// needs_resolution at once, saying why, and is never sent again; a
// person's answer with a result that can be stored completes the run.
func TestMCPToolWhoseResultCannotBeStoredWaitsForAPerson(t *testing.T) {
	t.Parallel()
	e := setup(t)
	d := startOddDesk(t)
	raw, err := json.Marshal(map[string]any{"servers": []any{map[string]any{"name": "odd", "transport": "http", "url": d.url,
		"tools": map[string]any{"open_ticket": map[string]any{"class": "external"}}}}})
	require.NoError(t, err)
	config := filepath.Join(t.TempDir(), "mcp.json")
	require.NoError(t, os.WriteFile(config, raw, 0o600))
	startWorkerProcess(t, e, nil, settings.EnvMCPConfig+"="+config)

	run := e.id("mcp-nul-result")
	_, err = e.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run,
		Plan: []planner.Call{{Tool: "odd_open_ticket", Args: json.RawMessage(`{"subject":"broken plate"}`)}}})
	require.NoError(t, err)
	st := e.waitFor("acme", run, "needs_resolution", func(s workflows.Status) bool { return s.State == workflows.RunNeedsResolution })
	s := st.Steps[0]
	require.Equal(t, workflows.StepNeedsResolution, s.State)
	require.NotNil(t, s.Resolution)
	assert.Contains(t, s.Resolution.Known, "the call answered, so its effect was made, but its result cannot be stored: result holds a NUL character (U+0000) at note")
	assert.EqualValues(t, 1, d.calls.Load(), "sent once")
	assert.Equal(t, 1, e.count("idempotency_keys", "run_id = $1 AND state = 'failed' AND (failure->>'unresolved')::boolean", run))

	out, err := e.oncerun("status", "--tenant", "acme", "--run-id", run, "--json")
	require.NoError(t, err, out)
	assert.Contains(t, out, "needs_resolution")
	assert.Contains(t, out, "result holds a NUL character (U+0000) at note")

	_, err = e.runs.Resolve(context.Background(), e.pool, approvalstore.ResolveRequest{StepRequest: approvalstore.Local("acme", run, 1, "dana"), Outcome: approvalstore.ResolutionApplied, Result: json.RawMessage(`{"ticket":1,"note":"a b"}`), Note: "the ticket is in the desk's view"})
	require.NoError(t, err)
	st = e.result("acme", run)
	require.Equal(t, workflows.StepDone, st.Steps[0].State, st.Steps[0].Error)
	assert.JSONEq(t, `{"ticket":1,"note":"a b"}`, string(st.Steps[0].Result))
	assert.EqualValues(t, 1, d.calls.Load(), "never sent again")
}
