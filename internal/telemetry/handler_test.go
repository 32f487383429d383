package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A caller's trace context, as a stranger to the approvals service might
// send it.
const (
	callerTrace       = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan        = "00f067aa0ba902b7"
	callerTraceparent = "00-" + callerTrace + "-" + callerSpan + "-01"
	callerTracestate  = "vendor=mallory"
	callerBaggage     = "user=mallory,role=admin"
)

// served is what the handler under test saw and sent on.
type served struct {
	trace   trace.SpanContext
	baggage baggage.Baggage
	headers http.Header
	// sent are the headers of the call the handler made to a provider
	// with the request's context.
	sent http.Header
}

// serveTraced serves one request with the caller's trace headers, from
// peer, through Handler with trusted networks; the handler answers status
// and calls a provider on the way, as starting a run does, and, unless it
// answers 401, has authenticated the caller (LinkCaller, twice, as a
// server that checks a session more than once would). It returns what the
// handler saw and the spans that ended.
func serveTraced(t *testing.T, peer string, status int, trusted ...netip.Prefix) (served, []sdktrace.ReadOnlySpan) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	var got served
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.sent = r.Header.Clone()
	}))
	t.Cleanup(provider.Close)
	out := &http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport,
		otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(Propagator()))}
	h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status != http.StatusUnauthorized {
			LinkCaller(r.Context())
			LinkCaller(r.Context())
		}
		got.trace = trace.SpanContextFromContext(r.Context())
		got.baggage = baggage.FromContext(r.Context())
		got.headers = r.Header.Clone()
		req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, provider.URL, nil)
		require.NoError(t, err)
		resp, err := out.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		w.WriteHeader(status)
	}), ServerConfig{Operation: "approvals", Trusted: trusted, Provider: tp})

	req := httptest.NewRequest(http.MethodPost, "/v1/runs", strings.NewReader(`{}`))
	req.RemoteAddr = peer
	req.Header.Set("traceparent", callerTraceparent)
	req.Header.Set("tracestate", callerTracestate)
	req.Header.Set("baggage", callerBaggage)
	rw := httptest.NewRecorder()
	h.ServeHTTP(rw, req)
	require.Equal(t, status, rw.Code)
	return got, rec.Ended()
}

// requestSpan is the server span of the request among spans.
func requestSpan(t *testing.T, spans []sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range spans {
		if s.SpanKind() == trace.SpanKindServer {
			return s
		}
	}
	require.Fail(t, "no server span", "%d spans", len(spans))
	return nil
}

// A stranger's request starts a trace of oncerun's own: its span is a
// root, linked to the caller's span without its tracestate, and neither
// the caller's trace id, tracestate nor baggage is in the request's
// context, its headers, or the call it makes to a provider.
func TestAStrangersRequestStartsATraceLinkedToTheCallers(t *testing.T) {
	t.Parallel()
	got, spans := serveTraced(t, "203.0.113.9:41000", http.StatusCreated)
	root := requestSpan(t, spans)
	assert.False(t, root.Parent().IsValid(), "the request's span is a root")
	assert.NotEqual(t, callerTrace, root.SpanContext().TraceID().String(), "a trace of its own")
	assert.Equal(t, root.SpanContext().TraceID(), got.trace.TraceID(), "the handler works in the request's trace")
	assert.Empty(t, root.SpanContext().TraceState().String())
	require.Len(t, root.Links(), 1, "the request links to the caller's span")
	link := root.Links()[0]
	assert.Equal(t, callerTrace, link.SpanContext.TraceID().String())
	assert.Equal(t, callerSpan, link.SpanContext.SpanID().String())
	assert.Empty(t, link.SpanContext.TraceState().String(), "the link carries no tracestate of the caller")
	assert.Contains(t, link.Attributes, attribute.String("oncerun.link", "caller"))

	assert.Zero(t, got.baggage.Len(), "no baggage in the request's context")
	for _, name := range []string{"traceparent", "tracestate", "baggage"} {
		assert.Empty(t, got.headers.Get(name), "the handler sees no %s", name)
	}
	assert.Contains(t, got.sent.Get("traceparent"), root.SpanContext().TraceID().String(), "the provider gets oncerun's trace")
	assert.Empty(t, got.sent.Get("tracestate"), "the provider gets no tracestate of the caller")
	assert.Empty(t, got.sent.Get("baggage"), "the provider gets no baggage of the caller")
	for _, s := range spans {
		assert.NotEqual(t, callerTrace, s.SpanContext().TraceID().String(), "span %s is not in the caller's trace", s.Name())
	}
}

// A request answered 401 is in a trace of its own too: nothing is
// exported under the caller's trace id, as a child of its span, or as a
// link to it.
func TestAnUnauthenticatedRequestExportsNothingUnderTheCallersIDs(t *testing.T) {
	t.Parallel()
	_, spans := serveTraced(t, "203.0.113.9:41000", http.StatusUnauthorized)
	require.NotEmpty(t, spans)
	for _, s := range spans {
		assert.NotEqual(t, callerTrace, s.SpanContext().TraceID().String(), "span %s is not in the caller's trace", s.Name())
		assert.NotEqual(t, callerSpan, s.Parent().SpanID().String(), "span %s is no child of the caller's", s.Name())
	}
	assert.False(t, requestSpan(t, spans).Parent().IsValid(), "the request's span is a root")
	assert.Empty(t, requestSpan(t, spans).Links(), "no link to ids a stranger chose")
}

// A peer inside a trusted network has its trace context continued: the
// request's span is a child of the caller's, with its tracestate; its
// baggage is read by nobody and sent to no provider.
func TestATrustedNetworksCallerIsTheParent(t *testing.T) {
	t.Parallel()
	got, spans := serveTraced(t, "[::ffff:10.1.2.3]:41000", http.StatusCreated,
		netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("10.0.0.0/8"))
	s := requestSpan(t, spans)
	assert.Equal(t, callerTrace, s.SpanContext().TraceID().String(), "the caller's trace")
	assert.Equal(t, callerSpan, s.Parent().SpanID().String(), "a child of the caller's span")
	assert.Equal(t, callerTracestate, s.SpanContext().TraceState().String())
	assert.Empty(t, s.Links())
	assert.Equal(t, callerTrace, got.trace.TraceID().String())
	assert.Equal(t, callerTraceparent[:36], got.sent.Get("traceparent")[:36], "the provider gets the caller's trace")
	assert.Equal(t, callerTracestate, got.sent.Get("tracestate"))
	assert.Zero(t, got.baggage.Len(), "no baggage in the request's context")
	assert.Empty(t, got.headers.Get("baggage"))
	assert.Empty(t, got.sent.Get("baggage"), "the provider gets no baggage")
}

// A peer outside every trusted network is a stranger.
func TestAPeerOutsideTheTrustedNetworksIsAStranger(t *testing.T) {
	t.Parallel()
	_, spans := serveTraced(t, "10.1.2.3:41000", http.StatusOK, netip.MustParsePrefix("192.0.2.0/24"))
	s := requestSpan(t, spans)
	assert.False(t, s.Parent().IsValid())
	assert.NotEqual(t, callerTrace, s.SpanContext().TraceID().String())
}

func TestTrusts(t *testing.T) {
	t.Parallel()
	nets := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	for addr, want := range map[string]bool{
		"10.9.8.7:1": true, "[::ffff:10.9.8.7]:1": true, "[fd12::1]:443": true,
		"11.0.0.1:1": false, "[fe80::1%eth0]:1": false, "10.9.8.7": false, "": false, "@": false,
	} {
		assert.Equal(t, want, Trusts(nets, addr), addr)
	}
	assert.False(t, Trusts(nil, "10.9.8.7:1"), "no network trusts nobody")
}

func TestParseNetworks(t *testing.T) {
	t.Parallel()
	nets, err := ParseNetworks(" 10.1.0.0/16 , 192.168.1.10,fd00::/8")
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("192.168.1.10/32"),
		netip.MustParsePrefix("fd00::/8")}, nets)
	nets, err = ParseNetworks("10.1.2.3/8")
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, nets, "a network is masked")
	nets, err = ParseNetworks(" ")
	require.NoError(t, err)
	assert.Empty(t, nets)
	for _, bad := range []string{"10.0.0.0/33", "ten", "10.0.0.0/8,", "fe80::1%eth0", "10.0.0.0/8;10.1.0.0/16"} {
		_, err := ParseNetworks(bad)
		assert.ErrorContains(t, err, "is not a network", bad)
	}
}

// The propagator of every outgoing call (HTTP, MCP _meta, Temporal's
// headers) and of Temporal's incoming headers carries trace context and
// no baggage: not a caller's from a run started before the approvals
// service dropped it, nor any other.
func TestPropagatorCarriesNoBaggage(t *testing.T) {
	t.Parallel()
	in := propagation.MapCarrier{"traceparent": callerTraceparent, "tracestate": callerTracestate, "baggage": callerBaggage}
	ctx := Propagator().Extract(context.Background(), in)
	assert.Zero(t, baggage.FromContext(ctx).Len(), "no baggage read")
	assert.Equal(t, callerTrace, trace.SpanContextFromContext(ctx).TraceID().String())

	b, err := baggage.Parse(callerBaggage)
	require.NoError(t, err)
	out := propagation.MapCarrier{}
	Propagator().Inject(baggage.ContextWithBaggage(ctx, b), out)
	assert.Equal(t, callerTraceparent, out["traceparent"])
	assert.NotContains(t, out, "baggage", "no baggage sent")
}
