package replay

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

// firstEvent reads each of the SDK's messages of a replay that went
// another way than its history. The history is a recorded one:
// TestRejectedStepDoesNotRun-local-steps.json (markers 5, 7-9, 28-30;
// RequestApproval scheduled at 10, under activity id "10"; timers at 16
// and 21, under timer ids "16" and "21"; workflow tasks
// started at 3, 14, 19 and 26).
func TestFirstEvent(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		msg  string
		task int64
		want *Event
	}{
		{"an activity named by its id", "[TMPRL1100] nondeterministic workflow: history event is ActivityTaskScheduled: " +
			"(ActivityId:10, ActivityType:(Name:RequestApproval), TaskQueue:(Name:q)), replay command is ScheduleActivityTask: (...)",
			0, &Event{ID: 10, Type: "ActivityTaskScheduled"}},
		{"a timer of an id no event has: the first of its type", "[TMPRL1100] nondeterministic workflow: missing replay command for TimerStarted: " +
			"(TimerId:41, StartToFireTimeout:(Seconds:1))", 0, &Event{ID: 16, Type: "TimerStarted"}},
		{"an event its attributes do not name: the first after the task", "[TMPRL1100] nondeterministic workflow: " +
			"history event is MarkerRecorded: (MarkerName:LocalActivity, Details:map[data:0xc000]), replay command is ...",
			19, &Event{ID: 28, Type: "MarkerRecorded"}},
		{"a command expected", "[TMPRL1100] During replay, a matching Activity command was expected in history event position 10. " +
			"However, the replayed code did not produce that.", 0, &Event{ID: 10, Type: "ActivityTaskScheduled"}},
		{"a local activity", `[TMPRL1100] code executed local activity RunTool, but history event found Plan, markerData: ` +
			`payloads:{data:"{\"ActivityID\":\"4\",\"ActivityType\":\"Plan\"}"}`, 0, &Event{ID: 28, Type: "MarkerRecorded"}},
		{"a version", `[TMPRL1100] Workflow code removed support of version 1. for "bundled-changes-1" changeID. The oldest supported version is 2`,
			0, &Event{ID: 5, Type: "MarkerRecorded"}},
		{"an extra command: the task", "[TMPRL1100] nondeterministic workflow: extra replay command for StartTimer: (TimerId:99)",
			14, &Event{ID: 14, Type: "WorkflowTaskStarted"}},
		{"a panic of the code: the task", "workflow panic: runtime error: index out of range", 26,
			&Event{ID: 26, Type: "WorkflowTaskStarted"}},
		{"nothing to go by", "workflow panic", 0, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := history(t, "TestRejectedStepDoesNotRun-local-steps.json")
			assert.Equal(t, tt.want, firstEvent(h, errors.New(tt.msg), tt.task))
		})
	}
}

func TestFirstEventOfTheTimerNamed(t *testing.T) {
	t.Parallel()
	h := history(t, "TestRejectedStepDoesNotRun-local-steps.json")
	id := h.Events[20].GetTimerStartedEventAttributes().GetTimerId()
	got := firstEvent(h, errors.New("[TMPRL1100] nondeterministic workflow: missing replay command for TimerStarted: (TimerId:"+id+", X:1)"), 0)
	assert.Equal(t, &Event{ID: 21, Type: "TimerStarted"}, got)
}

func TestMentions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		attrs, id string
		want      bool
	}{
		{"(ActivityId:v1/a/r/1/x, ActivityType:(Name:RunTool))", "ActivityId:v1/a/r/1/x", true},
		{"(ActivityId:v1/a/r/1/x_y, ActivityType:(Name:RunTool))", "ActivityId:v1/a/r/1/x", false},
		{"(TimerId:41)", "TimerId:4", false},
		{"(X:1, TimerId:4)", "TimerId:4", true},
		{"(OtherTimerId:4, TimerId:5)", "TimerId:4", false},
		{"", "TimerId:4", false},
	} {
		assert.Equal(t, tt.want, mentions(tt.attrs, tt.id), "%s in %s", tt.id, tt.attrs)
	}
}
