package approvals

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/oncerun/oncerun/internal/events"
)

// aguiStream translates a run's events into AG-UI's (docs/events.md has
// the table): the run's start and end, the model's text, each step as a
// tool call, each change of a step's state as a delta of the shared state,
// and what AG-UI has no event for (approvals, questions, an effect of
// unknown outcome) as CUSTOM events named oncerun.<type>.
type aguiStream struct {
	started bool
	// text is the id of the model's message being written, if any.
	text string
}

// aguiEvent is one AG-UI event.
type aguiEvent map[string]any

// aguiToolCallID is a step's tool call id: its run and step.
func aguiToolCallID(e Event) string { return fmt.Sprintf("%s#%d", e.RunID, e.Step) }

// jsonPointerToken escapes s for a JSON Pointer (RFC 6901).
func jsonPointerToken(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

func (a *aguiStream) translate(e Event) []aguiEvent {
	var out []aguiEvent
	root := e.RunID == e.RootRunID
	if !a.started {
		a.started = true
		out = append(out,
			aguiEvent{"type": "RUN_STARTED", "threadId": e.RootRunID, "runId": e.RootRunID},
			aguiEvent{"type": "STATE_SNAPSHOT", "snapshot": map[string]any{"steps": map[string]any{}, "runs": map[string]any{}}})
		if e.Type == "run.started" && root {
			return out
		}
	}
	data := map[string]any{}
	_ = json.Unmarshal(e.Data, &data)
	custom := aguiEvent{"type": "CUSTOM", "name": "oncerun." + e.Type, "value": e}
	stepState := func(state string) aguiEvent {
		return aguiEvent{"type": "STATE_DELTA", "delta": []map[string]any{{
			"op": "add", "path": "/steps/" + jsonPointerToken(aguiToolCallID(e)),
			"value": map[string]any{"run_id": e.RunID, "step": e.Step, "tool": data["tool"], "state": state},
		}}}
	}
	switch {
	case e.Type == "text.delta":
		id, _ := data["message_id"].(string)
		if a.text != id {
			if a.text != "" {
				out = append(out, aguiEvent{"type": "TEXT_MESSAGE_END", "messageId": a.text})
			}
			a.text = id
			out = append(out, aguiEvent{"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"})
		}
		return append(out, aguiEvent{"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": data["text"]})
	case e.Type == "turn.ended" || e.Type == "turn.discarded":
		if a.text != "" {
			out = append(out, aguiEvent{"type": "TEXT_MESSAGE_END", "messageId": a.text})
			a.text = ""
		}
		return append(out, custom)
	case e.Type == "run.started":
		return append(out, aguiEvent{"type": "STATE_DELTA", "delta": []map[string]any{{
			"op": "add", "path": "/runs/" + jsonPointerToken(e.RunID), "value": map[string]any{"state": "running"},
		}}}, custom)
	case strings.HasPrefix(e.Type, "run.") && events.Ends(e.Type):
		state := strings.TrimPrefix(e.Type, "run.")
		out = append(out, aguiEvent{"type": "STATE_DELTA", "delta": []map[string]any{{
			"op": "add", "path": "/runs/" + jsonPointerToken(e.RunID), "value": map[string]any{"state": state},
		}}})
		if !root {
			return append(out, custom)
		}
		if e.Type == events.RunFailed {
			msg, _ := data["error"].(string)
			return append(out, aguiEvent{"type": "RUN_ERROR", "message": msg, "code": "run_failed"})
		}
		return append(out, aguiEvent{"type": "RUN_FINISHED", "threadId": e.RootRunID, "runId": e.RootRunID,
			"result": map[string]any{"state": state}})
	case e.Type == "step.proposed":
		id := aguiToolCallID(e)
		return append(out,
			aguiEvent{"type": "TOOL_CALL_START", "toolCallId": id, "toolCallName": data["tool"]},
			aguiEvent{"type": "TOOL_CALL_END", "toolCallId": id},
			stepState("proposed"))
	case e.Type == "step.completed" || e.Type == "step.replayed" || e.Type == "step.duplicate" ||
		e.Type == "step.failed" || e.Type == "step.refused" || e.Type == "step.cancelled" ||
		e.Type == "step.rejected" || e.Type == "step.expired":
		state := strings.TrimPrefix(e.Type, "step.")
		content, _ := json.Marshal(map[string]any{"state": state, "data": data})
		return append(out,
			aguiEvent{"type": "TOOL_CALL_RESULT", "messageId": aguiToolCallID(e) + ":result", "toolCallId": aguiToolCallID(e),
				"role": "tool", "content": string(content)},
			stepState(state))
	case strings.HasPrefix(e.Type, "step."):
		return append(out, stepState(strings.TrimPrefix(e.Type, "step.")), custom)
	}
	return append(out, custom)
}
