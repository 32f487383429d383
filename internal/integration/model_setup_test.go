package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/planner"
)

// modelRequest is one chat-completions request as the fake model decoded
// it, spelled as the protocol spells it.
type modelRequest struct {
	Model             string `json:"model"`
	ParallelToolCalls *bool  `json:"parallel_tool_calls"`
	Messages          []struct {
		Role       string `json:"role"`
		Content    string `json:"content"`
		ToolCallID string `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
}

// userMessages returns the contents of the request's user messages after
// the goal.
func (r modelRequest) userMessages() []string {
	var out []string
	for i, m := range r.Messages {
		if m.Role == "user" && i > 1 {
			out = append(out, m.Content)
		}
	}
	return out
}

// modelCall is a tool call the fake model proposes.
type modelCall struct {
	ID, Tool string
	Args     any
}

// fakeModel is an OpenAI-compatible chat-completions endpoint over real
// HTTP whose turn function answers each request: turn n (from 1) gets the
// request and returns the calls to propose, none meaning done.
type fakeModel struct {
	srv      *httptest.Server
	mu       sync.Mutex
	requests []modelRequest
}

// serveModel starts a fake model answering with turn and configures the
// world's workers' openai planner to ask it.
func (e *env) serveModel(turn func(n int, req modelRequest) []modelCall) *fakeModel {
	e.t.Helper()
	m := &fakeModel{}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req modelRequest
		if err := json.Unmarshal(raw, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		m.mu.Lock()
		m.requests = append(m.requests, req)
		n := len(m.requests)
		m.mu.Unlock()
		calls := turn(n, req)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(chatAnswer(e.t, calls))
	}))
	e.t.Cleanup(m.srv.Close)
	e.openai = planner.OpenAIConfig{BaseURL: m.srv.URL + "/v1", Model: "fake-model"}
	return m
}

// chatAnswer is a chat-completions answer proposing calls, or saying done.
func chatAnswer(t testing.TB, calls []modelCall) []byte {
	type fn struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type toolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	msg := map[string]any{"role": "assistant", "content": "all done"}
	finish := "stop"
	if len(calls) > 0 {
		var tcs []toolCall
		for _, c := range calls {
			args, err := json.Marshal(c.Args)
			require.NoError(t, err)
			tcs = append(tcs, toolCall{ID: c.ID, Type: "function", Function: fn{Name: c.Tool, Arguments: string(args)}})
		}
		msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": tcs}
		finish = "tool_calls"
	}
	raw, err := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": msg, "finish_reason": finish}}})
	require.NoError(t, err)
	return raw
}

// seen returns the requests the model has been sent.
func (m *fakeModel) seen() []modelRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]modelRequest(nil), m.requests...)
}

// creditCall is an issue_credit call for order 1001 of tenant acme with
// reason, above the approval threshold.
func creditCall(id, reason string) modelCall {
	return modelCall{ID: id, Tool: "issue_credit", Args: map[string]any{
		"order_id": "1001", "reason": reason, "amount_cents": 12000 + len(reason), "currency": "EUR"}}
}

func reasonOf(i int) string { return fmt.Sprintf("goodwill-%02d", i) }
