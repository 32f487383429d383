package integration

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/workflows"
)

func call(tool, args string) planner.Call {
	return planner.Call{Tool: tool, Args: json.RawMessage(args)}
}

// refundPlan looks order 1001 up, notes it and credits it; a credit of
// amount cents above the threshold waits for approval.
func refundPlan(amount string) []planner.Call {
	return []planner.Call{
		call(shop.ToolLookupOrder, `{"order_id":"1001"}`),
		call(shop.ToolAddOrderNote, `{"order_id":"1001","text":"parcel arrived damaged"}`),
		call(shop.ToolIssueCredit, `{"order_id":"1001","reason":"damaged","amount_cents":`+amount+`,"currency":"EUR"}`),
	}
}

func TestRunSurvivesWorkerRestartDuringApproval(t *testing.T) {
	t.Parallel()
	e := setup(t)
	run := e.id("r-pause")
	ctx := context.Background()
	w1 := e.startWorker("w1", worker.Options{})
	_, err := e.runs.Start(ctx, workflows.RunInput{Tenant: "acme", RunID: run, Plan: refundPlan("25900")})
	require.NoError(t, err)

	st := e.waitFor("acme", run, "the credit's approval", func(s workflows.Status) bool {
		return s.State == workflows.RunWaitingForApproval
	})
	require.Len(t, st.Steps, 3)
	credit := st.Steps[2]
	require.Equal(t, workflows.StepPendingApproval, credit.State)
	assert.Zero(t, e.count("credits", "tenant = 'acme'"), "nothing is credited before the approval")
	pending, err := e.runs.Pending(ctx, "acme")
	require.NoError(t, err)
	require.Len(t, pending, 1)
	assert.Equal(t, credit.ArgsHash, pending[0].ArgsHash)

	w1.Stop()
	w2 := e.startWorker("w2", worker.Options{})
	// The first query after a worker change may wait out the old worker's
	// sticky queue; waitFor retries it.
	e.waitFor("acme", run, "an answer from the new worker", func(s workflows.Status) bool {
		return s.State == workflows.RunWaitingForApproval
	})
	step := e.decide(run, 3, workflows.DecisionApprove, "dana", "")
	assert.NotEqual(t, workflows.StepPendingApproval, step.State)

	final := e.result("acme", run)
	assert.Equal(t, workflows.RunCompleted, final.State)
	for _, s := range final.Steps {
		assert.Equal(t, workflows.StepDone, s.State, "step %d", s.Step)
	}
	assert.Equal(t, "dana", final.Steps[2].Approval.Approver)
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND order_id = '1001'"))
	assert.Equal(t, 1, e.count("order_notes", "tenant = 'acme' AND order_id = '1001'"))
	assert.Equal(t, 1, e.count("approvals", "state = 'approved' AND decided_by = 'dana'"))
	assert.Equal(t, 1.0, testutil.ToFloat64(w2.metrics.ToolCalls.WithLabelValues(shop.ToolIssueCredit, "executed")))
}

// blockAfterCredit lets the first issue_credit attempt commit its effect,
// then never reports the result to Temporal, as a worker that dies right
// after the commit.
type blockAfterCredit struct {
	interceptor.WorkerInterceptorBase
	committed chan struct{}
}

func (b *blockAfterCredit) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &blockingActivity{committed: b.committed}
	i.Next = next
	return i
}

type blockingActivity struct {
	interceptor.ActivityInboundInterceptorBase
	committed chan struct{}
}

func (b *blockingActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	res, err := b.Next.ExecuteActivity(ctx, in)
	if err != nil || len(in.Args) == 0 {
		return res, err
	}
	if tin, ok := in.Args[0].(activities.ToolInput); ok && tin.Tool == shop.ToolIssueCredit {
		close(b.committed)
		<-ctx.Done()
		return nil, errors.New("worker died after the commit")
	}
	return res, err
}

func TestCrashAfterCommitIsReplayedNotReexecuted(t *testing.T) {
	t.Parallel()
	e := setup(t)
	run := e.id("r-crash")
	// A short timeout, so Temporal retries soon after the first attempt
	// goes silent.
	for i := range e.tools {
		if e.tools[i].Name == shop.ToolIssueCredit {
			e.tools[i].Timeout = 2 * time.Second
		}
	}
	ctx := context.Background()
	block := &blockAfterCredit{committed: make(chan struct{})}
	w1 := e.startWorker("w1", worker.Options{Interceptors: []interceptor.WorkerInterceptor{block}})
	_, err := e.runs.Start(ctx, workflows.RunInput{Tenant: "acme", RunID: run, Plan: refundPlan("5000")})
	require.NoError(t, err)

	select {
	case <-block.committed:
	case <-time.After(time.Minute):
		t.Fatal("the credit step never ran")
	}
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme'"), "the first attempt committed its credit")
	w1.Stop()
	w2 := e.startWorker("w2", worker.Options{})

	final := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, final.State)
	credit := final.Steps[2]
	assert.Equal(t, workflows.StepDone, credit.State)
	assert.True(t, credit.Replayed, "the retried step returned the stored result")
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme'"), "exactly one credit")
	assert.Equal(t, 1, e.count("idempotency_keys", "key = $1 AND state = 'completed'", credit.Key))
	assert.Equal(t, 1.0, testutil.ToFloat64(w2.metrics.ToolCalls.WithLabelValues(shop.ToolIssueCredit, "replayed")))
	assert.Zero(t, testutil.ToFloat64(w2.metrics.ToolCalls.WithLabelValues(shop.ToolIssueCredit, "executed")))
	var stored json.RawMessage
	require.NoError(t, e.pool.QueryRow(ctx, "SELECT result FROM idempotency_keys WHERE key = $1", credit.Key).Scan(&stored))
	assert.JSONEq(t, string(stored), string(credit.Result), "the step's result is the first attempt's")
}

func TestStartingARunTwiceFindsTheFirst(t *testing.T) {
	t.Parallel()
	e := setup(t)
	run := e.id("r-twice")
	ctx := context.Background()
	e.startWorker("w1", worker.Options{})
	in := workflows.RunInput{Tenant: "acme", RunID: run, Plan: refundPlan("5000")}

	first, err := e.runs.Start(ctx, in)
	require.NoError(t, err)
	assert.False(t, first.Existing)
	again, err := e.runs.Start(ctx, in)
	require.NoError(t, err)
	assert.True(t, again.Existing)
	assert.Equal(t, first.RunID, again.RunID, "one workflow execution")

	other := in
	other.Plan = refundPlan("6000")
	_, err = e.runs.Start(ctx, other)
	require.ErrorIs(t, err, runs.ErrConflict)

	e.result("acme", run)
	closed, err := e.runs.Start(ctx, in)
	require.NoError(t, err, "a closed run is found too")
	assert.True(t, closed.Existing)
	assert.Equal(t, first.RunID, closed.RunID)
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme'"))
}
