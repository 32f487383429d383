package replay

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func reportOf() Report {
	return newReport([]Result{
		{WorkflowID: "oncerun/acme/r1", Tenant: "acme", RunID: "r1", OK: true, Identity: []Change{}},
		{WorkflowID: "oncerun/acme/r2", Tenant: "acme", RunID: "r2", ReplayError: "[TMPRL1100] nondeterministic workflow: " + strings.Repeat("x", 600),
			FirstEvent: &Event{ID: 17, Type: "ActivityTaskScheduled"}, Identity: []Change{}},
		{WorkflowID: "oncerun/acme/r3", Tenant: "acme", RunID: "r3", Open: true, Identity: []Change{
			{Step: 3, Tool: "award_points", Why: "waits for approval, and this build has no tool award_points: once approved it would fail"},
			{Tool: "add_order_note", Event: 9, Why: "was valid when planned, and this build has no tool add_order_note: ..."},
		}},
		{WorkflowID: "oncerun/acme/r4", Tenant: "acme", RunID: "r4", Error: "read the history of oncerun/acme/r4:\n\tnot found", Identity: []Change{}},
		{File: "h.json", WorkflowID: "other", Error: "no", Identity: []Change{}},
	})
}

func TestReportLines(t *testing.T) {
	t.Parallel()
	rep := reportOf()
	var out bytes.Buffer
	require.NoError(t, rep.WriteText(&out))
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	require.Len(t, lines, 6)
	assert.Equal(t, "run r1 of tenant acme: ok", lines[0])
	assert.True(t, strings.HasPrefix(lines[1], "run r2 of tenant acme: replay failed at event 17 ActivityTaskScheduled: [TMPRL1100] nondeterministic workflow: xxx"), lines[1])
	assert.True(t, strings.HasSuffix(lines[1], "x…"), "a long error is cut on the line")
	assert.Less(t, len(lines[1]), 500)
	assert.Equal(t, "run r3 of tenant acme: identity would change: "+
		"step 3 award_points waits for approval, and this build has no tool award_points: once approved it would fail; "+
		"event 9: a call of add_order_note was valid when planned, and this build has no tool add_order_note: ...", lines[2])
	assert.Equal(t, "run r4 of tenant acme: not checked: read the history of oncerun/acme/r4: not found", lines[3])
	assert.Equal(t, "history h.json (workflow other): not checked: no", lines[4])
	assert.Equal(t, "checked 5 runs: 1 ok, 1 replay failed, 1 identity would change, 2 not checked", lines[5])
}

func TestReportCounts(t *testing.T) {
	t.Parallel()
	rep := reportOf()
	assert.Equal(t, 5, rep.Checked)
	assert.Equal(t, 2, rep.Failed)
	assert.Equal(t, 2, rep.NotChecked)
	assert.Equal(t, "checked 1 run: 1 ok, 0 replay failed, 0 identity would change", newReport(rep.Runs[:1]).Summary())
}

func TestReportJSON(t *testing.T) {
	t.Parallel()
	raw, err := json.Marshal(reportOf())
	require.NoError(t, err)
	var got struct {
		Runs []struct {
			WorkflowID  string `json:"workflow_id"`
			RunID       string `json:"run_id"`
			Tenant      string `json:"tenant"`
			OK          bool   `json:"ok"`
			ReplayError string `json:"replay_error"`
			FirstEvent  *Event `json:"first_event"`
			Identity    []struct {
				Step  int64  `json:"step"`
				Tool  string `json:"tool"`
				Why   string `json:"why"`
				Event int64  `json:"event"`
			} `json:"identity"`
		} `json:"runs"`
		Checked int `json:"checked"`
		Failed  int `json:"failed"`
	}
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Len(t, got.Runs, 5)
	assert.Equal(t, "oncerun/acme/r1", got.Runs[0].WorkflowID)
	assert.True(t, got.Runs[0].OK)
	assert.NotNil(t, got.Runs[0].Identity, "identity is always a list")
	assert.Equal(t, &Event{ID: 17, Type: "ActivityTaskScheduled"}, got.Runs[1].FirstEvent)
	assert.Len(t, got.Runs[1].ReplayError, len("[TMPRL1100] nondeterministic workflow: ")+600, "--json carries the whole error")
	assert.Equal(t, "r3", got.Runs[2].RunID)
	assert.Equal(t, "award_points", got.Runs[2].Identity[0].Tool)
	assert.Equal(t, int64(3), got.Runs[2].Identity[0].Step)
	assert.Equal(t, int64(9), got.Runs[2].Identity[1].Event)
	assert.Equal(t, 5, got.Checked)
	assert.Equal(t, 2, got.Failed)
}
