package approvals

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncerun/oncerun/internal/approvalstest"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/internal/telemetry"
	"github.com/oncerun/oncerun/tools"
)

// FuzzTraceHeaders sends the API requests with arbitrary traceparent,
// tracestate and baggage headers, traced as the approvals service traces
// them by default (no trusted network), and checks that:
//
//   - every request is answered as without the headers: 200 for dana's
//     list of approvals, 401 for a request without a token or with a bad
//     one, never a 500;
//   - the request's span is a root: a caller's traceparent is its parent
//     never, and a valid one is its link once the caller is signed in (a
//     request answered 401 links to nothing);
//   - no span is in the caller's trace or carries a tracestate.
//
// which picks the request.
func FuzzTraceHeaders(f *testing.F) {
	// The world of the approvals tests, built for a fuzz target: a
	// migrated database and a fake Temporal.
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, shop.Tools(shop.Config{})...)
	require.NoError(f, err)
	w := &approvalstest.World{Pool: pgtest.NewPool(f, 4), Reg: reg, Temporal: approvalstest.NewTemporal(),
		Now: time.Now().UTC(), Tokens: map[string]string{}}
	api := testServer(f, w).Handler()
	requests := []struct {
		method, path, token string
		want                int
	}{
		{http.MethodGet, "/v1/approvals", w.Tokens["dana"], http.StatusOK},
		{http.MethodGet, "/v1/approvals", "", http.StatusUnauthorized},
		{http.MethodPost, "/v1/runs", "not-a-token", http.StatusUnauthorized},
		{http.MethodPost, "/v1/runs/r-1/steps/2/approve", "", http.StatusUnauthorized},
		{http.MethodGet, "/v1/limits", w.Tokens["vic"], http.StatusOK},
		{http.MethodPost, "/v1/runs/r-1/steps/2/approve", w.Tokens["dana"], http.StatusNotFound},
		{http.MethodPost, "/v1/runs", w.Tokens["vic"], http.StatusForbidden},
	}
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=mallory", "user=mallory,role=admin", uint8(0))
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=mallory", "user=mallory,role=admin", uint8(1))
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "", "", uint8(2))
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", "a=1,b=2", "k=v;p=q", uint8(3))
	f.Add("00-00000000000000000000000000000000-0000000000000000-01", "=,=", "%zz=\x00", uint8(0))
	for which := uint8(4); which < 7; which++ {
		f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=mallory", "user=mallory,role=admin", which)
	}
	f.Add("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", strings.Repeat("k=v,", 40), strings.Repeat("x", 9000), uint8(1))
	f.Fuzz(func(t *testing.T, traceparent, tracestate, bag string, which uint8) {
		rq := requests[int(which)%len(requests)]
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		h := telemetry.Handler(api, telemetry.ServerConfig{Operation: "approvals", Provider: tp})

		req := httptest.NewRequest(rq.method, rq.path, strings.NewReader(`{}`))
		if rq.token != "" {
			req.Header.Set("Authorization", "Bearer "+rq.token)
		}
		req.Header["Traceparent"] = []string{traceparent}
		req.Header["Tracestate"] = []string{tracestate}
		req.Header["Baggage"] = []string{bag}
		rw := httptest.NewRecorder()
		h.ServeHTTP(rw, req)
		require.Equal(t, rq.want, rw.Code, "%s %s: %s", rq.method, rq.path, rw.Body)

		caller := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(),
			propagation.MapCarrier{"traceparent": traceparent}))
		spans := rec.Ended()
		require.NotEmpty(t, spans, "the request is traced")
		for _, s := range spans {
			if s.SpanKind() == trace.SpanKindServer {
				assert.False(t, s.Parent().IsValid(), "the request's span is a root")
				if rq.want == http.StatusUnauthorized {
					assert.Empty(t, s.Links(), "an anonymous request links to nothing")
				} else if caller.IsValid() {
					require.Len(t, s.Links(), 1, "the request links to the caller's span")
					assert.Equal(t, caller.TraceID(), s.Links()[0].SpanContext.TraceID())
					assert.Empty(t, s.Links()[0].SpanContext.TraceState().String())
				}
			}
			if caller.IsValid() {
				assert.NotEqual(t, caller.TraceID(), s.SpanContext().TraceID(), "span %s is not in the caller's trace", s.Name())
			}
			assert.Empty(t, s.SpanContext().TraceState().String(), "span %s carries no tracestate", s.Name())
		}
	})
}
