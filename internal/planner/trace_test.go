package planner_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/oncerun/oncerun/internal/planner"
)

// TestOpenAIModelCallIsASpan: a model call is a span in the GenAI semantic
// conventions' terms, with the model's own account of its tokens. It sets
// the process's tracer provider, so it does not run in parallel.
func TestOpenAIModelCallIsASpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	p, _ := setup(t, planner.OpenAIConfig{Model: "gpt-test"}, respond(http.StatusOK,
		`{"model":"gpt-test-2026","usage":{"prompt_tokens":812,"completion_tokens":37},`+
			`"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"all done"}}]}`))
	_, err := p.Next(context.Background(), planner.Request{Tenant: "acme", RunID: "r1", Goal: "refund order 1001"})
	require.NoError(t, err)

	spans := rec.Ended()
	require.Len(t, spans, 1)
	s := spans[0]
	assert.Equal(t, "chat gpt-test", s.Name())
	attrs := map[string]any{}
	for _, kv := range s.Attributes() {
		attrs[string(kv.Key)] = kv.Value.AsInterface()
	}
	assert.Equal(t, "chat", attrs["gen_ai.operation.name"])
	assert.Equal(t, "gpt-test", attrs["gen_ai.request.model"])
	assert.Equal(t, "gpt-test-2026", attrs["gen_ai.response.model"])
	assert.EqualValues(t, 812, attrs["gen_ai.usage.input_tokens"])
	assert.EqualValues(t, 37, attrs["gen_ai.usage.output_tokens"])
	assert.Equal(t, []string{"stop"}, attrs["gen_ai.response.finish_reasons"])

	// A refused call is the span's error.
	p, _ = setup(t, planner.OpenAIConfig{Model: "gpt-test"}, respond(http.StatusBadRequest, `{"error":{"message":"no"}}`))
	_, err = p.Next(context.Background(), planner.Request{Tenant: "acme", RunID: "r1", Goal: "refund order 1001"})
	require.Error(t, err)
	spans = rec.Ended()
	require.Len(t, spans, 2)
	assert.Equal(t, "Error", spans[1].Status().Code.String())
}
