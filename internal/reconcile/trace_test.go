package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/oncerun/oncerun/internal/reconcile"
)

// A reconciliation pass is one span, oncerun.reconcile, whose attributes
// say what it checked, recorded and found.
func TestAPassIsOneSpanWithItsCounts(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	f := setup(t)
	f.ledger = append(f.ledger, refund("re_1", key(t, "r1", 3), 2500, "eur", f.now.Add(-time.Hour)))
	rep, err := reconcile.Pass(context.Background(), f.config())
	require.NoError(t, err)
	require.Equal(t, 1, rep.DriftCount)

	var spans []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "oncerun.reconcile" {
			spans = append(spans, s)
		}
	}
	require.Len(t, spans, 1)
	attrs := map[string]int64{}
	for _, kv := range spans[0].Attributes() {
		attrs[string(kv.Key)] = kv.Value.AsInt64()
	}
	assert.Equal(t, int64(rep.Checked), attrs["oncerun.checked"])
	assert.Equal(t, int64(1), attrs["oncerun.recorded"])
	assert.Equal(t, int64(1), attrs["oncerun.drift_count"])
}
