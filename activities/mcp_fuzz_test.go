package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/tools"
)

// fuzzAnswer is what the fuzzed MCP server's tools answer next.
type fuzzAnswer struct {
	structured []byte // structuredContent, when it is JSON
	text       string // one text item, when not empty
	isError    bool
}

// fuzzDesk is an MCP server over Streamable HTTP whose tools, note (an
// external tool) and peek (a read), answer what the fuzz sets.
type fuzzDesk struct {
	mu    sync.Mutex
	next  fuzzAnswer
	calls atomic.Int64
}

func (d *fuzzDesk) answer(context.Context, *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
	d.calls.Add(1)
	d.mu.Lock()
	a := d.next
	d.mu.Unlock()
	res := &mcpsdk.CallToolResult{IsError: a.isError, Content: []mcpsdk.Content{}}
	if json.Valid(a.structured) {
		res.StructuredContent = json.RawMessage(a.structured)
	}
	if a.text != "" {
		res.Content = append(res.Content, &mcpsdk.TextContent{Text: a.text})
	}
	return res, nil
}

// FuzzMCPToolResult sends a step of an MCP tool, external or read, to a
// real MCP server that answers anything, through RunTool, the dedup store
// and a real database, and checks that the step always ends visible, in at
// most two attempts, with the server called once:
//
//   - done: its result is one the store keeps, and for an external tool
//     the key holds that result;
//   - failed for good, with a reason in UTF-8;
//   - or waiting for a person (needs_resolution), saying what is known.
//
// A retryable failure on the second attempt would be a step retried blind
// for an hour.
func FuzzMCPToolResult(f *testing.F) {
	f.Add([]byte(`{"ticket":"t-1"}`), "", false, false)
	f.Add([]byte(`{"note":"a\u0000b"}`), "", false, false)
	f.Add([]byte(`{"note":"a\u0000b"}`), "", false, true)
	f.Add([]byte(`{"id":9007199254740993}`), `{"id":9007199254740993}`, false, false)
	f.Add([]byte(`{"id":9007199254740993}`), "", false, false)
	f.Add([]byte(`{"x":1e400}`), "", false, true)
	f.Add([]byte(`[1e-400]`), `"\u001b[2J"`, false, false)
	f.Add([]byte(`not json`), "\xff\x00 declined", true, false)
	f.Add([]byte(``), `{"deep":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`, false, true)
	f.Add([]byte(`"\ud800"`), "\u202e", false, false)

	desk := &fuzzDesk{}
	s := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "fuzz-desk", Version: "v1"}, nil)
	for _, name := range []string{"note", "peek"} {
		s.AddTool(&mcpsdk.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)}, desk.answer)
	}
	srv := httptest.NewServer(mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return s }, nil))
	f.Cleanup(srv.Close)
	d, err := mcp.Load(context.Background(), mcp.Config{Servers: []mcp.ServerConfig{{Name: "fz", Transport: mcp.TransportHTTP,
		URL: srv.URL, Tools: map[string]mcp.ToolConfig{"note": {Class: tools.ClassExternal}, "peek": {Class: tools.ClassRead}}}}}, mcp.Options{})
	require.NoError(f, err)
	f.Cleanup(func() { _ = d.Close() })
	fx := setup(f, d.Tools...)

	step := int64(0)
	f.Fuzz(func(t *testing.T, structured []byte, text string, isError, read bool) {
		step++
		desk.mu.Lock()
		desk.next = fuzzAnswer{structured: structured, text: text, isError: isError}
		desk.mu.Unlock()
		before := desk.calls.Load()
		tool := "fz_note"
		if read {
			tool = "fz_peek"
		}
		in := input(t, step, tool, `{}`)

		var (
			out     activities.ToolOutput
			lastErr error
		)
		for range 2 {
			if out, lastErr = fx.run(t, in); lastErr == nil || !retryable(lastErr) {
				break
			}
		}
		require.EqualValues(t, 1, desk.calls.Load()-before, "the server is called once")
		if lastErr == nil {
			require.NoError(t, idempotency.CheckResult(out.Result), "a result the store keeps")
			if !read {
				var stored json.RawMessage
				require.NoError(t, fx.pool.QueryRow(context.Background(),
					`SELECT result FROM idempotency_keys WHERE key = $1 AND state = 'completed'`, out.Key).Scan(&stored))
				same, err := untrusted.Equal(stored, out.Result)
				require.NoError(t, err)
				require.True(t, same, "the key holds the result: %s, %s", stored, out.Result)
			}
			return
		}
		var app *temporal.ApplicationError
		require.ErrorAs(t, lastErr, &app)
		require.True(t, app.NonRetryable(), "the step ends visible, not retried blind: %v", lastErr)
		require.True(t, utf8.ValidString(lastErr.Error()))
		if app.Type() == activities.ErrTypeNeedsResolution {
			require.False(t, read, "a read has no effect to resolve")
			var nr activities.NeedsResolution
			require.NoError(t, app.Details(&nr))
			require.NotEmpty(t, nr.Known)
			return
		}
		require.NotEmpty(t, app.Message(), "a failure says why")
	})
}

// retryable reports whether err is an activity failure Temporal retries.
func retryable(err error) bool {
	var app *temporal.ApplicationError
	return !errors.As(err, &app) || !app.NonRetryable()
}
