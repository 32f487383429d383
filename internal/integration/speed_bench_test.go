package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/workflows"
)

// plainNotes is the baseline of BenchmarkScriptedRunVsPlainWorkflow: the
// same notes as a scripted run's, each an activity of a plain Temporal
// workflow with no planner, no keys and no status.
type plainNotes struct{ pool *pgxpool.Pool }

// AddNote inserts note n of run in one transaction, as add_order_note's
// effect does.
func (p *plainNotes) AddNote(ctx context.Context, run string, n int) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		_, err := shop.AddNote(ctx, tx, shop.Note{Tenant: "acme", OrderID: "1001",
			Body: fmt.Sprintf("note %d", n), IdempotencyKey: fmt.Sprintf("plain/%s/%d", run, n)})
		return err
	})
}

// PlainNotesWorkflow makes steps notes, one activity after another.
func PlainNotesWorkflow(ctx workflow.Context, run string, steps int) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second})
	var p *plainNotes
	for n := 1; n <= steps; n++ {
		if err := workflow.ExecuteActivity(ctx, p.AddNote, run, n).Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkScriptedRunVsPlainWorkflow runs, one after the other on one
// Temporal server and one database, a scripted run of 10 add_order_note
// steps and a plain workflow making the same 10 inserts as activities, and
// reports the wall time of each and their ratio (the goal: at most 1.10).
func BenchmarkScriptedRunVsPlainWorkflow(b *testing.B) {
	const steps = 10
	e := setup(b)
	e.log = zap.NewNop()
	e.startWorker("w1", worker.Options{})
	plainQueue := e.queue + "-plain"
	pw := worker.New(e.tc, plainQueue, worker.Options{})
	pw.RegisterWorkflow(PlainNotesWorkflow)
	pw.RegisterActivity(&plainNotes{pool: e.pool})
	require.NoError(b, pw.Start())
	b.Cleanup(pw.Stop)
	var plan []planner.Call
	for n := 1; n <= steps; n++ {
		plan = append(plan, call("add_order_note", fmt.Sprintf(`{"order_id":"1001","text":"note %d"}`, n)))
	}
	ctx := context.Background()
	var oncerun, plain time.Duration
	for i := 0; b.Loop(); i++ {
		run := e.id(fmt.Sprintf("speed-%d", i))
		start := time.Now()
		started, err := e.runs.Start(ctx, workflows.RunInput{Tenant: "acme", RunID: run, Plan: plan})
		require.NoError(b, err)
		var st workflows.Status
		require.NoError(b, e.tc.GetWorkflow(ctx, started.WorkflowID, "").Get(ctx, &st))
		oncerun += time.Since(start)
		require.Len(b, st.Steps, steps)

		start = time.Now()
		wr, err := e.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "plain-" + run, TaskQueue: plainQueue}, PlainNotesWorkflow, run, steps)
		require.NoError(b, err)
		require.NoError(b, wr.Get(ctx, nil))
		plain += time.Since(start)
	}
	b.ReportMetric(float64(oncerun.Milliseconds())/float64(b.N), "oncerun-ms/run")
	b.ReportMetric(float64(plain.Milliseconds())/float64(b.N), "plain-ms/run")
	b.ReportMetric(float64(oncerun)/float64(plain), "ratio")
}
