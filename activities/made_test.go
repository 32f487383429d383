package activities_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/metrics"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
)

// awardPoints is a keyed tool of one worker's registry, which another
// worker of the same task queue does not have (a deploy that adds it).
func awardPoints(schema string) tools.Tool {
	return tools.Tool{
		Name: "award_points", Description: "Award loyalty points.", Class: tools.ClassKeyed,
		Schema: json.RawMessage(schema),
		Run: func(ctx context.Context, call tools.Call) (any, error) {
			return map[string]any{"awarded": true}, nil
		},
	}
}

const pointsSchema = `{"type":"object","properties":{"customer_id":{"type":"string"},"points":{"type":"integer"}},"required":["customer_id","points"]}`

// otherWorker is a worker of another registry on f's database: the
// built-in tools only, or with extra.
func (f fixture) otherWorker(t *testing.T, extra ...tools.Tool) fixture {
	t.Helper()
	store, err := idempotency.New(f.pool, idempotency.Config{Owner: "worker-b"})
	require.NoError(t, err)
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, append(shop.Tools(shop.Config{}), extra...)...)
	require.NoError(t, err)
	b := f
	b.acts = &activities.Activities{Pool: f.pool, Store: store, Tools: reg, Metrics: f.metrics,
		Planners: map[string]planner.Planner{planner.NameScript: planner.Script{}}}
	return b
}

const points = `{"customer_id":"c-1","points":50}`

// bigCredit needs an approval under the built-in rule (above 100.00).
const bigCredit = `{"order_id":"1001","reason":"damaged","amount_cents":25900,"currency":"EUR"}`

func TestPlanMarksTheCallsItRefusesOrHoldsThatTheStoreHoldsMade(t *testing.T) {
	t.Parallel()
	a := setup(t, awardPoints(pointsSchema))
	b := a.otherWorker(t)
	// Worker A made steps 1 and 2 of run r1, then died before its run
	// recorded them.
	_, err := a.run(t, input(t, 1, "award_points", points))
	require.NoError(t, err)
	_, err = a.run(t, input(t, 2, shop.ToolIssueCredit, bigCredit))
	require.NoError(t, err)

	plan := []planner.Call{
		{Tool: "award_points", Args: json.RawMessage(`{"points": 50, "customer_id": "c-1"}`)},
		{Tool: shop.ToolIssueCredit, Args: json.RawMessage(bigCredit)},
		{Tool: "award_points", Args: json.RawMessage(`{"customer_id":"c-2","points":5}`)},
		{Tool: shop.ToolIssueCredit, Args: json.RawMessage(`{"order_id":"1002","reason":"damaged","amount_cents":25900,"currency":"EUR"}`)},
	}
	out, err := b.plan(t, activities.PlanInput{Tenant: "acme", RunID: "r1", Planner: planner.NameScript, Plan: plan, FirstStep: 1})
	require.NoError(t, err)

	require.Len(t, out.Calls, 4)
	made := out.Calls[0]
	assert.True(t, made.Made, "B refuses award_points, but the store holds step 1 made")
	assert.NotEmpty(t, made.Invalid, "what B thinks of it is kept")
	assert.Equal(t, points, string(made.Args), "the arguments, canonical, as A hashed them")
	assert.Equal(t, mustHash(t, points), made.ArgsHash)
	assert.True(t, out.Calls[1].Made, "B holds the credit for approval; A made it")
	assert.True(t, out.Calls[1].NeedsApproval)
	assert.False(t, out.Calls[2].Made, "refused, and nothing under its key")
	assert.False(t, out.Calls[3].Made, "held for approval, and nothing under its key")

	// Without FirstStep (a run before step identity) nothing is read.
	out, err = b.plan(t, activities.PlanInput{Tenant: "acme", RunID: "r1", Planner: planner.NameScript, Plan: plan})
	require.NoError(t, err)
	for i, c := range out.Calls {
		assert.False(t, c.Made, "call %d", i+1)
	}
}

func TestPlanDoesNotTakeAnotherCallUnderTheKeyForTheStep(t *testing.T) {
	t.Parallel()
	a := setup(t, awardPoints(pointsSchema))
	b := a.otherWorker(t)
	_, err := a.run(t, input(t, 1, "award_points", points))
	require.NoError(t, err)

	out, err := b.plan(t, activities.PlanInput{Tenant: "acme", RunID: "r1", Planner: planner.NameScript, FirstStep: 1,
		Plan: []planner.Call{{Tool: "award_points", Args: json.RawMessage(`{"customer_id":"c-1","points":500}`)}}})
	require.NoError(t, err)
	assert.False(t, out.Calls[0].Made, "other arguments under step 1's key are not step 1's effect")
}

func TestRunToolReplaysAStepItsRegistryRefusesWhenTheStoreHoldsIt(t *testing.T) {
	t.Parallel()
	a := setup(t, awardPoints(pointsSchema))
	first, err := a.run(t, input(t, 1, "award_points", points))
	require.NoError(t, err)
	require.False(t, first.Replayed)

	for _, tc := range []struct {
		name  string
		extra []tools.Tool
	}{
		{"the tool is not registered", nil},
		{"its schema refuses the arguments", []tools.Tool{awardPoints(`{"type":"object","properties":{"points":{"type":"integer","maximum":10}}}`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := a.otherWorker(t, tc.extra...)
			before := b.calls("award_points", metrics.OutcomeReplayed)
			out, err := b.run(t, input(t, 1, "award_points", points))
			require.NoError(t, err, "a step whose effect exists is never reported failed")
			assert.True(t, out.Replayed)
			assert.JSONEq(t, string(first.Result), string(out.Result))
			assert.Equal(t, before+1, b.calls("award_points", metrics.OutcomeReplayed))

			_, err = b.run(t, input(t, 2, "award_points", points))
			require.Error(t, err, "with nothing under the key, the refusal stands")
		})
	}
}

func TestMadeStepsReadsTheCompletedStepsOfTheRun(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, n := range []int64{1, 3} {
		_, err := f.run(t, input(t, n, shop.ToolIssueCredit, `{"order_id":"1001","reason":"r`+string(rune('0'+n))+`","amount_cents":100,"currency":"EUR"}`))
		require.NoError(t, err)
	}
	// A step of another run is not this run's.
	other := input(t, 2, shop.ToolIssueCredit, `{"order_id":"1001","reason":"x","amount_cents":100,"currency":"EUR"}`)
	other.RunID = "r2"
	_, err := f.run(t, other)
	require.NoError(t, err)

	v, err := f.env().ExecuteActivity(f.acts.MadeSteps, activities.MadeQuery{Tenant: "acme", RunID: "r1", First: 1, Last: 5})
	require.NoError(t, err)
	var got activities.MadeSteps
	require.NoError(t, v.Get(&got))
	require.Len(t, got.Steps, 2)
	assert.Equal(t, []int64{1, 3}, []int64{got.Steps[0].Step, got.Steps[1].Step})
	assert.Equal(t, shop.ToolIssueCredit, got.Steps[0].Tool)
	assert.Equal(t, input(t, 1, shop.ToolIssueCredit, `{"order_id":"1001","reason":"r1","amount_cents":100,"currency":"EUR"}`).ArgsHash,
		got.Steps[0].ArgsHash)

	v, err = f.env().ExecuteActivity(f.acts.MadeSteps, activities.MadeQuery{Tenant: "acme", RunID: "r1", First: 2, Last: 2})
	require.NoError(t, err)
	var none activities.MadeSteps
	require.NoError(t, v.Get(&none))
	assert.Empty(t, none.Steps)
}

// A step whose tool the worker does not have, and whose key holds
// nothing: an activity's first attempts are retried, so that a worker of
// the queue that has the tool may take it, then the step fails for good;
// a local activity, which never leaves the worker, fails at once.
func TestRunToolLeavesAStepOfAToolItLacksToAnotherWorkerAFewTimes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	in := input(t, 1, "refund_payment", `{"order_id":"1001"}`)

	_, err := f.run(t, in)
	app := requireAppError(t, err, activities.ErrTypeToolElsewhere, false)
	assert.Contains(t, app.Error(), `tool "refund_payment" is not registered on this worker; another worker of the task queue may have it`)

	_, err = f.env().ExecuteLocalActivity(f.acts.RunTool, in)
	requireAppError(t, err, activities.ErrTypeUnknownTool, true)

	before := f.calls("refund_payment", metrics.OutcomeInvalid)
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(f.acts)
	attempts := 0
	env.SetOnActivityStartedListener(func(*activity.Info, context.Context, converter.EncodedValues) { attempts++ })
	env.ExecuteWorkflow(func(ctx workflow.Context) error {
		return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: time.Minute,
			RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 20,
				NonRetryableErrorTypes: []string{activities.ErrTypeUnknownTool}},
		}), f.acts.RunTool, in).Get(ctx, nil)
	})
	requireAppError(t, env.GetWorkflowError(), activities.ErrTypeUnknownTool, true)
	assert.Equal(t, 5, attempts)
	assert.Equal(t, before+5, f.calls("refund_payment", metrics.OutcomeInvalid))
}
