package replay

import (
	"fmt"
	"regexp"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
)

// Event is one event of a history: the first that a replay found this
// build's code no longer produces.
type Event struct {
	ID   int64  `json:"id"`
	Type string `json:"type"`
}

// String says "event 17 ActivityTaskScheduled".
func (e Event) String() string { return fmt.Sprintf("event %d %s", e.ID, e.Type) }

// The SDK's messages of a replay that went another way than its history
// (TMPRL1100), and what each names of the event.
var (
	// "history event is ActivityTaskScheduled: (ActivityId:..., ...), replay
	// command is ..." and "missing replay command for TimerStarted: (...)":
	// the event's type and its attributes.
	eventIs = regexp.MustCompile(`(?:history event is|missing replay command for) (\w+): \((.*)`)
	// "a matching Timer command was expected in history event position 7":
	// the kind of command and its id (an activity's, a timer's, ...).
	commandExpected = regexp.MustCompile(`a matching (\w+) command was expected in history event position (.+?)\. However`)
	// "code executed local activity RunTool, but history event found Plan,
	// markerData: ... \"ActivityID\":\"2\"": the local activity's id.
	localFound = regexp.MustCompile(`code executed local activity \S+, but history event found \S+, markerData: .*?ActivityID\\*":\\*"([^"\\]+)`)
	// "... version 9 for "bundled-changes-1" changeID ...": the change.
	versionOf = regexp.MustCompile(`for "([^"]+)" change ?ID`)
)

// firstEvent finds in h the event that err, the error of h's replay, is
// about. task is the history length of the last workflow task the code
// ran in: the event is after it when the SDK's message does not say
// which it is, and when the message names no event, that task's
// WorkflowTaskStarted is. It returns nil when it finds nothing.
func firstEvent(h *historypb.History, err error, task int64) *Event {
	if err == nil {
		return nil
	}
	msg := err.Error()
	events := h.GetEvents()
	found := func(e *historypb.HistoryEvent) *Event {
		return &Event{ID: e.GetEventId(), Type: e.GetEventType().String()}
	}
	if m := eventIs.FindStringSubmatch(msg); m != nil {
		var first, after *historypb.HistoryEvent
		for _, e := range events {
			if e.GetEventType().String() != m[1] {
				continue
			}
			if id := identity(e); id != "" && mentions(m[2], id) {
				return found(e)
			}
			if first == nil {
				first = e
			}
			if after == nil && e.GetEventId() > task {
				after = e
			}
		}
		if after != nil {
			return found(after)
		}
		if first != nil {
			return found(first)
		}
	}
	if m := commandExpected.FindStringSubmatch(msg); m != nil {
		for _, e := range events {
			if kind, id := commandOf(e); kind == m[1] && id == m[2] {
				return found(e)
			}
		}
	}
	if m := localFound.FindStringSubmatch(msg); m != nil {
		for _, e := range events {
			if kind, id := commandOf(e); kind == "Marker" && id == m[1] {
				return found(e)
			}
		}
	}
	if m := versionOf.FindStringSubmatch(msg); m != nil {
		for _, e := range events {
			if kind, id := commandOf(e); kind == "Marker" && id == versionMarker+"_"+m[1] {
				return found(e)
			}
		}
	}
	for _, e := range events {
		if e.GetEventId() == task {
			return found(e)
		}
	}
	return nil
}

// identity is how the SDK's message of an event names it among events of
// its type ("ActivityId:v1/acme/r1/3/issue_credit"), or "" when nothing
// does.
func identity(e *historypb.HistoryEvent) string {
	switch e.GetEventType() {
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
		return "ActivityId:" + e.GetActivityTaskScheduledEventAttributes().GetActivityId()
	case enumspb.EVENT_TYPE_TIMER_STARTED:
		return "TimerId:" + e.GetTimerStartedEventAttributes().GetTimerId()
	case enumspb.EVENT_TYPE_TIMER_CANCELED:
		return "TimerId:" + e.GetTimerCanceledEventAttributes().GetTimerId()
	case enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
		return "WorkflowId:" + e.GetStartChildWorkflowExecutionInitiatedEventAttributes().GetWorkflowId()
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED:
		return fmt.Sprintf("ScheduledEventId:%d", e.GetActivityTaskCancelRequestedEventAttributes().GetScheduledEventId())
	}
	return ""
}

// mentions reports whether attrs, the SDK's rendering of an event's
// attributes, holds the field id whole.
func mentions(attrs, id string) bool {
	for from := 0; from < len(attrs); {
		i := strings.Index(attrs[from:], id)
		if i < 0 {
			return false
		}
		i += from
		end := attrs[i+len(id):]
		if (end == "" || end[0] == ',' || end[0] == ')') && (i == 0 || attrs[i-1] == '(' || attrs[i-1] == ' ') {
			return true
		}
		from = i + 1
	}
	return false
}

// commandOf returns the kind and id under which the SDK matches the
// command that made e ("Activity" and the activity's id, "Timer",
// "ChildWorkflow", "Marker" and a local activity's id or
// "Version_<change>"), or empty strings.
func commandOf(e *historypb.HistoryEvent) (kind, id string) {
	switch e.GetEventType() {
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
		return "Activity", e.GetActivityTaskScheduledEventAttributes().GetActivityId()
	case enumspb.EVENT_TYPE_TIMER_STARTED:
		return "Timer", e.GetTimerStartedEventAttributes().GetTimerId()
	case enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
		return "ChildWorkflow", e.GetStartChildWorkflowExecutionInitiatedEventAttributes().GetWorkflowId()
	case enumspb.EVENT_TYPE_MARKER_RECORDED:
		m := e.GetMarkerRecordedEventAttributes()
		switch m.GetMarkerName() {
		case localActivity:
			var d localMarkerData
			if decode(m.GetDetails()[localData], &d) == nil {
				return "Marker", d.ActivityID
			}
		case versionMarker:
			var change string
			if decode(m.GetDetails()[versionChange], &change) == nil {
				return "Marker", versionMarker + "_" + change
			}
		}
	}
	return "", ""
}
