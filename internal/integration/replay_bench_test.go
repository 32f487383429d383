package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/workflows"
)

// BenchmarkReplayThousandRuns records 1,000 scripted runs of two database
// steps (lookup_order, add_order_note) with one in-process worker, then
// times `oncerun replay --query 'TaskQueue = "<the queue>"' --limit 1000`
// over them, as a process against the in-process Temporal server: every
// history read from Temporal and replayed. It reports runs/s (the goal:
// 1,000 runs in under a minute on a 2-core machine) and how long the
// recording took (record-s, not part of the timed work).
//
//	go test -run '^$' -bench BenchmarkReplayThousandRuns -benchtime 1x -timeout 30m ./internal/integration/
func BenchmarkReplayThousandRuns(b *testing.B) {
	const runs = 1000
	e := setup(b)
	e.log = zap.NewNop()
	e.startWorker("w1", worker.Options{})
	bin := buildOncerun(b)
	plan := []planner.Call{
		call(shop.ToolLookupOrder, `{"order_id":"1001"}`),
		call(shop.ToolAddOrderNote, `{"order_id":"1001","text":"replayed"}`),
	}

	start := time.Now()
	ctx := context.Background()
	ids := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range ids {
				started, err := e.runs.Start(ctx, workflows.RunInput{Tenant: "acme", RunID: e.id(fmt.Sprintf("replay-%d", i)), Plan: plan})
				if err != nil {
					b.Error(err)
					continue
				}
				var st workflows.Status
				if err := e.tc.GetWorkflow(ctx, started.WorkflowID, "").Get(ctx, &st); err != nil || st.State != workflows.RunCompleted {
					b.Errorf("run %d: %s, %v", i, st.State, err)
				}
			}
		})
	}
	for i := range runs {
		ids <- i
	}
	close(ids)
	wg.Wait()
	require.False(b, b.Failed())
	query := fmt.Sprintf(`TaskQueue = %q`, e.queue)
	listed(b, query+` AND ExecutionStatus = "Completed"`, runs, 5*time.Minute)
	recorded := time.Since(start)

	var took time.Duration
	for b.Loop() {
		start := time.Now()
		out, code := replayCLI(b, bin, "--query", query, "--limit", fmt.Sprint(runs))
		took += time.Since(start)
		require.Equal(b, 0, code, out)
		require.Contains(b, out, fmt.Sprintf("checked %d runs: %d ok,", runs, runs))
	}
	b.ReportMetric(float64(runs*b.N)/took.Seconds(), "runs/s")
	b.ReportMetric(took.Seconds()/float64(b.N), "s/replay")
	b.ReportMetric(recorded.Seconds(), "record-s")
}
