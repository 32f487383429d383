package activities

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/metrics"
	"github.com/oncerun/oncerun/internal/telemetry"
)

// Attributes of oncerun's spans.
const (
	attrTenant   = attribute.Key("oncerun.tenant")
	attrRunID    = attribute.Key("oncerun.run_id")
	attrStep     = attribute.Key("oncerun.step")
	attrTool     = attribute.Key("oncerun.tool")
	attrKey      = attribute.Key("oncerun.key")
	attrArgsHash = attribute.Key("oncerun.args_hash")
	attrClass    = attribute.Key("oncerun.class")
	attrOutcome  = attribute.Key("oncerun.outcome")
)

// startStep starts the span of one attempt at a step's call, under the
// attempt's activity span: its key and arguments' hash, and, once known,
// its class and outcome (see endStep). With tracing off the span is
// OpenTelemetry's no-op, and no attribute is built.
func startStep(ctx context.Context, in ToolInput, key keys.Key) (context.Context, trace.Span) {
	ctx, span := telemetry.Tracer().Start(ctx, "oncerun.step "+in.Tool)
	if span.IsRecording() {
		span.SetAttributes(attrTenant.String(in.Tenant), attrRunID.String(in.RunID), attrStep.Int64(in.Step),
			attrTool.String(in.Tool), attrKey.String(key.String()), attrArgsHash.String(in.ArgsHash))
	}
	return ctx, span
}

// outcomeParked is the outcome of a step that waits at a spend limit.
const outcomeParked = "parked"

// stepTrace is what a step's span says when it ends: the tool's class,
// the attempt's outcome (the metrics' words: executed, replayed, resolved,
// needs_resolution, in_flight, ..., or parked) and, for one that did not
// complete, its error.
type stepTrace struct {
	span    trace.Span
	class   string
	outcome string
	err     error
}

// called counts a call's outcome in the metrics, as the span's.
func (st *stepTrace) called(m *metrics.Metrics, tool, outcome string) {
	m.ToolCall(tool, outcome)
	st.outcome = outcome
}

func (st *stepTrace) end() {
	if st.span.IsRecording() {
		st.span.SetAttributes(attrClass.String(st.class), attrOutcome.String(st.outcome))
		if st.err != nil {
			st.span.RecordError(st.err)
			st.span.SetStatus(codes.Error, st.outcome)
		}
	}
	st.span.End()
}

// startTurn starts the span of one planning turn: the run's planner asked
// for its next calls.
func startTurn(ctx context.Context, in PlanInput) (context.Context, trace.Span) {
	ctx, span := telemetry.Tracer().Start(ctx, "oncerun.plan "+in.Planner)
	if span.IsRecording() {
		span.SetAttributes(attrTenant.String(in.Tenant), attrRunID.String(in.RunID), attribute.String("oncerun.planner", in.Planner),
			attribute.Int("oncerun.turn_history", len(in.History)))
	}
	return ctx, span
}

// endTurn ends a turn's span with what the planner proposed.
func endTurn(span trace.Span, out PlanOutput, err error) {
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("oncerun.calls", len(out.Calls)), attribute.Bool("oncerun.done", out.Done))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "the planner failed")
		}
	}
	span.End()
}

// traceApproval records a step's wait for a person as one span, from the
// request to the decision (or expiry, or withdrawal) the run applied, with
// who decided: a wait of days is no span held open in a worker, which a
// crash would lose. It reads the request's time from the approvals row,
// only while tracing is on.
func (a *Activities) traceApproval(ctx context.Context, in ApprovalResolution) {
	if !telemetry.On() {
		return
	}
	start, tool := in.DecidedAt, ""
	if row, err := approvalstore.Lookup(ctx, a.Pool, in.Tenant, in.RunID, in.Step); err == nil {
		start, tool = row.RequestedAt, row.Tool
	}
	_, span := telemetry.Tracer().Start(ctx, "oncerun.approval "+tool, trace.WithTimestamp(start), trace.WithAttributes(
		attrTenant.String(in.Tenant), attrRunID.String(in.RunID), attrStep.Int64(in.Step), attrTool.String(tool),
		attribute.String("oncerun.approver", in.DecidedBy), attribute.String("oncerun.decision", in.State),
		attribute.Int("oncerun.round", max(in.Round, 1))))
	span.End(trace.WithTimestamp(in.DecidedAt))
	// A person's decision is rare and its span is what says who decided:
	// it is exported now, so that a crash right after does not lose it.
	fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	telemetry.Flush(fctx)
}

// endCall ends the span of a call to the outside (the external call, its
// paired read): with its error, and what it said (flag, as attribute name).
func endCall(span trace.Span, name string, err error, flag bool) {
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool(name, flag))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "the call failed")
		}
	}
	span.End()
}
