package integration

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/workflows"
)

func TestRejectedStepDoesNotRun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	run := e.id("r-reject")
	ctx := context.Background()
	e.startWorker("w1", worker.Options{})
	plan := append(refundPlan("25900"), call(shop.ToolGetCredit, `{"order_id":"1001","reason":"damaged"}`))
	_, err := e.runs.Start(ctx, workflows.RunInput{Tenant: "acme", RunID: run, Plan: plan})
	require.NoError(t, err)
	e.waitFor("acme", run, "the credit's approval", func(s workflows.Status) bool {
		return s.State == workflows.RunWaitingForApproval
	})
	e.decide(run, 3, workflows.DecisionReject, "dana", "not damaged")

	final := e.result("acme", run)
	require.Len(t, final.Steps, 4)
	assert.Equal(t, workflows.StepRejected, final.Steps[2].State)
	assert.Equal(t, workflows.StepDone, final.Steps[3].State)
	assert.JSONEq(t, `{"found":false,"order_id":"1001","reason":"damaged"}`, string(final.Steps[3].Result))
	assert.Zero(t, e.count("credits", "tenant = 'acme'"))
	assert.Equal(t, 1, e.count("approvals", "state = 'rejected' AND comment = 'not damaged'"))
}

func TestLongRunContinuesAsNewWithItsSteps(t *testing.T) {
	t.Parallel()
	// Each step adds an event (its marker), and each turn of up to 32
	// steps one: 48 steps pass a limit of 40, within the second turn's
	// batch.
	const steps = 48
	e := setup(t)
	run := e.id("r-long")
	ctx := context.Background()
	e.startWorker("w1", worker.Options{})
	var plan []planner.Call
	for i := range steps {
		plan = append(plan, call(shop.ToolAddOrderNote, fmt.Sprintf(`{"order_id":"1002","text":"note %d"}`, i+1)))
	}
	_, err := e.runs.Start(ctx, workflows.RunInput{Tenant: "acme", RunID: run, Plan: plan,
		Limits: workflows.Limits{HistoryLimit: 40}})
	require.NoError(t, err)

	final := e.result("acme", run)
	assert.Equal(t, workflows.RunCompleted, final.State)
	assert.Positive(t, final.Generation, "the run continued as new")
	require.Len(t, final.Steps, steps)
	for i, s := range final.Steps {
		assert.EqualValues(t, i+1, s.Step)
		assert.Equal(t, workflows.StepDone, s.State)
		assert.Contains(t, s.Key, fmt.Sprintf("/%s/%d/add_order_note", run, i+1))
	}
	assert.Equal(t, steps, e.count("order_notes", "tenant = 'acme' AND order_id = '1002'"))
	assert.Equal(t, steps, e.count("idempotency_keys", "run_id = $1 AND state = 'completed'", run))
}
