package workflows

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/oncerun/oncerun/activities"
)

func TestReconcileRunsOnePass(t *testing.T) {
	t.Parallel()
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(testLogger(t))
	env := suite.NewTestWorkflowEnvironment()
	env.SetStartTime(t0)
	want := activities.ReconcileOutput{Configured: true, DriftCount: 2, DriftAmount: map[string]int64{"eur": 2500}, Checked: 9, Recorded: 1}
	var got []activities.ReconcileInput
	env.OnActivity(a.ReconcilePass, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.ReconcileInput) (activities.ReconcileOutput, error) {
			got = append(got, in)
			if len(got) == 1 {
				return activities.ReconcileOutput{}, temporal.NewApplicationError("ledger unavailable", "ProviderDown")
			}
			return want, nil
		})

	env.ExecuteWorkflow(Reconcile, ReconcileInput{Settlement: 10 * time.Minute})

	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res ReconcileResult
	require.NoError(t, env.GetWorkflowResult(&res))
	assert.Equal(t, want, res.Pass)
	assert.Equal(t, t0, res.At)
	assert.Equal(t, []activities.ReconcileInput{{Settlement: 10 * time.Minute}, {Settlement: 10 * time.Minute}}, got,
		"the input reaches the activity, and a failed pass is retried")
}

func TestReconcileStopsOnABadConfig(t *testing.T) {
	t.Parallel()
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(testLogger(t))
	env := suite.NewTestWorkflowEnvironment()
	calls := 0
	env.OnActivity(a.ReconcilePass, mock.Anything, mock.Anything).Return(
		func(context.Context, activities.ReconcileInput) (activities.ReconcileOutput, error) {
			calls++
			return activities.ReconcileOutput{}, temporal.NewNonRetryableApplicationError("Pool is nil", activities.ErrTypeInvalidArgs, nil)
		})

	env.ExecuteWorkflow(Reconcile, ReconcileInput{})

	require.True(t, env.IsWorkflowCompleted())
	require.ErrorContains(t, env.GetWorkflowError(), "Pool is nil")
	assert.Equal(t, 1, calls)
}
