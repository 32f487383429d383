package approvals

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAGUITranslatesARunsStory(t *testing.T) {
	t.Parallel()
	ev := func(run string, step int64, typ, data string) Event {
		return Event{RunID: run, RootRunID: "r1", Step: step, Type: typ, Data: json.RawMessage(data)}
	}
	story := []Event{
		ev("r1", 0, "run.started", `{"goal":"refund"}`),
		ev("r1", 0, "turn.started", `{"turn":1}`),
		ev("r1", 0, "text.delta", `{"message_id":"m1","text":"Let me "}`),
		ev("r1", 0, "text.delta", `{"message_id":"m1","text":"look."}`),
		ev("r1", 0, "turn.ended", `{"turn":1}`),
		ev("r1", 1, "step.proposed", `{"tool":"issue_credit","args_hash":"ab"}`),
		ev("r1", 1, "step.waiting_for_approval", `{"tool":"issue_credit"}`),
		ev("r1", 1, "approval.approved", `{"by":"dana"}`),
		ev("r1", 1, "step.completed", `{"tool":"issue_credit","result_bytes":12}`),
		ev("r1.2", 0, "run.started", `{}`),
		ev("r1.2", 0, "run.failed", `{"error":"boom"}`),
		ev("r1", 0, "run.completed", `{}`),
	}
	var a aguiStream
	var types []string
	var all []aguiEvent
	for _, e := range story {
		for _, m := range a.translate(e) {
			types = append(types, m["type"].(string))
			all = append(all, m)
		}
	}
	assert.Equal(t, []string{
		"RUN_STARTED", "STATE_SNAPSHOT",
		"CUSTOM",
		"TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT",
		"TEXT_MESSAGE_END", "CUSTOM",
		"TOOL_CALL_START", "TOOL_CALL_END", "STATE_DELTA",
		"STATE_DELTA", "CUSTOM",
		"CUSTOM",
		"TOOL_CALL_RESULT", "STATE_DELTA",
		"STATE_DELTA", "CUSTOM",
		"STATE_DELTA", "CUSTOM",
		"STATE_DELTA", "RUN_FINISHED",
	}, types)
	assert.Equal(t, "r1#1", all[8]["toolCallId"])
	assert.Equal(t, "issue_credit", all[8]["toolCallName"])
	assert.Equal(t, "oncerun.approval.approved", all[13]["name"], "an approval has no AG-UI event: a CUSTOM one carries it")
	assert.Equal(t, "look.", all[5]["delta"])
	b, err := json.Marshal(all[10])
	require.NoError(t, err)
	assert.JSONEq(t, `{"type":"STATE_DELTA","delta":[{"op":"add","path":"/steps/r1#1","value":{"run_id":"r1","step":1,"tool":"issue_credit","state":"proposed"}}]}`, string(b))
	assert.Equal(t, map[string]any{"state": "completed"}, all[len(all)-1]["result"])
	assert.Equal(t, "a~1b~0c", jsonPointerToken("a/b~c"))
}
