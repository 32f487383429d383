package replay

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"

	"github.com/oncerun/oncerun/internal/shop"
)

// Every recorded history replays on this build, and the runs are closed:
// nothing of their step identity is checked.
func TestRecordedHistoriesAreOK(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(recorded, "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	execs := make([]Execution, len(files))
	for i, f := range files {
		execs[i] = Execution{File: f}
	}
	rep, err := Check(context.Background(), Config{Registry: registry(t, shop.ToolIssueCredit)}, execs)
	require.NoError(t, err)
	require.Len(t, rep.Runs, len(files))
	for i, r := range rep.Runs {
		assert.Equal(t, files[i], r.File, "the report keeps the order given")
		assert.True(t, r.OK, r.Line())
		assert.False(t, r.Open, r.Line())
	}
	assert.Zero(t, rep.Failed)
	assert.Zero(t, rep.NotChecked)
}

// Alterations of a recorded history that this build's code does not
// produce: the replay fails and names the event that differs.
func TestAHistoryTheCodeDoesNotProduceFailsNamingTheEvent(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, file string
		alter      func(*historypb.HistoryEvent) bool
		want       Event
		says       string
	}{
		{"another activity", "TestCreditEmailsTheCustomerOnce.json", func(e *historypb.HistoryEvent) bool {
			a := e.GetActivityTaskScheduledEventAttributes()
			if a.GetActivityType().GetName() != "RunTool" {
				return false
			}
			a.ActivityType.Name = "RunToolOld"
			return true
		}, Event{ID: 11, Type: "ActivityTaskScheduled"}, "nondeterministic workflow"},
		{"another local activity", "TestCreditEmailsTheCustomerOnce-local-steps.json", func(e *historypb.HistoryEvent) bool {
			m := e.GetMarkerRecordedEventAttributes()
			if m.GetMarkerName() != localActivity || !strings.Contains(string(m.Details[localData].Payloads[0].Data), `"RunTool"`) {
				return false
			}
			p := m.Details[localData].Payloads[0]
			p.Data = []byte(strings.Replace(string(p.Data), `"RunTool"`, `"RunToolOld"`, 1))
			return true
		}, Event{ID: 8, Type: "MarkerRecorded"}, "code executed local activity RunTool"},
		{"a version this build does not know", "TestCreditEmailsTheCustomerOnce-local-steps.json", func(e *historypb.HistoryEvent) bool {
			m := e.GetMarkerRecordedEventAttributes()
			if m.GetMarkerName() != versionMarker {
				return false
			}
			m.Details[versionValue].Payloads[0].Data = []byte("9")
			return true
		}, Event{ID: 5, Type: "MarkerRecorded"}, "too old to support version 9"},
		{"another timer", "TestRejectedStepDoesNotRun-local-steps.json", func(e *historypb.HistoryEvent) bool {
			a := e.GetTimerStartedEventAttributes()
			if a == nil {
				return false
			}
			a.TimerId = "999"
			return true
		}, Event{ID: 16, Type: "TimerStarted"}, "a matching Timer command"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := history(t, tt.file)
			altered := false
			for _, e := range h.Events {
				if altered = tt.alter(e); altered {
					break
				}
			}
			require.True(t, altered)

			r := checkHistory(registry(t), Execution{File: tt.file}, h)

			assert.Equal(t, OutcomeReplayFailed, r.Outcome())
			assert.Contains(t, r.ReplayError, tt.says)
			require.NotNil(t, r.FirstEvent, r.ReplayError)
			assert.Equal(t, tt.want, *r.FirstEvent)
			assert.Contains(t, r.Line(), "replay failed at "+tt.want.String())
		})
	}
}

// A run cut where its credit waits for approval is open: its status at the
// end of the replay holds the pending step, which a registry without the
// credit's tool would fail once approved. The run began before step
// identity, so its planning turn's calls are checked again too: the
// credit was valid when planned.
func TestAStepWaitingForAToolThisBuildLacksWouldChangeIdentity(t *testing.T) {
	t.Parallel()
	h := upTo(t, history(t, "TestCLIStartApproveStatus-local-steps.json"), 16)

	r := checkHistory(registry(t, shop.ToolIssueCredit), Execution{WorkflowID: "oncerun/acme/r1-55"}, h)

	require.Equal(t, OutcomeIdentity, r.Outcome(), r.Line())
	assert.True(t, r.Open)
	assert.Equal(t, "acme", r.Tenant)
	assert.Equal(t, "r1-55", r.RunID)
	require.Len(t, r.Identity, 2, r.Line())
	assert.Equal(t, int64(3), r.Identity[0].Step)
	assert.Equal(t, "issue_credit", r.Identity[0].Tool)
	assert.Equal(t, "waits for approval, and this build has no tool issue_credit: once approved it would fail", r.Identity[0].Why)
	assert.Equal(t, Change{Tool: "issue_credit", Event: 7, Why: r.Identity[1].Why}, r.Identity[1],
		"the turn's answer is the local activity's marker, event 7")
	assert.Contains(t, r.Identity[1].Why, "was valid when planned, and this build has no tool issue_credit: were the turn planned again")
	assert.Contains(t, r.Line(), "run r1-55 of tenant acme: identity would change: step 3 issue_credit waits for approval")
}

// The same open run on a registry that has every tool is ok.
func TestAnOpenRunWhoseStepsThisBuildHasIsOK(t *testing.T) {
	t.Parallel()
	h := upTo(t, history(t, "TestCLIStartApproveStatus-local-steps.json"), 16)

	r := checkHistory(registry(t), Execution{WorkflowID: "oncerun/acme/r1-55"}, h)

	assert.True(t, r.OK, r.Line())
	assert.True(t, r.Open)
	assert.Empty(t, r.Identity)
	assert.Empty(t, r.Skipped)
}

// A run whose first workflow task has not completed has made no decision
// to replay: it is ok, and this build will run it from its start.
func TestARunNotYetBegunIsOK(t *testing.T) {
	t.Parallel()
	for _, last := range []int64{2, 3} {
		h := upTo(t, history(t, "TestCLIStartApproveStatus-local-steps.json"), last)

		r := checkHistory(registry(t, shop.ToolIssueCredit), Execution{WorkflowID: "oncerun/acme/r1-55"}, h)

		assert.True(t, r.OK, "history up to event %d: %s", last, r.Line())
		assert.True(t, r.Open)
	}
}

// A run whose history ends in a workflow task in flight (a signal's, an
// activity's result) is checked as the history leaves it.
func TestARunWithATaskInFlightIsChecked(t *testing.T) {
	t.Parallel()
	for _, last := range []int64{13, 14, 18, 19} {
		h := upTo(t, history(t, "TestCLIStartApproveStatus-local-steps.json"), last)

		r := checkHistory(registry(t, shop.ToolIssueCredit), Execution{WorkflowID: "oncerun/acme/r1-55"}, h)

		require.Equal(t, OutcomeIdentity, r.Outcome(), "history up to event %d: %s", last, r.Line())
		assert.Equal(t, int64(3), r.Identity[0].Step)
	}
}

// A history that cannot be read is not checked, and says why.
func TestAnUnreadableHistoryIsNotChecked(t *testing.T) {
	t.Parallel()
	rep, err := Check(context.Background(), Config{Registry: registry(t)},
		[]Execution{{File: filepath.Join(t.TempDir(), "missing.json")}, {WorkflowID: "oncerun/acme/r1"}})
	require.NoError(t, err)
	require.Len(t, rep.Runs, 2)
	assert.Equal(t, OutcomeNotChecked, rep.Runs[0].Outcome())
	assert.Contains(t, rep.Runs[0].Error, "missing.json")
	assert.Equal(t, OutcomeNotChecked, rep.Runs[1].Outcome())
	assert.Contains(t, rep.Runs[1].Error, "no Temporal client")
	assert.Equal(t, 2, rep.NotChecked)
	assert.Zero(t, rep.Failed)
}

func TestCheckNeedsARegistry(t *testing.T) {
	t.Parallel()
	_, err := Check(context.Background(), Config{}, nil)
	require.ErrorContains(t, err, "Registry is required")
}
