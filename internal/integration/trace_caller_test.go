package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/oncerun/oncerun/workflows"
)

// callerHeaders sends a caller's trace context with every request.
type callerHeaders struct{ traceparent string }

func (c callerHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("traceparent", c.traceparent)
	r.Header.Set("tracestate", "vendor=mallory")
	r.Header.Set("baggage", "user=mallory,role=admin")
	return http.DefaultTransport.RoundTrip(r)
}

// TestACallersTraceContextStaysOutside: a run started, and approved, by
// requests that carry their callers' traceparent, tracestate and baggage
// is a trace of oncerun's own. The start request's span is its root,
// linked to the caller's span; none of the callers' trace ids, tracestate
// or baggage reaches the payment provider, the MCP desk, the approvals
// row or the run's history in Temporal.
func TestACallersTraceContextStaysOutside(t *testing.T) {
	t.Parallel()
	w := newTracedWorld(t)
	p := w.start()
	const (
		starter  = "4bf92f3577b34da6a3ce929d0e0e4736"
		approver = "5cf92f3577b34da6a3ce929d0e0e4737"
	)
	w.ops.HTTP = &http.Client{Transport: callerHeaders{"00-" + starter + "-00f067aa0ba902b7-01"}}
	w.dna.HTTP = &http.Client{Transport: callerHeaders{"00-" + approver + "-00f067aa0ba902b8-01"}}
	run := "r-" + w.queue
	w.startAndApprove(run)
	w.await(run, "the run completes", func(s workflows.Status) bool { return s.State == workflows.RunCompleted })
	p.stop()

	trace, _ := w.trace(run)
	require.NotEqual(t, starter, trace, "the run is a trace of oncerun's own")
	var root []receivedSpan
	for _, s := range w.recv.Spans() {
		assert.NotContains(t, []string{starter, approver}, s.TraceID, "span %s is in no caller's trace", s.Name)
		if s.TraceID == trace && s.ParentID == "" {
			root = append(root, s)
		}
	}
	require.Len(t, root, 1, "one root: the API's start request")
	assert.Equal(t, "approvals", root[0].Name)
	assert.Equal(t, []string{starter + "/00f067aa0ba902b7"}, root[0].Links, "the start request links to its caller's span")
	w.providerJoins(trace)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, w.dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var stored string
	require.NoError(t, conn.QueryRow(ctx, `SELECT traceparent FROM approvals WHERE tenant = 'acme' AND run_id = $1`, run).Scan(&stored))
	assert.Contains(t, stored, trace, "the approvals row holds the run's trace")

	it := temporalClient.GetWorkflowHistory(ctx, workflows.WorkflowID("acme", run), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	hist := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		hist.Events = append(hist.Events, ev)
	}
	raw := strings.Join(payloads(hist.ProtoReflect()), "\n")
	require.Contains(t, raw, trace, "the history's headers carry the run's trace context")
	for _, caller := range []string{starter, approver, "mallory"} {
		assert.NotContains(t, raw, caller, "the run's history holds nothing of a caller's")
	}
}

// payloads are the data of every payload in m (inputs, results, headers),
// decoded from the history's encoding.
func payloads(m protoreflect.Message) []string {
	if p, ok := m.Interface().(*commonpb.Payload); ok {
		return []string{string(p.GetData())}
	}
	var out []string
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				out = append(out, payloads(mv.Message())...)
				return true
			})
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				out = append(out, payloads(v.List().Get(i).Message())...)
			}
		case !fd.IsMap() && !fd.IsList() && fd.Message() != nil:
			out = append(out, payloads(v.Message())...)
		}
		return true
	})
	return out
}
