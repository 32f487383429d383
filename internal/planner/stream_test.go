package planner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/planner"
)

// sse answers with the given chunks as a stream, then [DONE] unless cut.
func sse(chunks []string, cut bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range chunks {
			fmt.Fprintf(w, "data: %s\n\n", c)
			w.(http.Flusher).Flush()
		}
		if !cut {
			fmt.Fprint(w, "data: [DONE]\n\n")
		}
	}
}

func TestOpenAIStreamsTheModelsTextAndJoinsItsToolCalls(t *testing.T) {
	t.Parallel()
	chunks := []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":"I will "}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"credit it."}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"issue_credit","arguments":"{\"order_"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"id\":\"1001\"}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"lookup_order","arguments":"{}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7}}`,
	}
	p, got := setup(t, planner.OpenAIConfig{}, sse(chunks, false))
	var deltas []string
	prop, err := p.Next(context.Background(), planner.Request{Goal: "refund", OnText: func(d string) { deltas = append(deltas, d) }})
	require.NoError(t, err)
	assert.Equal(t, []string{"I will ", "credit it."}, deltas, "the text as it came")
	require.Len(t, prop.Calls, 2)
	assert.Equal(t, "issue_credit", prop.Calls[0].Tool)
	assert.JSONEq(t, `{"order_id":"1001"}`, string(prop.Calls[0].Args))
	assert.Equal(t, "call_1", prop.Calls[0].ID)
	assert.Equal(t, "lookup_order", prop.Calls[1].Tool)
	rec := <-got
	require.NoError(t, rec.DecodeErr)

	// Without a reader of its text, the planner asks for no stream.
	p2, got2 := setup(t, planner.OpenAIConfig{}, respond(http.StatusOK, doneAnswer))
	prop, err = p2.Next(context.Background(), planner.Request{Goal: "refund"})
	require.NoError(t, err)
	assert.True(t, prop.Done)
	assert.Equal(t, "all done", prop.Message)
	<-got2
}

func TestOpenAIStreamedFinalAnswerAndItsFaults(t *testing.T) {
	t.Parallel()
	final := []string{
		`{"choices":[{"index":0,"delta":{"content":"Credited "}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"order 1001."},"finish_reason":"stop"}]}`,
	}
	p, _ := setup(t, planner.OpenAIConfig{}, sse(final, false))
	var text strings.Builder
	prop, err := p.Next(context.Background(), planner.Request{Goal: "refund", OnText: func(d string) { text.WriteString(d) }})
	require.NoError(t, err)
	assert.True(t, prop.Done)
	assert.Equal(t, "Credited order 1001.", prop.Message)
	assert.Equal(t, prop.Message, text.String())

	// A stream cut before its answer ended is an error to retry, not an
	// answer.
	cut, _ := setup(t, planner.OpenAIConfig{}, sse(final[:1], true))
	_, err = cut.Next(context.Background(), planner.Request{Goal: "refund", OnText: func(string) {}})
	require.Error(t, err)
	assert.NotErrorIs(t, err, planner.ErrPermanent)
	assert.Contains(t, err.Error(), "stream ended before the answer did")

	// An endpoint that cannot stream answers whole: the planner takes it.
	whole, _ := setup(t, planner.OpenAIConfig{}, respond(http.StatusOK, doneAnswer))
	prop, err = whole.Next(context.Background(), planner.Request{Goal: "refund", OnText: func(string) {}})
	require.NoError(t, err)
	assert.Equal(t, "all done", prop.Message)

	// An endpoint that refuses to stream is asked again for the whole
	// answer.
	refusing, _ := setup(t, planner.OpenAIConfig{}, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "application/json" {
			respond(http.StatusBadRequest, `{"error":{"message":"stream_options is not supported"}}`)(w, r)
			return
		}
		respond(http.StatusOK, doneAnswer)(w, r)
	})
	prop, err = refusing.Next(context.Background(), planner.Request{Goal: "refund", OnText: func(string) {}})
	require.NoError(t, err)
	assert.Equal(t, "all done", prop.Message)

	// A chunk that is not JSON names itself.
	bad, _ := setup(t, planner.OpenAIConfig{}, sse([]string{`{"choices":[`}, false))
	_, err = bad.Next(context.Background(), planner.Request{Goal: "refund", OnText: func(string) {}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "decode a streamed event")
}

func TestOpenAIAsksForAStreamOnlyWithAReader(t *testing.T) {
	t.Parallel()
	bodies := make(chan map[string]any, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b map[string]any
		_ = json.NewDecoder(r.Body).Decode(&b)
		bodies <- b
		respond(http.StatusOK, doneAnswer)(w, r)
	}))
	t.Cleanup(srv.Close)
	p, err := planner.NewOpenAI(planner.OpenAIConfig{BaseURL: srv.URL, Model: "m"})
	require.NoError(t, err)

	_, err = p.Next(context.Background(), planner.Request{Goal: "g"})
	require.NoError(t, err)
	b := <-bodies
	assert.NotContains(t, b, "stream")
	assert.NotContains(t, b, "stream_options")

	_, err = p.Next(context.Background(), planner.Request{Goal: "g", OnText: func(string) {}})
	require.NoError(t, err)
	b = <-bodies
	assert.Equal(t, true, b["stream"])
	assert.Equal(t, map[string]any{"include_usage": true}, b["stream_options"])
}
