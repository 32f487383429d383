package replay

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/workflow"
)

func TestListQuery(t *testing.T) {
	t.Parallel()
	assert.Equal(t, `WorkflowType = "AgentRun"`, ListQuery(""))
	assert.Equal(t, `(ExecutionStatus="Running" OR TaskQueue="q") AND WorkflowType = "AgentRun"`,
		ListQuery(`ExecutionStatus="Running" OR TaskQueue="q"`), "the query is kept whole before the AND")
}

func TestParseHistoryRefusesWhatIsNotAHistory(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, raw, want string }{
		{"not JSON", "events: []", "is not a JSON history"},
		{"no events", `{"events": []}`, "has no events"},
		{"not from the start", `{"events": [{"eventId": "2", "eventType": "EVENT_TYPE_WORKFLOW_TASK_SCHEDULED"}]}`,
			"does not begin with WorkflowExecutionStarted (event 1 is WorkflowTaskScheduled)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseHistory("h.json", []byte(tt.raw))
			require.ErrorContains(t, err, "history file h.json")
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

func TestReadFileNamesAMissingFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "none.json")
	_, err := ReadFile(path)
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.ErrorContains(t, err, path)
}

// readFacts reads the version of bundled-changes-1, the planning turns
// (local activities or activities) and whether the run goes on.
func TestReadFacts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		file    string
		last    int64
		bundled workflow.Version
		turns   []int64
		open    bool
	}{
		{"TestRejectedStepDoesNotRun-local-steps.json", 0, 1, []int64{7, 28, 30}, false},
		{"TestRejectedStepDoesNotRun-local-steps.json", 16, 1, []int64{7}, true},
		{"TestCLIStartApproveStatus.json", 0, workflow.DefaultVersion, []int64{7, 19, 31, 60, 72}, false},
		{"TestLimitEditIsCheckedAgainstTheCap-spend-limits.json", 0, 2, nil, false},
	} {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			h := history(t, tt.file)
			if tt.last > 0 {
				h = upTo(t, h, tt.last)
			}
			f, err := readFacts(h)
			require.NoError(t, err)
			assert.Equal(t, tt.bundled, f.bundled)
			assert.False(t, f.identity, "no recording is under step identity yet")
			assert.Equal(t, tt.open, f.open)
			assert.Equal(t, "acme", f.input.Tenant)
			if tt.turns == nil {
				assert.NotEmpty(t, f.turns)
				return
			}
			var events []int64
			for _, tn := range f.turns {
				assert.True(t, tn.answered)
				events = append(events, tn.event)
			}
			assert.Equal(t, tt.turns, events)
		})
	}
}
