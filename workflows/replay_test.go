package workflows_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/workflows"
)

// TestReplayRecordedHistories replays the histories of representative runs,
// recorded from a real server by the integration tests
// (ONCERUN_RECORD_HISTORIES), against today's workflow code. A change that
// would break runs in flight fails here. The expiry watchdog's passes are
// replayed by internal/watchdog.
func TestReplayRecordedHistories(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*.json"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 5, "recorded histories are missing")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflow(workflows.AgentRun)
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, f))
		})
	}
}
