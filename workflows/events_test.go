package workflows

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
)

// storyOf lists a run's facts as type@step, in the order the run wrote
// them, and checks that no source is written twice with another fact.
func storyOf(t *testing.T, facts []activities.RunFact) []string {
	t.Helper()
	bySource := map[string]activities.RunFact{}
	var out []string
	for _, f := range facts {
		if prev, ok := bySource[f.Source]; ok {
			// A fact written again is the same fact.
			assert.Equal(t, prev.Type, f.Type, f.Source)
			continue
		}
		bySource[f.Source] = f
		s := f.Type
		if f.Step > 0 {
			s += "@" + string(rune('0'+f.Step))
		}
		out = append(out, s)
	}
	return out
}

func TestARunTellsItsStoryInOrder(t *testing.T) {
	t.Parallel()
	c := credit("o-1")
	h := setup(t, c, lookup("o-2"))
	h.signalAt(day, approve(1, c, "alice"))

	st := h.run(t, modelRun())
	require.Equal(t, RunCompleted, st.State)

	assert.Equal(t, []string{
		"run.started",
		"turn.started", "turn.ended",
		"step.proposed@1", "step.waiting_for_approval@1", "step.approved@1", "step.running@1", "step.completed@1",
		"turn.started", "turn.ended",
		"step.proposed@2", "step.running@2", "step.completed@2",
		"turn.started", "turn.ended",
		"run.completed",
	}, storyOf(t, h.facts))
	for _, f := range h.facts {
		assert.Equal(t, testRunID, f.RunID)
		assert.NotContains(t, string(f.Data), "order_id", "arguments appear as their hash only")
	}
	var proposed map[string]any
	require.NoError(t, json.Unmarshal(h.facts[3].Data, &proposed))
	assert.Equal(t, map[string]any{"tool": "issue_credit", "args_hash": c.ArgsHash, "class": string(c.Class), "turn": float64(1),
		"call_id": "call_1_1"}, proposed)
}

// A run that began before its story has none: its replay adds no command.
func TestARunBeforeRunEventsTellsNothing(t *testing.T) {
	t.Parallel()
	h := setup(t, credit("o-1"), lookup("o-2"))
	h.env.OnGetVersion(bundledChanges, workflow.DefaultVersion, runEvents).Return(stepIdentity)
	h.signalAt(day, approve(1, credit("o-1"), "alice"))
	st := h.run(t, modelRun())
	require.Equal(t, RunCompleted, st.State)
	assert.Empty(t, h.facts)
}
