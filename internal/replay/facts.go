package replay

import (
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/workflows"
)

// The change ID that every agent run records once when it (or a generation
// of it) begins, and the version of it under which a step's identity does
// not depend on the worker (workflows' bundledChanges and stepIdentity).
const (
	bundledChanges = "bundled-changes-1"
	stepIdentity   = workflow.Version(3)
)

// The SDK's markers: their names and the keys of their details.
const (
	versionMarker  = "Version"
	versionChange  = "change-id"
	versionValue   = "version"
	localActivity  = "LocalActivity"
	localData      = "data"
	localResult    = "result"
	noVersionFound = workflow.DefaultVersion
)

// facts is what a check reads of a history itself, beside its replay.
type facts struct {
	// input is the run's input, from its first event.
	input workflows.RunInput
	// open says the history has not closed: its run goes on.
	open bool
	// decided says a workflow task completed: the code made decisions a
	// replay can check. A run whose first task has not completed has none.
	decided bool
	// bundled is the version of bundled-changes-1 the history records
	// (workflow.DefaultVersion when it records none), and identity says
	// the run is under step identity: that version is at least 3 and, in
	// a later generation, the run began under it (Carry.Identity).
	bundled  workflow.Version
	identity bool
	// turns are the run's planning turns, in the order they were asked.
	turns []turn
}

// turn is one recorded planning turn.
type turn struct {
	// event is the event that holds the turn's answer: the Plan
	// activity's ActivityTaskCompleted, or the local activity's marker;
	// the scheduling event while no answer is recorded.
	event int64
	// out is the answer, when answered is set.
	out      activities.PlanOutput
	answered bool
}

// localMarkerData is the SDK's record of a local activity in its marker.
type localMarkerData struct {
	ActivityID   string
	ActivityType string
}

// readFacts reads h.
func readFacts(h *historypb.History) (facts, error) {
	f := facts{bundled: noVersionFound, open: true}
	events := h.GetEvents()
	if len(events) == 0 {
		return facts{}, errors.New("the history has no events")
	}
	if err := decode(events[0].GetWorkflowExecutionStartedEventAttributes().GetInput(), &f.input); err != nil {
		return facts{}, fmt.Errorf("read the run's input (event 1): %w", err)
	}
	f.open = !closes(events[len(events)-1].GetEventType())
	planned := map[int64]int{} // a Plan activity's scheduling event -> its turn
	for _, e := range events {
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			f.decided = true
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			m := e.GetMarkerRecordedEventAttributes()
			switch m.GetMarkerName() {
			case versionMarker:
				var change string
				var v workflow.Version
				if decode(m.GetDetails()[versionChange], &change) == nil && change == bundledChanges &&
					decode(m.GetDetails()[versionValue], &v) == nil {
					f.bundled = v
				}
			case localActivity:
				var d localMarkerData
				if decode(m.GetDetails()[localData], &d) != nil || d.ActivityType != planActivity {
					continue
				}
				t := turn{event: e.GetEventId()}
				if m.GetFailure() == nil && decode(m.GetDetails()[localResult], &t.out) == nil {
					t.answered = true
				}
				f.turns = append(f.turns, t)
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			if e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == planActivity {
				planned[e.GetEventId()] = len(f.turns)
				f.turns = append(f.turns, turn{event: e.GetEventId()})
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			a := e.GetActivityTaskCompletedEventAttributes()
			if i, ok := planned[a.GetScheduledEventId()]; ok {
				t := &f.turns[i]
				t.event = e.GetEventId()
				t.answered = decode(a.GetResult(), &t.out) == nil
			}
		}
	}
	c := f.input.Carry
	f.identity = f.bundled >= stepIdentity && (c == nil || c.Identity)
	return f, nil
}

// closes reports whether an event of type t closes a workflow execution.
func closes(t enumspb.EventType) bool {
	switch t {
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
		return true
	}
	return false
}
