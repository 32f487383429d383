package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/planner"
)

// localStep reports whether call's step runs as a local activity: a
// database tool's (natural and keyed, and a read that declares it reads
// only oncerun's database; the Plan activity records which, as
// PlannedCall.Local), whose effect is one short transaction in oncerun's
// own database, in a run that began under bundledChanges. Such a step
// needs no at-most-once dispatch from Temporal: a worker that dies in it
// loses its workflow task, and the worker that takes the run over runs the
// step again, which the dedup store replays (natural and keyed) or repeats
// harmlessly (read). It saves the step an activity task's three events, a
// dispatch through the task queue and a workflow task, and consecutive
// steps share one workflow task. External and MCP tools, and reads that
// call out, stay activities: they are long, heartbeat, and have their own
// retry horizon and leases.
func (r *run) localStep(call activities.PlannedCall) bool {
	return r.bundled && call.Local
}

// localToolOptions retry a database tool's step, a local activity, as
// toolOptions retry an activity, for at most the same retry horizon. A
// local activity has no heartbeat: the worker that runs it holds the
// workflow task (its SDK heartbeats the task while the step runs), and
// Temporal hands the run to another worker when that task times out.
var localToolOptions = workflow.LocalActivityOptions{
	ScheduleToCloseTimeout: toolOptions.ScheduleToCloseTimeout,
	RetryPolicy:            toolOptions.RetryPolicy,
}

// Bounds of one workflow task's local activities. Their markers and
// results travel in the task's completion, one gRPC message, and count in
// the history only once the task completes: past either bound the run
// lets the task complete (a timer of a millisecond) before its next local
// step.
const (
	maxLocalPerTask      = 200
	maxLocalBytesPerTask = 1 << 20
)

// executeLocal runs a database tool's step as a local activity.
func (r *run) executeLocal(ctx workflow.Context, call activities.PlannedCall, in activities.ToolInput) (activities.ToolOutput, error) {
	if err := r.yieldIfFull(ctx); err != nil {
		return activities.ToolOutput{}, err
	}
	opts := localToolOptions
	opts.StartToCloseTimeout = call.Timeout
	var out activities.ToolOutput
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, opts), a.RunTool, in).Get(ctx, &out)
	r.task.add(r, len(out.Result)+len(in.Args))
	return out, err
}

// yieldIfFull lets the workflow task complete when its local activities
// have reached a bound.
// A task that recorded a refusal by a planning turn that ran in it
// completes too, so that the refusal is in the history before the next
// local step makes an effect (see stepIdentity).
func (r *run) yieldIfFull(ctx workflow.Context) error {
	r.task.sync(ctx)
	if r.task.markers < maxLocalPerTask && r.task.bytes < maxLocalBytesPerTask && !r.task.refused {
		return nil
	}
	return workflow.Sleep(ctx, time.Millisecond)
}

// taskLoad counts the local activities of one workflow task, which
// GetCurrentHistoryLength does not count until the task completes.
type taskLoad struct {
	// historyLength is the history's length when the task began: a new
	// value means a new task.
	historyLength int
	markers       int
	bytes         int
	// refused is set once a planning turn of the task refused a call (see
	// run.refuse).
	refused bool
}

// sync starts the count again when a new workflow task has begun.
func (t *taskLoad) sync(ctx workflow.Context) {
	if n := workflow.GetInfo(ctx).GetCurrentHistoryLength(); n != t.historyLength {
		*t = taskLoad{historyLength: n}
	}
}

// add counts one local activity of a run that runs its steps locally, and
// its payload's bytes. In a run that began before, nothing is counted, so
// that its decisions replay as they were made.
func (t *taskLoad) add(r *run, bytes int) {
	if r.bundled {
		t.markers++
		t.bytes += bytes
	}
}

// ranPlan counts a planning turn that ran as a local activity.
func (t *taskLoad) ranPlan(r *run, plan activities.PlanOutput) {
	if r.in.Planner != planner.NameScript {
		return
	}
	n := 0
	for _, c := range plan.Calls {
		n += len(c.Args) + len(c.Proposed.Args)
	}
	t.add(r, n)
}

// historyLength is the run's history length as Continue-As-New judges
// it: the history's, and the markers of the local activities the current
// workflow task will add.
func (r *run) historyLength(ctx workflow.Context) int {
	r.task.sync(ctx)
	return r.task.historyLength + r.task.markers
}
