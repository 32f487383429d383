package planner_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/planner"
)

// received is one request as the fake endpoint decoded it, spelled the way
// the chat-completions protocol spells it.
type received struct {
	Method, Path, Auth string
	HasAuth            bool
	DecodeErr          error
	Body               struct {
		Model             string `json:"model"`
		ToolChoice        string `json:"tool_choice"`
		ParallelToolCalls *bool  `json:"parallel_tool_calls"`
		Tools             []struct {
			Type     string `json:"type"`
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
		Messages []struct {
			Role       string `json:"role"`
			Content    string `json:"content"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
}

// setup starts a chat-completions endpoint that records each request and
// answers with reply, and returns a planner configured by cfg pointed at it.
func setup(t *testing.T, cfg planner.OpenAIConfig, reply http.HandlerFunc) (*planner.OpenAI, <-chan received) {
	t.Helper()
	got := make(chan received, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := received{Method: r.Method, Path: r.URL.Path, Auth: r.Header.Get("Authorization")}
		_, rec.HasAuth = r.Header["Authorization"]
		rec.DecodeErr = json.NewDecoder(r.Body).Decode(&rec.Body)
		select {
		case got <- rec:
		default:
		}
		reply(w, r)
	}))
	t.Cleanup(srv.Close)
	cfg.BaseURL = srv.URL + "/v1/"
	if cfg.Model == "" {
		cfg.Model = "test-model"
	}
	p, err := planner.NewOpenAI(cfg)
	require.NoError(t, err)
	return p, got
}

// respond answers every request with status and body.
func respond(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
}

// answer is a chat-completions response whose message has content and the
// given tool calls, each a name and its arguments' text.
func answer(t *testing.T, content string, calls ...[2]string) string {
	t.Helper()
	toolCalls := []map[string]any{}
	for i, c := range calls {
		toolCalls = append(toolCalls, map[string]any{"id": "srv_" + strconv.Itoa(i), "type": "function",
			"function": map[string]string{"name": c[0], "arguments": c[1]}})
	}
	msg := map[string]any{"role": "assistant", "content": content, "tool_calls": toolCalls}
	b, err := json.Marshal(map[string]any{"choices": []any{map[string]any{"index": 0, "message": msg}}})
	require.NoError(t, err)
	return string(b)
}

const doneAnswer = `{"choices":[{"index":0,"message":{"role":"assistant","content":"all done"}}]}`

func TestNewOpenAIValidatesConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   planner.OpenAIConfig
		field string
	}{
		{"no model", planner.OpenAIConfig{}, "Model"},
		{"relative base url", planner.OpenAIConfig{Model: "m", BaseURL: "api.openai.com/v1"}, "BaseURL"},
		{"ftp base url", planner.OpenAIConfig{Model: "m", BaseURL: "ftp://example.com/v1"}, "BaseURL"},
		{"unparsable base url", planner.OpenAIConfig{Model: "m", BaseURL: "http://[::1"}, "BaseURL"},
		{"negative timeout", planner.OpenAIConfig{Model: "m", Timeout: -time.Second}, "Timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := planner.NewOpenAI(tc.cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.field)
		})
	}
}

func TestOpenAISendsGoalToolsAndHistory(t *testing.T) {
	t.Parallel()
	p, got := setup(t, planner.OpenAIConfig{Model: "gpt-test"}, respond(http.StatusOK, doneAnswer))
	orderSchema := `{"type":"object","properties":{"sku":{"type":"string"}},"required":["sku"]}`
	req := planner.Request{
		Tenant: "acme", RunID: "run-42", Goal: "order one A1 and pay for it",
		Tools: []planner.ToolSpec{
			{Name: "create_order", Description: "Create an order.", Schema: json.RawMessage(orderSchema)},
			{Name: "charge", Description: "Charge an order.", Schema: json.RawMessage(`{"type":"object"}`)},
		},
		History: []planner.Observation{
			{Step: 1, Call: planner.Call{Tool: "create_order", Args: json.RawMessage(`{"sku":"A1"}`)},
				Outcome: planner.OutcomeDone, Result: json.RawMessage(`{ "order_id": "o-1" }`)},
			{Step: 2, Call: planner.Call{Tool: "charge", Args: json.RawMessage(`{"order_id":"o-1"}`)},
				Outcome: planner.OutcomeFailed, Error: "card declined"},
			{Call: planner.Call{Tool: "charge", Malformed: `{"order_id":`},
				Outcome: planner.OutcomeInvalid, Error: "arguments are not valid JSON"},
		},
	}
	_, err := p.Next(t.Context(), req)
	require.NoError(t, err)

	rec := <-got
	require.NoError(t, rec.DecodeErr)
	assert.Equal(t, http.MethodPost, rec.Method)
	assert.Equal(t, "/v1/chat/completions", rec.Path)
	body := rec.Body
	assert.Equal(t, "gpt-test", body.Model)
	assert.Equal(t, "auto", body.ToolChoice)
	require.Len(t, body.Tools, len(req.Tools))
	for i, tool := range body.Tools {
		assert.Equal(t, "function", tool.Type)
		assert.Equal(t, req.Tools[i].Name, tool.Function.Name)
		assert.Equal(t, req.Tools[i].Description, tool.Function.Description)
		assert.JSONEq(t, string(req.Tools[i].Schema), string(tool.Function.Parameters))
	}

	require.Len(t, body.Messages, 2+2*len(req.History))
	assert.Equal(t, "system", body.Messages[0].Role)
	assert.Contains(t, body.Messages[0].Content, "acme")
	assert.Contains(t, body.Messages[0].Content, "run-42")
	assert.Equal(t, "user", body.Messages[1].Role)
	assert.Equal(t, req.Goal, body.Messages[1].Content)
	wantArgs := []string{`{"sku":"A1"}`, `{"order_id":"o-1"}`, `{"order_id":`}
	wantReports := []string{
		`{"outcome":"done","result":{"order_id":"o-1"}}`,
		`{"outcome":"failed","error":"card declined"}`,
		`{"outcome":"invalid","error":"arguments are not valid JSON"}`,
	}
	ids := map[string]bool{}
	for i, obs := range req.History {
		call, result := body.Messages[2+2*i], body.Messages[3+2*i]
		assert.Equal(t, "assistant", call.Role)
		require.Len(t, call.ToolCalls, 1)
		tc := call.ToolCalls[0]
		assert.Equal(t, "function", tc.Type)
		assert.Equal(t, obs.Tool, tc.Function.Name)
		assert.Equal(t, wantArgs[i], tc.Function.Arguments)
		assert.NotEmpty(t, tc.ID)
		assert.False(t, ids[tc.ID], "tool call id %q is reused", tc.ID)
		ids[tc.ID] = true
		assert.Equal(t, "tool", result.Role)
		assert.Equal(t, tc.ID, result.ToolCallID)
		assert.Equal(t, wantReports[i], result.Content)
	}
}

func TestOpenAIAuthorizationHeader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, key, want string }{
		{"with key", "sk-test", "Bearer sk-test"},
		{"without key", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, got := setup(t, planner.OpenAIConfig{APIKey: tc.key}, respond(http.StatusOK, doneAnswer))
			_, err := p.Next(t.Context(), planner.Request{Goal: "g"})
			require.NoError(t, err)
			rec := <-got
			assert.Equal(t, tc.want != "", rec.HasAuth)
			assert.Equal(t, tc.want, rec.Auth)
		})
	}
}

func TestOpenAIReadsAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		answer func(t *testing.T) string
		want   planner.Proposal
	}{
		{"tool calls in order", func(t *testing.T) string {
			return answer(t, "", [2]string{"create_order", `{"sku":"A1"}`}, [2]string{"charge", `{"order_id":"o-1"}`})
		}, planner.Proposal{Parallel: true, Calls: []planner.Call{
			{Tool: "create_order", Args: json.RawMessage(`{"sku":"A1"}`), ID: "srv_0"},
			{Tool: "charge", Args: json.RawMessage(`{"order_id":"o-1"}`), ID: "srv_1"},
		}}},
		{"empty arguments", func(t *testing.T) string {
			return answer(t, "", [2]string{"ping", ""})
		}, planner.Proposal{Calls: []planner.Call{{Tool: "ping", Args: json.RawMessage(`{}`), ID: "srv_0"}}}},
		{"malformed arguments", func(t *testing.T) string {
			return answer(t, "", [2]string{"ping", `{"x":1}`}, [2]string{"charge", `{"order_id": o-1`})
		}, planner.Proposal{Parallel: true, Calls: []planner.Call{
			{Tool: "ping", Args: json.RawMessage(`{"x":1}`), ID: "srv_0"},
			{Tool: "charge", Malformed: `{"order_id": o-1`, ID: "srv_1"},
		}}},
		{"no tool calls", func(t *testing.T) string {
			return answer(t, "the order is paid")
		}, planner.Proposal{Done: true, Message: "the order is paid"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, _ := setup(t, planner.OpenAIConfig{}, respond(http.StatusOK, tc.answer(t)))
			got, err := p.Next(t.Context(), planner.Request{Goal: "g"})
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestOpenAIStatusErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status    int
		permanent bool
	}{
		{http.StatusInternalServerError, false},
		{http.StatusServiceUnavailable, false},
		{http.StatusTooManyRequests, false},
		{http.StatusRequestTimeout, false},
		{http.StatusUnauthorized, true},
		{http.StatusBadRequest, true},
		{http.StatusNotFound, true},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			t.Parallel()
			body := `{"error":{"message":"boom"}}` + strings.Repeat(" ", 10_000) + "tail"
			p, _ := setup(t, planner.OpenAIConfig{}, respond(tc.status, body))
			_, err := p.Next(t.Context(), planner.Request{Goal: "g"})
			require.Error(t, err)
			assert.Equal(t, tc.permanent, errors.Is(err, planner.ErrPermanent), "permanent: %v", err)
			assert.Contains(t, err.Error(), strconv.Itoa(tc.status))
			assert.Contains(t, err.Error(), "boom")
			assert.Less(t, len(err.Error()), 300, "the error quotes only an excerpt of the body")
		})
	}
}

func TestOpenAIRejectsBadBody(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, body, want string }{
		{"not json", "<html>oops</html>", "decode response"},
		{"no choices", `{"choices":[]}`, "no choices"},
		{"cut off", `{"choices":[{"message":{"content":"I will now"},"finish_reason":"length"}]}`, "cut off at the token limit"},
		{"too large", doneAnswer + strings.Repeat(" ", 5<<20), "exceeds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, _ := setup(t, planner.OpenAIConfig{}, respond(http.StatusOK, tc.body))
			_, err := p.Next(t.Context(), planner.Request{Goal: "g"})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotErrorIs(t, err, planner.ErrPermanent)
		})
	}
}

func TestOpenAIRefusesInvalidResultInHistory(t *testing.T) {
	t.Parallel()
	p, got := setup(t, planner.OpenAIConfig{}, respond(http.StatusOK, doneAnswer))
	_, err := p.Next(t.Context(), planner.Request{Goal: "g", History: []planner.Observation{
		{Step: 1, Call: planner.Call{Tool: "t"}, Outcome: planner.OutcomeDone, Result: json.RawMessage(`{bad`)},
	}})
	require.ErrorIs(t, err, planner.ErrPermanent)
	assert.Empty(t, got, "no request should be sent")
}

// slow answers after five seconds unless the client gives up first.
func slow(w http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(5 * time.Second):
		respond(http.StatusOK, doneAnswer)(w, r)
	}
}

func TestOpenAIHonoursContext(t *testing.T) {
	t.Parallel()
	p, _ := setup(t, planner.OpenAIConfig{}, slow)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := p.Next(ctx, planner.Request{Goal: "g"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestOpenAIAppliesTimeout(t *testing.T) {
	t.Parallel()
	p, _ := setup(t, planner.OpenAIConfig{Timeout: 50 * time.Millisecond}, slow)
	_, err := p.Next(t.Context(), planner.Request{Goal: "g"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Client.Timeout")
}

func TestOpenAIShowsATurnsCallsAsOneAnswerAndMessagesAsTheUsers(t *testing.T) {
	t.Parallel()
	p, got := setup(t, planner.OpenAIConfig{}, respond(http.StatusOK, doneAnswer))
	history := []planner.Observation{
		// An observation of an earlier release: a turn of its own.
		{Step: 1, Call: planner.Call{Tool: "lookup", Args: json.RawMessage(`{"id":1}`)}, Outcome: planner.OutcomeDone},
		{Outcome: planner.OutcomeMessage, Message: "also refund order 2"},
		// One turn of three calls, as proposed (they finished 3, 1, 2).
		{Step: 2, Turn: 2, Call: planner.Call{Tool: "refund", Args: json.RawMessage(`{"id":1}`), ID: "call_x"}, Outcome: planner.OutcomeDone},
		{Turn: 2, Call: planner.Call{Tool: "nope", Args: json.RawMessage(`{}`), ID: "call_y"}, Outcome: planner.OutcomeInvalid, Error: "unknown"},
		{Step: 3, Turn: 2, Call: planner.Call{Tool: "refund", Args: json.RawMessage(`{"id":2}`), ID: "call_x"}, Outcome: planner.OutcomeRejected},
		{Step: 4, Turn: 3, Call: planner.Call{Tool: "lookup", Args: json.RawMessage(`{"id":2}`), ID: "call_z"}, Outcome: planner.OutcomeDone},
	}
	_, err := p.Next(t.Context(), planner.Request{Goal: "g", History: history, Tools: []planner.ToolSpec{{Name: "lookup"}}})
	require.NoError(t, err)
	body := (<-got).Body
	assert.Nil(t, body.ParallelToolCalls, "parallel calls are the endpoint's default")

	var roles []string
	for _, m := range body.Messages {
		roles = append(roles, m.Role)
	}
	assert.Equal(t, []string{"system", "user", "assistant", "tool", "user", "assistant", "tool", "tool", "tool", "assistant", "tool"}, roles)
	assert.Equal(t, "also refund order 2", body.Messages[4].Content)
	turn := body.Messages[5]
	require.Len(t, turn.ToolCalls, 3, "one assistant message carries the turn's calls")
	var ids []string
	for _, tc := range turn.ToolCalls {
		ids = append(ids, tc.ID)
	}
	// The model's ids are kept; one it gave twice is made unique.
	assert.Equal(t, "call_x", ids[0])
	assert.Equal(t, "call_y", ids[1])
	assert.NotEqual(t, "call_x", ids[2])
	for i := range 3 {
		assert.Equal(t, ids[i], body.Messages[6+i].ToolCallID, "each call answered by its tool message, in order")
	}
	assert.Contains(t, body.Messages[8].Content, `"outcome":"rejected"`)
	assert.Equal(t, "call_z", body.Messages[9].ToolCalls[0].ID)
}

func TestOpenAISequentialTurnsParallelCallsOff(t *testing.T) {
	t.Parallel()
	p, got := setup(t, planner.OpenAIConfig{Sequential: true}, respond(http.StatusOK,
		answer(t, "", [2]string{"a", `{}`}, [2]string{"b", `{}`})))
	prop, err := p.Next(t.Context(), planner.Request{Goal: "g", Tools: []planner.ToolSpec{{Name: "a"}}})
	require.NoError(t, err)
	body := (<-got).Body
	require.NotNil(t, body.ParallelToolCalls)
	assert.False(t, *body.ParallelToolCalls)
	assert.False(t, prop.Parallel, "calls the model still gave together run in order")
}
