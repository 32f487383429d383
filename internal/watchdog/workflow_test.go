package watchdog_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/internal/watchdog"
)

// t0 is when the test passes begin, in workflow time.
var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// watchdogHarness is a test environment for one watchdog pass whose
// PruneExpired returns `full` full batches, then a short one, each of which
// kept the database busy for dbTime.
type watchdogHarness struct {
	env    *testsuite.TestWorkflowEnvironment
	full   int
	dbTime time.Duration

	mu      sync.Mutex
	batches []time.Time // when each batch started, in workflow time
}

func setupWatchdog(t *testing.T, full int, dbTime time.Duration) *watchdogHarness {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(testLogger(t))
	env := suite.NewTestWorkflowEnvironment()
	env.SetStartTime(t0)
	env.SetTestTimeout(time.Minute)
	watchdog.Register(env, &watchdog.Activities{})
	h := &watchdogHarness{env: env, full: full, dbTime: dbTime}
	env.OnActivity(watchdog.PruneActivityName, mock.Anything, mock.Anything).Return(h.prune)
	return h
}

func (h *watchdogHarness) prune(_ context.Context, in watchdog.PruneInput) (watchdog.PruneOutput, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.batches = append(h.batches, h.env.Now())
	n := in.BatchSize
	if len(h.batches) > h.full {
		n = in.BatchSize / 2
	}
	return watchdog.PruneOutput{Selected: n, Pruned: n, DBTime: h.dbTime}, nil
}

// run executes a pass to its end and returns its result.
func (h *watchdogHarness) run(t *testing.T, in watchdog.Input) watchdog.Result {
	t.Helper()
	h.env.ExecuteWorkflow(watchdog.WorkflowName, in)
	require.True(t, h.env.IsWorkflowCompleted())
	require.NoError(t, h.env.GetWorkflowError())
	var res watchdog.Result
	require.NoError(t, h.env.GetWorkflowResult(&res))
	return res
}

// gaps returns the workflow time between the starts of consecutive batches.
func (h *watchdogHarness) gaps() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []time.Duration
	for i := 1; i < len(h.batches); i++ {
		out = append(out, h.batches[i].Sub(h.batches[i-1]))
	}
	return out
}

// lastBatch is when the last batch started.
func (h *watchdogHarness) lastBatch() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.batches[len(h.batches)-1]
}

func TestWatchdogPausesBetweenBatchesByItsDutyCycle(t *testing.T) {
	t.Parallel()
	const dbTime = 2 * time.Second
	for _, tc := range []struct {
		name  string
		duty  float64
		pause time.Duration
	}{
		{"default", 0, 19 * dbTime}, // DefaultDutyCycle, 0.05
		{"half", 0.5, dbTime},
		{"a tenth", 0.1, 9 * dbTime},
		{"back to back", 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setupWatchdog(t, 3, dbTime)

			res := h.run(t, watchdog.Input{BatchSize: 10, DutyCycle: tc.duty})

			assert.Equal(t, 4, res.Batches)
			assert.Equal(t, 35, res.Totals.Pruned)
			assert.Equal(t, 3*tc.pause, res.Paused)
			assert.Equal(t, []time.Duration{tc.pause, tc.pause, tc.pause}, h.gaps(),
				"after each full batch the pass waits its pause")
			assert.Equal(t, h.lastBatch(), h.env.Now(), "no pause after the last batch")
		})
	}
}

func TestWatchdogDoesNotPauseAfterItsLastAllowedBatch(t *testing.T) {
	t.Parallel()
	h := setupWatchdog(t, 10, time.Second)

	res := h.run(t, watchdog.Input{BatchSize: 10, MaxBatches: 2})

	assert.Equal(t, 2, res.Batches)
	assert.Equal(t, []time.Duration{19 * time.Second}, h.gaps())
	assert.Equal(t, h.lastBatch(), h.env.Now(), "the pass ends with its last batch, not a timer")
}

func TestInputPause(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		duty  float64
		pause time.Duration
	}{
		{0, 190 * time.Millisecond},
		{-1, 190 * time.Millisecond},
		{0.25, 30 * time.Millisecond},
		{0.5, 10 * time.Millisecond},
		{1, 0},
		{2, 0},
	} {
		assert.Equal(t, tc.pause, watchdog.Input{DutyCycle: tc.duty}.Pause(10*time.Millisecond), "duty cycle %v", tc.duty)
	}
}

// TestWatchdogReplaysAPassBegunBeforeThePause replays a pass of several
// batches recorded before the pause existed, its batches reporting their
// database time as new activity workers do while old workflow workers still
// run passes (a rolling deploy): the pass must replay without pauses.
func TestWatchdogReplaysAPassBegunBeforeThePause(t *testing.T) {
	t.Parallel()
	f, err := os.Open(filepath.Join("testdata", "histories", "TestConcurrentWatchdogsNeverDoubleCount-Watchdog-hold.json"))
	require.NoError(t, err)
	defer f.Close()
	hist, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	require.NoError(t, err)
	dc := converter.GetDefaultDataConverter()
	batches := 0
	for _, ev := range hist.GetEvents() {
		done := ev.GetActivityTaskCompletedEventAttributes()
		if done == nil {
			continue
		}
		var out watchdog.PruneOutput
		require.NoError(t, dc.FromPayloads(done.GetResult(), &out))
		out.DBTime = 5 * time.Millisecond
		done.Result, err = dc.ToPayloads(out)
		require.NoError(t, err)
		batches++
	}
	require.Greater(t, batches, 1, "the recorded pass has batches to pause between")

	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(watchdog.Workflow, workflow.RegisterOptions{Name: watchdog.WorkflowName})
	require.NoError(t, r.ReplayWorkflowHistory(nil, hist))
}

// TestReplayRecordedPasses replays the passes recorded from a real server
// by the integration tests (make record-histories) against today's
// workflow code, under the names they were registered with: a change that
// would break a pass in flight fails here.
func TestReplayRecordedPasses(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*.json"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 5, "recorded histories are missing")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(watchdog.Workflow, workflow.RegisterOptions{Name: watchdog.WorkflowName})
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, f))
		})
	}
}
