package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ServerConfig says how a server traces the requests it serves.
type ServerConfig struct {
	// Operation names the requests' spans.
	Operation string
	// Trusted are the networks whose callers' trace context a request
	// continues: a request whose peer (the connection's own address,
	// never X-Forwarded-For) is inside one is a child of the caller's
	// traceparent, with its tracestate. Default none: every request starts
	// a trace of its own.
	Trusted []netip.Prefix
	// Provider makes the spans. Default: the process's, while tracing is
	// on.
	Provider trace.TracerProvider
}

// Handler traces the requests h serves as cfg says, or is h while tracing
// is off and cfg names no Provider.
//
// As the W3C Trace Context recommends for a public endpoint, a request
// from a peer outside cfg.Trusted starts a trace of its own, and h sees
// no traceparent, tracestate or baggage header. A valid traceparent its
// caller sent becomes a link of the request's root span (attribute
// oncerun.link = caller), without its tracestate, once h has
// authenticated the caller ([LinkCaller]): an anonymous request exports
// nothing that names the caller's ids. Whatever h does in the
// request's context (a run it starts, a row it writes, a call it makes)
// is in oncerun's trace, never in the caller's. No request's baggage is
// read.
func Handler(h http.Handler, cfg ServerConfig) http.Handler {
	tp := cfg.Provider
	if tp == nil {
		if !On() {
			return h
		}
		tp = otel.GetTracerProvider()
	}
	traced := otelhttp.NewHandler(h, cfg.Operation,
		otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(Propagator()))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		traced.ServeHTTP(w, withoutCallerContext(r, Trusts(cfg.Trusted, r.RemoteAddr)))
	})
}

// callerKey holds, in a request's context, the span context its untrusted
// caller sent, for LinkCaller.
type callerKey struct{}

// callerLink is the span context an untrusted caller sent, and whether
// the request's span links to it yet.
type callerLink struct {
	span   trace.SpanContext
	linked atomic.Bool
}

// withoutCallerContext is r without the headers of its caller's trace
// context that oncerun does not take: baggage always, traceparent and
// tracestate unless trusted. An untrusted caller's valid traceparent goes
// on in the request's context, for linkCaller.
func withoutCallerContext(r *http.Request, trusted bool) *http.Request {
	drop := []string{"Baggage"}
	if !trusted {
		drop = append(drop, "Traceparent", "Tracestate")
	}
	if !slices.ContainsFunc(drop, func(k string) bool { return len(r.Header[k]) > 0 }) {
		return r
	}
	ctx := r.Context()
	if !trusted {
		// The traceparent alone: the link names the caller's span and
		// carries none of its tracestate.
		caller := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(),
			propagation.MapCarrier{"traceparent": r.Header.Get("Traceparent")}))
		if caller.IsValid() {
			ctx = context.WithValue(ctx, callerKey{}, &callerLink{span: caller})
		}
	}
	r = r.Clone(ctx)
	for _, k := range drop {
		r.Header.Del(k)
	}
	return r
}

// LinkCaller links the span of the request whose context ctx is to the
// span its untrusted caller sent, if any, once: a server calls it when it
// has authenticated the caller, so that a request nobody signed exports
// no link to ids a stranger chose.
func LinkCaller(ctx context.Context) {
	caller, ok := ctx.Value(callerKey{}).(*callerLink)
	if !ok || caller.linked.Swap(true) {
		return
	}
	trace.SpanFromContext(ctx).AddLink(trace.Link{SpanContext: caller.span,
		Attributes: []attribute.KeyValue{attribute.String("oncerun.link", "caller")}})
}

// Trusts reports whether remoteAddr, a connection's peer as
// http.Request.RemoteAddr has it (host:port), is inside one of nets.
func Trusts(nets []netip.Prefix, remoteAddr string) bool {
	if len(nets) == 0 {
		return false
	}
	peer, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return false
	}
	addr := peer.Addr().Unmap()
	for _, n := range nets {
		if n.Contains(addr) {
			return true
		}
	}
	return false
}

// ParseNetworks reads a comma-separated list of networks in CIDR notation
// (10.0.0.0/8, fd00::/8) or single addresses (10.1.2.3); an empty s is
// none.
func ParseNetworks(s string) ([]netip.Prefix, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var nets []netip.Prefix
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		n, err := netip.ParsePrefix(item)
		if err != nil {
			addr, aerr := netip.ParseAddr(item)
			if aerr != nil || addr.Zone() != "" {
				return nil, fmt.Errorf("%q is not a network such as 10.0.0.0/8 or fd00::/8, nor an address", item)
			}
			n = netip.PrefixFrom(addr, addr.BitLen())
		}
		nets = append(nets, n.Masked())
	}
	return nets, nil
}
