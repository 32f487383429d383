package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// waitForCut is an activity that waits until its context ends.
func waitForCut(started chan<- struct{}) func(ctx context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		close(started)
		<-ctx.Done()
		return "", ctx.Err()
	}
}

func cutOffEnv(g *gate) *testsuite.TestActivityEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.SetWorkerOptions(sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{&cutOffInterceptor{gate: g}}})
	return env
}

// An attempt in progress when the gate shuts ends at once, with a
// retryable error that names the cut: Temporal retries it elsewhere.
func TestTheCutEndsAnAttemptInProgress(t *testing.T) {
	t.Parallel()
	g := newGate()
	env := cutOffEnv(g)
	started := make(chan struct{})
	env.RegisterActivityWithOptions(waitForCut(started), activity.RegisterOptions{Name: "RunTool"})
	go func() {
		<-started
		g.shut(errCutOff([]string{"postgres"}))
	}()
	_, err := env.ExecuteActivity("RunTool")
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app)
	assert.Equal(t, errTypeCutOff, app.Type())
	assert.False(t, app.NonRetryable(), "another worker tries it again")
	assert.Contains(t, app.Error(), "worker cut off from postgres")
}

// While the gate is shut no attempt starts: no effect is begun that the
// worker could not record or report. Open again, attempts run.
func TestNoAttemptStartsWhileCutOff(t *testing.T) {
	t.Parallel()
	g := newGate()
	env := cutOffEnv(g)
	ran := 0
	env.RegisterActivityWithOptions(func(ctx context.Context) (string, error) { ran++; return "made", nil },
		activity.RegisterOptions{Name: "RunTool"})
	g.shut(errCutOff([]string{"temporal"}))
	_, err := env.ExecuteActivity("RunTool")
	require.True(t, isCutOff(err), "%v", err)
	assert.Zero(t, ran, "the tool never ran")

	g.open()
	v, err := env.ExecuteActivity("RunTool")
	require.NoError(t, err)
	var got string
	require.NoError(t, v.Get(&got))
	assert.Equal(t, "made", got)
	assert.Equal(t, 1, ran)
}

// An attempt that succeeded keeps its result even if the cut came as it
// returned: only failures are the cut's.
func TestAFinishedAttemptKeepsItsResult(t *testing.T) {
	t.Parallel()
	g := newGate()
	env := cutOffEnv(g)
	env.RegisterActivityWithOptions(func(ctx context.Context) (string, error) {
		g.shut(errCutOff([]string{"postgres"}))
		return "made", nil
	}, activity.RegisterOptions{Name: "RunTool"})
	v, err := env.ExecuteActivity("RunTool")
	require.NoError(t, err)
	var got string
	require.NoError(t, v.Get(&got))
	assert.Equal(t, "made", got)
}

// A local activity the cut ends fails its workflow task (a panic the SDK
// turns into a failed task) instead of returning an error to the
// workflow: the workflow never sees it, and Temporal hands the task to
// another worker.
func TestTheCutFailsTheWorkflowTaskOfALocalStep(t *testing.T) {
	t.Parallel()
	g := newGate()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{&cutOffInterceptor{gate: g}}})
	started := make(chan struct{})
	local := waitForCut(started)
	seen := errors.New("none")
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute})
		var out string
		seen = workflow.ExecuteLocalActivity(ctx, local).Get(ctx, &out)
		return seen
	}, workflow.RegisterOptions{Name: "Run"})
	go func() {
		<-started
		g.shut(errCutOff([]string{"postgres"}))
	}()
	env.ExecuteWorkflow("Run")
	require.True(t, env.IsWorkflowCompleted())
	var panicked *temporal.PanicError
	require.ErrorAs(t, env.GetWorkflowError(), &panicked)
	assert.Contains(t, panicked.Error(), "the workflow task is failed so that another worker takes the run over")
	assert.EqualError(t, seen, "none", "the workflow never saw the local activity's error")
}

func TestCutOffAfterFromTheEnvironment(t *testing.T) {
	t.Parallel()
	for value, want := range map[string]time.Duration{"": 0, "off": -1, "OFF": -1, "2s": 2 * time.Second, "1m": time.Minute} {
		cfg, _, err := ConfigFromEnv(func(name string) string {
			if name == "ONCERUN_CUT_OFF_AFTER" {
				return value
			}
			return ""
		})
		require.NoError(t, err, value)
		assert.Equal(t, want, cfg.CutOffAfter, value)
	}
	for _, value := range []string{"500ms", "soon", "-5s"} {
		_, _, err := ConfigFromEnv(func(name string) string {
			if name == "ONCERUN_CUT_OFF_AFTER" {
				return value
			}
			return ""
		})
		assert.ErrorContains(t, err, `ONCERUN_CUT_OFF_AFTER "`+value+`" is neither a duration of at least 1s`)
	}
}

// A cut from Temporal alone lets a regular attempt in progress finish (it
// records its outcome in PostgreSQL, where the worker that takes the step
// over finds it) and refuses new ones; it still ends a local one.
func TestACutFromTemporalLetsARunningAttemptFinish(t *testing.T) {
	t.Parallel()
	g := newGate()
	env := cutOffEnv(g)
	started, release := make(chan struct{}), make(chan struct{})
	env.RegisterActivityWithOptions(func(ctx context.Context) (string, error) {
		close(started)
		select {
		case <-release:
			return "recorded", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}, activity.RegisterOptions{Name: "RunTool"})
	go func() {
		<-started
		g.shut(errCutOff([]string{"temporal"}))
		close(release)
	}()
	v, err := env.ExecuteActivity("RunTool")
	require.NoError(t, err)
	var got string
	require.NoError(t, v.Get(&got))
	assert.Equal(t, "recorded", got)

	_, err = env.ExecuteActivity("RunTool")
	require.True(t, isCutOff(err), "no new attempt while cut off: %v", err)
}

// An attempt that failed on its own while the worker was cut off keeps its
// error: only the attempts the cut ended are the cut's.
func TestAnAttemptsOwnFailureIsNotTheCuts(t *testing.T) {
	t.Parallel()
	g := newGate()
	env := cutOffEnv(g)
	env.RegisterActivityWithOptions(func(ctx context.Context) (string, error) {
		g.shut(errCutOff([]string{"temporal"}))
		return "", temporal.NewNonRetryableApplicationError("key reused", "oncerun.KeyReuse", nil)
	}, activity.RegisterOptions{Name: "RunTool"})
	_, err := env.ExecuteActivity("RunTool")
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app)
	assert.Equal(t, "oncerun.KeyReuse", app.Type())
}
