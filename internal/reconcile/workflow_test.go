package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/oncerun/oncerun/internal/reconcile"
)

// passStub stands in for the pass activity under its registered name.
func passStub(env *testsuite.TestWorkflowEnvironment, fn func(context.Context, reconcile.Input) (reconcile.PassOutput, error)) {
	env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: reconcile.PassActivityName})
	env.OnActivity(reconcile.PassActivityName, mock.Anything, mock.Anything).Return(fn)
}

func TestReconcileRunsOnePass(t *testing.T) {
	t.Parallel()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	env.SetStartTime(t0)
	want := reconcile.PassOutput{Configured: true, DriftCount: 2, DriftAmount: map[string]int64{"eur": 2500}, Checked: 9, Recorded: 1}
	var got []reconcile.Input
	passStub(env, func(_ context.Context, in reconcile.Input) (reconcile.PassOutput, error) {
		got = append(got, in)
		if len(got) == 1 {
			return reconcile.PassOutput{}, temporal.NewApplicationError("ledger unavailable", "ProviderDown")
		}
		return want, nil
	})

	env.ExecuteWorkflow(reconcile.Workflow, reconcile.Input{Settlement: 10 * time.Minute})

	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res reconcile.Result
	require.NoError(t, env.GetWorkflowResult(&res))
	assert.Equal(t, want, res.Pass)
	assert.Equal(t, t0, res.At)
	assert.Equal(t, []reconcile.Input{{Settlement: 10 * time.Minute}, {Settlement: 10 * time.Minute}}, got,
		"the input reaches the activity, and a failed pass is retried")
}

func TestReconcileStopsOnABadConfig(t *testing.T) {
	t.Parallel()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	calls := 0
	passStub(env, func(context.Context, reconcile.Input) (reconcile.PassOutput, error) {
		calls++
		return reconcile.PassOutput{}, temporal.NewNonRetryableApplicationError("Pool is nil", "InvalidArgs", nil)
	})

	env.ExecuteWorkflow(reconcile.Workflow, reconcile.Input{})

	require.True(t, env.IsWorkflowCompleted())
	require.ErrorContains(t, env.GetWorkflowError(), "Pool is nil")
	assert.Equal(t, 1, calls)
}
