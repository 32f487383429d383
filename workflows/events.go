package workflows

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/planner"
)

// runEvents is the version of bundledChanges under which a run records its
// story in the event log (docs/events.md): its start, each step's
// proposal and each change of its state, its pauses, the messages it read,
// its model's turns, its end.
const runEvents workflow.Version = 4

// story is what a run has told of itself, and what it has still to write.
//
// The run's facts come from its status: after each change (see touch) the
// run compares each step and its own state with what it last told, and
// adds a fact for each difference. Each fact has a source that names it
// within the run (a step's n-th entry into a state, the run's end), so
// that a fact written again, by a retried attempt or a replayed task, is
// not a second event; the source depends on the run's status only, not on
// the worker that replays it.
//
// The facts go to PostgreSQL with the run's next activity (a step's, a
// planning turn's), which writes them before its own work; a run that
// waits (for a person, a pause, a child) writes them with an activity of
// their own (see flushStory), as does a run that ends or continues as new.
type story struct {
	on      bool
	pending []activities.RunFact
	steps   map[int64]*toldStep
	paused  bool
	pauses  int
	ended   bool
	read    map[string]bool
	// writing is set while a flush is in flight: the facts after it wait,
	// so that the log keeps the run's order.
	writing bool
}

// toldStep is what the run told of one step.
type toldStep struct {
	state   StepState
	entries map[StepState]int
}

// startStory sets the run's story up: a first generation tells that it
// started; a later one knows what its steps told.
func (r *run) startStory(ctx workflow.Context) {
	r.story.steps = map[int64]*toldStep{}
	r.story.read = map[string]bool{}
	if !r.story.on {
		return
	}
	for i := range r.status.Steps {
		s := &r.status.Steps[i]
		r.story.steps[s.Step] = &toldStep{state: s.State, entries: map[StepState]int{s.State: 1}}
	}
	for _, m := range r.status.Messages {
		if m.DeliveredTurn > 0 {
			r.story.read[m.MessageID] = true
		}
	}
	r.story.paused = r.status.Paused != nil
	if r.in.Carry == nil {
		data := map[string]any{"goal": r.in.Goal, "planner": r.in.Planner}
		if p := r.in.Parent; p != nil {
			data["parent_run_id"], data["parent_step"] = p.RunID, p.Step
		}
		r.tell(ctx, "run:started", 0, "run.started", data)
	}
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			if err := workflow.Await(ctx, func() bool { return len(r.story.pending) > 0 && !r.story.writing }); err != nil {
				return
			}
			r.flushStory(ctx)
		}
	})
}

// tell adds a fact to the run's story.
func (r *run) tell(ctx workflow.Context, source string, step int64, typ string, data map[string]any) {
	var raw json.RawMessage
	if len(data) > 0 {
		// Maps encode with sorted keys: the same facts, the same bytes.
		raw, _ = json.Marshal(data) //workflowcheck:ignore
	}
	r.story.pending = append(r.story.pending, activities.RunFact{
		RunID: r.in.RunID, Source: r.in.RunID + "|" + source, Step: step, Type: typ, Data: raw, At: workflow.Now(ctx),
	})
}

// observe tells what changed in the run's status since it last told.
func (r *run) observe(ctx workflow.Context) {
	if !r.story.on {
		return
	}
	for i := range r.status.Steps {
		s := &r.status.Steps[i]
		t := r.story.steps[s.Step]
		if t == nil {
			t = &toldStep{entries: map[StepState]int{}}
			r.story.steps[s.Step] = t
			data := map[string]any{"tool": s.Tool, "args_hash": s.ArgsHash, "class": string(s.Class), "turn": s.Turn}
			if s.CallID != "" {
				data["call_id"] = s.CallID
			}
			r.tell(ctx, fmt.Sprintf("step:%d:proposed", s.Step), s.Step, "step.proposed", data)
		}
		if t.state == s.State || (s.State == StepRunning && s.StartedAt.IsZero()) {
			// A step of a parallel turn is numbered running before it
			// starts: it is told running once it does.
			continue
		}
		t.state = s.State
		t.entries[s.State]++
		typ, data := stepFact(s)
		if typ != "" {
			r.tell(ctx, fmt.Sprintf("step:%d:%s:%d", s.Step, s.State, t.entries[s.State]), s.Step, typ, data)
		}
	}
	for _, m := range r.status.Messages {
		if m.DeliveredTurn > 0 && !r.story.read[m.MessageID] {
			r.story.read[m.MessageID] = true
			r.tell(ctx, "message:"+m.MessageID+":read", 0, "message.read", map[string]any{"message_id": m.MessageID, "turn": m.DeliveredTurn})
		}
	}
	if paused := r.status.Paused != nil; paused != r.story.paused && !r.ctl.ended {
		r.story.paused = paused
		if paused {
			r.story.pauses++
			r.tell(ctx, r.generation()+"paused:"+strconv.Itoa(r.story.pauses), 0, "run.paused", map[string]any{"by": r.status.Paused.By})
		} else {
			r.tell(ctx, r.generation()+"resumed:"+strconv.Itoa(r.story.pauses), 0, "run.resumed", nil)
		}
	}
	if r.ctl.ended && !r.story.ended {
		r.story.ended = true
		data := map[string]any{"steps": len(r.status.Steps)}
		if r.status.Error != "" {
			data["error"] = r.status.Error
		}
		if r.status.Message != "" {
			data["message"] = r.status.Message
		}
		r.tell(ctx, "run:ended", 0, "run."+string(r.status.State), data)
	}
}

// generation prefixes the source of a fact the run may tell again in a
// later generation (a pause), whose counts start again there.
func (r *run) generation() string { return "g" + strconv.Itoa(r.status.Generation) + ":" }

// stepFact is the fact of step s entering its state: its type and data;
// no type for a state whose fact another writer tells (a decision's, by
// its audit row).
func stepFact(s *Step) (string, map[string]any) {
	data := map[string]any{"tool": s.Tool}
	switch s.State {
	case StepPendingApproval:
		if s.Limit != nil {
			return "step.parked_at_limit", data
		}
		return "step.waiting_for_approval", data
	case StepRunning:
		if s.Child != "" {
			data["child_run_id"] = s.Child
		}
		return "step.running", data
	case StepDone:
		data["result_bytes"] = len(s.Result)
		if s.Replayed {
			return "step.replayed", data
		}
		return "step.completed", data
	case StepDuplicate:
		data["duplicate_of"] = s.DuplicateOf
		if s.DuplicateRun != "" {
			data["duplicate_of_run"] = s.DuplicateRun
		}
		return "step.duplicate", data
	case StepFailed:
		data["error"] = s.Error
		if s.Refused {
			return "step.refused", data
		}
		return "step.failed", data
	}
	return "step." + string(s.State), data
}

// takeStory hands the run's unwritten facts to the local activity about
// to run in this workflow task, once any write in flight has ended; the
// run writes no other fact until that activity has (see wrote), so that
// the log keeps the run's order. Only a local activity carries facts: a
// regular one may start much later, after facts the run tells meanwhile.
func (r *run) takeStory(ctx workflow.Context) []activities.RunFact {
	if !r.story.on || len(r.story.pending) == 0 {
		return nil
	}
	_ = workflow.Await(ctx, func() bool { return !r.story.writing })
	facts := r.story.pending
	r.story.pending = nil
	r.story.writing = len(facts) > 0
	return facts
}

// wrote ends the write of facts a local activity carried (see takeStory):
// when it failed, its facts are written again before any later one.
func (r *run) wrote(facts []activities.RunFact, err error) {
	if len(facts) == 0 {
		return
	}
	if err != nil {
		r.story.pending = append(facts, r.story.pending...)
	}
	r.story.writing = false
}

// flushStory writes the run's unwritten facts with an activity of their
// own, in the workflow task.
func (r *run) flushStory(ctx workflow.Context) {
	if !r.story.on {
		return
	}
	_ = workflow.Await(ctx, func() bool { return !r.story.writing })
	if len(r.story.pending) == 0 {
		return
	}
	facts := r.story.pending
	r.story.pending = nil
	r.story.writing = true
	defer func() { r.story.writing = false }()
	in := activities.RecordFactsInput{Tenant: r.in.Tenant, Facts: facts}
	// A run that is cancelled still tells how it ended.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(dctx, storyOptions), a.RecordFacts, in).Get(dctx, nil)
	if err != nil {
		// The story is not worth the run: it goes on, and says so.
		workflow.GetLogger(ctx).Warn("the run's events could not be written", "events", len(facts), "error", err)
	}
}

// storyOptions retry the writing of a run's facts, a statement of
// milliseconds, through a database outage as long as the approvals
// table's writes ride out (bookkeepingHorizon).
var storyOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout:    10 * time.Second,
	ScheduleToCloseTimeout: bookkeepingHorizon,
	RetryPolicy:            localPlanOptions.RetryPolicy,
}

// turnFacts tells a model's planning turn: started before it, ended after.
func (r *run) turnStarted(ctx workflow.Context) {
	if r.story.on && r.in.Planner != planner.NameScript {
		r.tell(ctx, fmt.Sprintf("turn:%d:started", r.turns), 0, "turn.started", map[string]any{"turn": r.turns})
	}
}

func (r *run) turnEnded(ctx workflow.Context, plan activities.PlanOutput, err error) {
	if !r.story.on || r.in.Planner == planner.NameScript {
		return
	}
	data := map[string]any{"turn": r.turns, "calls": len(plan.Calls), "done": plan.Done}
	if plan.Message != "" {
		// The model's final words, whole (at most MaxMessageBytes): what
		// its text.delta events were, for a reader that missed them.
		data["message"] = plan.Message
	}
	if err != nil {
		data["error"] = failureMessage(err)
	}
	r.tell(ctx, fmt.Sprintf("turn:%d:ended", r.turns), 0, "turn.ended", data)
}
