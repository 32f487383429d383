package mcp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/tools"
)

// answerServer serves one read tool, answer, whose result is what the
// test sets: its structured content as JSON text, and its text items.
func answerServer(t *testing.T, structured string, texts ...string) tools.Tool {
	t.Helper()
	s := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "answers", Version: "v1"}, nil)
	s.AddTool(&mcpsdk.Tool{Name: "answer", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, _ *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
			res := &mcpsdk.CallToolResult{StructuredContent: json.RawMessage(structured)}
			for _, text := range texts {
				res.Content = append(res.Content, &mcpsdk.TextContent{Text: text})
			}
			return res, nil
		})
	srv := httptest.NewServer(mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return s }, nil))
	t.Cleanup(srv.Close)
	d := load(t, httpConfig("desk", srv.URL, map[string]mcp.ToolConfig{"answer": {Class: tools.ClassRead}}))
	return toolOf(t, d, "desk_answer")
}

// answer calls tool and returns its result as JSON.
func answer(t *testing.T, tool tools.Tool) (json.RawMessage, error) {
	t.Helper()
	res, err := tool.Run(context.Background(), callOf(t, tool.Name, 1, `{}`))
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(res)
	require.NoError(t, err)
	return raw, nil
}

func TestAnIntegerBeyondDoublesIsReadExactlyFromTheTextOfTheStructuredContent(t *testing.T) {
	t.Parallel()
	content := `{"ticket": {"id": 9007199254740993, "note": "wet parcel"}}`
	raw, err := answer(t, answerServer(t, content, content))
	require.NoError(t, err)
	assert.Equal(t, `{"ticket":{"id":9007199254740993,"note":"wet parcel"}}`, string(raw))
}

func TestAnIntegerBeyondDoublesWithoutExactTextCannotBeKept(t *testing.T) {
	t.Parallel()
	for name, texts := range map[string][]string{
		"no text":         nil,
		"other text":      {"ticket opened"},
		"text that lies":  {`{"id":1}`},
		"in an array":     nil,
		"negative number": nil,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			content := `{"id":9007199254740993}`
			switch name {
			case "in an array":
				content = `{"ids":[1,9007199254740993]}`
			case "negative number":
				content = `-9007199254740993`
			}
			_, err := answer(t, answerServer(t, content, texts...))
			require.ErrorIs(t, err, tools.ErrUnstorable)
			assert.Contains(t, err.Error(), "beyond 2^53")
		})
	}
}

func TestNumbersADoubleHoldsComeThroughAsTheyAre(t *testing.T) {
	t.Parallel()
	raw, err := answer(t, answerServer(t, `{"id":9007199254740991,"price":0.1,"mass":6e24,"n":-3}`))
	require.NoError(t, err)
	assert.JSONEq(t, `{"id":9007199254740991,"price":0.1,"mass":6e24,"n":-3}`, string(raw))
}

func TestAnAnswerTheClientCannotReadIsAnAnswerThatCannotBeKept(t *testing.T) {
	t.Parallel()
	_, err := answer(t, answerServer(t, `{"x":1e400}`))
	require.ErrorIs(t, err, tools.ErrUnstorable)
	assert.NotErrorIs(t, err, tools.ErrNotApplied, "the server ran the call")
	assert.Contains(t, err.Error(), "the server answered, but its result cannot be read")
}
