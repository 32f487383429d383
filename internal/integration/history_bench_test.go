package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/workflows"
)

// BenchmarkScriptedRunHistory runs a scripted run of 1,100 lookups and
// reports the size of its history, every Continue-As-New generation
// included: what one run costs the Temporal database. Run it with
// -benchtime 1x (make bench-history): each iteration is a whole run.
func BenchmarkScriptedRunHistory(b *testing.B) {
	const steps = 1100
	e := setup(b)
	e.log = zap.NewNop()
	e.startWorker("w1", worker.Options{})
	var plan []planner.Call
	for i := range steps {
		plan = append(plan, call("lookup_order", fmt.Sprintf(`{"order_id":"%d"}`, 1000+i)))
	}
	ctx := context.Background()
	var total, planBytes, generations int
	for i := 0; b.Loop(); i++ {
		run := e.id(fmt.Sprintf("history-%d", i))
		started, err := e.runs.Start(ctx, workflows.RunInput{Tenant: "acme", RunID: run, Plan: plan, Limits: workflows.Limits{MaxSteps: steps}})
		require.NoError(b, err)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
		var st workflows.Status
		require.NoError(b, e.tc.GetWorkflow(wctx, started.WorkflowID, "").Get(wctx, &st))
		cancel()
		require.Len(b, st.Steps, steps)
		total, planBytes, generations = historySize(b, e, started.WorkflowID, started.RunID)
	}
	b.ReportMetric(float64(total), "history-bytes/run")
	b.ReportMetric(float64(planBytes), "plan-bytes/run")
	b.ReportMetric(float64(generations), "generations/run")
}

// historySize sums the encoded size of every event of a run's history,
// following Continue-As-New from the first generation, and of the events
// that scheduled its Plan activities or recorded its local planning turns.
func historySize(b *testing.B, e *env, workflowID, runID string) (total, planBytes, generations int) {
	ctx := context.Background()
	for runID != "" {
		generations++
		it := e.tc.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		next := ""
		for it.HasNext() {
			ev, err := it.Next()
			require.NoError(b, err)
			total += proto.Size(ev)
			if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == "Plan" {
				planBytes += proto.Size(ev)
			}
			// A script's turns are local activities, as its database steps are.
			if m := ev.GetMarkerRecordedEventAttributes(); m != nil && m.GetMarkerName() == "LocalActivity" && localActivityOf(m, "Plan") {
				planBytes += proto.Size(ev)
			}
			if c := ev.GetWorkflowExecutionContinuedAsNewEventAttributes(); c != nil {
				next = c.GetNewExecutionRunId()
			}
		}
		runID = next
	}
	return total, planBytes, generations
}

// BenchmarkTenStepRunHistory runs a scripted run of 10 keyed
// add_order_note steps and reports its history per step: events and
// encoded bytes (make bench-history). Each iteration is a whole run.
func BenchmarkTenStepRunHistory(b *testing.B) {
	const steps = 10
	e := setup(b)
	e.log = zap.NewNop()
	e.startWorker("w1", worker.Options{})
	var plan []planner.Call
	for i := range steps {
		plan = append(plan, call("add_order_note", fmt.Sprintf(`{"order_id":"1001","text":"note %d"}`, i)))
	}
	ctx := context.Background()
	var events, bytes int
	var byType map[enumspb.EventType][2]int
	for i := 0; b.Loop(); i++ {
		run := e.id(fmt.Sprintf("ten-%d", i))
		started, err := e.runs.Start(ctx, workflows.RunInput{Tenant: "acme", RunID: run, Plan: plan})
		require.NoError(b, err)
		wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		var st workflows.Status
		require.NoError(b, e.tc.GetWorkflow(wctx, started.WorkflowID, "").Get(wctx, &st))
		cancel()
		require.Len(b, st.Steps, steps)
		events, bytes, byType = 0, 0, map[enumspb.EventType][2]int{}
		it := e.tc.GetWorkflowHistory(ctx, started.WorkflowID, started.RunID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			require.NoError(b, err)
			events++
			bytes += proto.Size(ev)
			n := byType[ev.GetEventType()]
			byType[ev.GetEventType()] = [2]int{n[0] + 1, n[1] + proto.Size(ev)}
		}
	}
	// With -v, where the bytes are: each event type's count and size.
	for _, t := range slices.Sorted(maps.Keys(byType)) {
		b.Logf("%-48s %3d events %6d bytes", t, byType[t][0], byType[t][1])
	}
	b.ReportMetric(float64(events)/steps, "events/step")
	b.ReportMetric(float64(bytes)/steps, "history-bytes/step")
}
