// Package telemetry is oncerun's tracing: OpenTelemetry's Go SDK, exported
// over OTLP and configured only by the standard variables
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
// OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER, OTEL_SDK_DISABLED, and the exporter's own, such as
// OTEL_EXPORTER_OTLP_HEADERS).
//
// Tracing is off unless an endpoint is set, and then nothing is wrapped or
// installed: no Temporal interceptor, no HTTP middleware, no database
// tracer; oncerun's own spans start on OpenTelemetry's no-op provider and
// build no attributes (they check trace.Span.IsRecording first).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/keys"
)

// OpenTelemetry's standard variables that oncerun reads itself; the SDK
// reads the others (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER, OTEL_EXPORTER_OTLP_HEADERS, ...).
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
)

// Name is the instrumentation scope of oncerun's own spans.
const Name = "github.com/oncerun/oncerun"

// on is set while a process exports traces (Start with an endpoint).
var on atomic.Bool

// On reports whether this process exports traces.
func On() bool { return on.Load() }

// Enabled reports whether getenv configures tracing: an OTLP endpoint is
// set and OTEL_SDK_DISABLED is not true.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv(EnvSDKDisabled)), "true") {
		return false
	}
	return getenv(EnvEndpoint) != "" || getenv(EnvTracesEndpoint) != ""
}

// Tracing is a process's tracing: Shutdown flushes what is buffered.
type Tracing struct {
	tp *sdktrace.TracerProvider
}

// Start sets up tracing as getenv configures it, with service as the
// service name unless OTEL_SERVICE_NAME names another. Without an endpoint
// it returns a Tracing that does nothing and installs nothing.
func Start(ctx context.Context, getenv func(string) string, service string) (*Tracing, error) {
	if !Enabled(getenv) {
		return &Tracing{}, nil
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv(EnvProtocol)
	}
	switch protocol {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: oncerun exports traces over http/protobuf or grpc", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry OTLP exporter: %w", err)
	}
	// The environment's resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES)
	// comes after the default name, so that it wins.
	res, err := resource.Merge(resource.Default(),
		resource.NewSchemaless(semconv.ServiceName(service)))
	if err == nil {
		var fromEnv *resource.Resource
		fromEnv, err = resource.New(ctx, resource.WithFromEnv())
		if err == nil {
			res, err = resource.Merge(res, fromEnv)
		}
	}
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("OpenTelemetry resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	// The sampler is the SDK's, which reads OTEL_TRACES_SAMPLER and
	// OTEL_TRACES_SAMPLER_ARG.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator())
	on.Store(true)
	return &Tracing{tp: tp}, nil
}

// Shutdown exports what is buffered and stops; a Tracing that does nothing
// returns at once.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.tp == nil {
		return nil
	}
	on.Store(false)
	return t.tp.Shutdown(ctx)
}

// Flush exports the spans that have ended and wait in the batch, within
// ctx: for a span that must outlive a crash that may follow it at once.
func Flush(ctx context.Context) {
	if tp, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); ok && On() {
		_ = tp.ForceFlush(ctx)
	}
}

// Propagator is the W3C trace context (traceparent, tracestate), as
// oncerun sends and reads it. It carries no baggage either way: oncerun
// uses none, and a caller's would otherwise go on with every effect of its
// run, to the payment provider, the MCP servers and Temporal's history.
func Propagator() propagation.TextMapPropagator { return propagation.TraceContext{} }

// Tracer is the tracer of oncerun's own spans.
func Tracer() trace.Tracer { return otel.Tracer(Name) }

// TemporalInterceptors are the interceptors that trace Temporal's client,
// workflows and activities (Temporal's own, replay-safe), or none while
// tracing is off. Given in client.Options, they serve the client's workers
// too.
func TemporalInterceptors() ([]interceptor.ClientInterceptor, error) {
	if !On() {
		return nil, nil
	}
	// Status queries are reads that the inbox, the API and the CLI make
	// often: a span each would bury a run's steps in its trace.
	i, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{TextMapPropagator: Propagator(), DisableQueryTracing: true,
		SpanStarter: func(ctx context.Context, t trace.Tracer, name string, opts ...trace.SpanStartOption) trace.Span {
			_, span := t.Start(ctx, name, opts...)
			return runSpan{span}
		}})
	if err != nil {
		return nil, fmt.Errorf("Temporal tracing interceptor: %w", err)
	}
	return []interceptor.ClientInterceptor{i}, nil
}

// runSpan is a span of Temporal's interceptor: when the interceptor tags
// it with a run's workflow id, it also gets the run's oncerun.tenant and
// oncerun.run_id, so that every span of a run's workflow and activities
// names the run as oncerun's own spans do.
type runSpan struct{ trace.Span }

func (s runSpan) SetAttributes(kv ...attribute.KeyValue) {
	all := kv
	for _, a := range kv {
		if a.Key != "temporalWorkflowID" {
			continue
		}
		if tenant, run, ok := keys.ParseWorkflowID(a.Value.AsString()); ok {
			all = append(slices.Clip(kv), attribute.String("oncerun.tenant", tenant), attribute.String("oncerun.run_id", run))
		}
	}
	s.Span.SetAttributes(all...)
}

// Transport traces the requests rt sends and carries their trace context
// (traceparent, tracestate; no baggage), or is rt while tracing is off.
func Transport(rt http.RoundTripper) http.RoundTripper {
	if !On() {
		return rt
	}
	if rt == nil {
		rt = http.DefaultTransport
	}
	return otelhttp.NewTransport(rt, otelhttp.WithPropagators(Propagator()))
}

// QueryTracer traces a pool's queries, or is nil while tracing is off.
func QueryTracer() pgx.QueryTracer {
	if !On() {
		return nil
	}
	// No span per wait for a pooled connection: a step would have one per
	// statement, and the query spans say the time anyway.
	return queryTracer{otelpgx.NewTracer(otelpgx.WithDisableAcquireTracer())}
}

// queryTracer is otelpgx's tracer without the spans of BEGIN, COMMIT and
// ROLLBACK: a transaction's span (oncerun.do) and its statements' say
// when it began and ended, and a span each would be a third of a step's
// query spans.
type queryTracer struct{ *otelpgx.Tracer }

// untracedKey marks a statement whose span queryTracer left out.
type untracedKey struct{}

func (t queryTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if transactionControl(data.SQL) {
		return context.WithValue(ctx, untracedKey{}, true)
	}
	return t.Tracer.TraceQueryStart(ctx, conn, data)
}

func (t queryTracer) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	if ctx.Value(untracedKey{}) != nil {
		return
	}
	t.Tracer.TraceQueryEnd(ctx, conn, data)
}

func (t queryTracer) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	if !transactionControl(data.SQL) {
		t.Tracer.TraceBatchQuery(ctx, conn, data)
	}
}

// transactionControl reports whether sql begins, commits or rolls back a
// transaction.
func transactionControl(sql string) bool {
	word, _, _ := strings.Cut(strings.TrimSpace(sql), " ")
	return strings.EqualFold(word, "begin") || strings.EqualFold(word, "commit") || strings.EqualFold(word, "rollback")
}

// Traceparent is the W3C traceparent of the span ctx carries, for a record
// that another trace will link to; empty while tracing is off or outside a
// span.
func Traceparent(ctx context.Context) string {
	if !On() {
		return ""
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return carrier["traceparent"]
}

// Link adds to the span ctx carries a link to the span traceparent names
// (as [Traceparent] wrote it), with attrs: a request of its own, such as
// a person's decision, joined to the run it is about. An empty or
// malformed traceparent adds nothing.
func Link(ctx context.Context, traceparent string, attrs ...attribute.KeyValue) {
	span := trace.SpanFromContext(ctx)
	if traceparent == "" || !span.IsRecording() {
		return
	}
	remote := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(),
		propagation.MapCarrier{"traceparent": traceparent}))
	if remote.IsValid() {
		span.AddLink(trace.Link{SpanContext: remote, Attributes: attrs})
	}
}

// LogFields are the trace_id and span_id of the span ctx carries, for a
// log line written inside it; none outside a span.
func LogFields(ctx context.Context) []zap.Field {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	return []zap.Field{zap.String("trace_id", sc.TraceID().String()), zap.String("span_id", sc.SpanID().String())}
}

// Logger is log with the trace_id and span_id of ctx's span.
func Logger(ctx context.Context, log *zap.Logger) *zap.Logger {
	if f := LogFields(ctx); f != nil {
		return log.With(f...)
	}
	return log
}
