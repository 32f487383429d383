package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/tools"
)

// stepIdentity is the version of bundledChanges under which a step's
// identity (its number, its key, whether it is allowed, what it applied)
// does not depend on the worker that replays the run (docs/agent-runs.md,
// "Step identity"):
//
//   - every call a planner proposes is the run's next step, valid or not:
//     step n is the n-th call proposed, its key is the call's tool's at n,
//     and a call this worker refuses is a step that failed, refused, in
//     the run's status;
//   - a call whose key the dedup store holds completed is that step,
//     whatever this worker's registry says of it: Plan marks it Made, the
//     run makes it without refusing it or asking for an approval, and
//     RunTool replays it;
//   - a refusal by a planning turn that ran in the workflow task is in the
//     history before the next local step makes an effect;
//   - before the run records a step as not made (cancelled, a duplicate)
//     or holds it for a pause, it reads the step's key: a step a worker
//     made and died before recording is made (replayed), not left out.
const stepIdentity workflow.Version = 3

// carryFormat is the format of the Carry this release writes and reads.
// A release that adds a field to Carry that a generation cannot do
// without raises it; a worker whose release knows an older format fails
// the generation's workflow task (see checkCarry), so that a worker of a
// newer release takes it instead of dropping what it does not know.
const carryFormat = 2

// checkCarry fails the workflow task, by a panic that Temporal records as
// the task's failure and retries on another worker, when the generation's
// carry is of a format this worker's release does not know.
func checkCarry(c *Carry) {
	if c != nil && c.Format > carryFormat {
		panic(fmt.Sprintf("this generation's carry is of format %d, and this worker's oncerun knows formats up to %d: "+
			"a worker of a newer release must take it (docs/deploy.md, \"Rolling deploys\")", c.Format, carryFormat))
	}
}

// madeSpan is how many steps past the one asked about a store read covers:
// a worker that died in its workflow task made at most maxLocalPerTask
// steps in it.
const madeSpan = maxLocalPerTask

// madeOptions retry the read of a run's made steps as the bookkeeping
// activities are retried: a run must not record a step as not made because
// the database was down.
var madeOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout:    10 * time.Second,
	ScheduleToCloseTimeout: bookkeepingHorizon,
	RetryPolicy:            bookkeepingOptions.RetryPolicy,
}

// madeSteps is what the current workflow task read, or is reading, of
// the store: the steps from first to last that it holds completed. A new
// task reads again: the task before may have been a worker's that died
// after making a step. Coroutines of one task share one read.
type madeSteps struct {
	historyLength int
	first, last   int64
	pending       workflow.Future
	// steps are what the store holds made, by step, in order.
	steps []activities.MadeStep
}

// at returns the made step n, or nil.
func (m *madeSteps) at(n int64) *activities.MadeStep {
	for i := range m.steps {
		if m.steps[i].Step == n {
			return &m.steps[i]
		}
	}
	return nil
}

// readMade makes sure the current workflow task has read the store for
// step n, and returns what it read.
func (r *run) readMade(ctx workflow.Context, n int64) (*madeSteps, error) {
	m := &r.madeRead
	if hl := workflow.GetInfo(ctx).GetCurrentHistoryLength(); hl != m.historyLength || n < m.first || n > m.last {
		last := max(n, int64(len(r.status.Steps))) + madeSpan
		f := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, madeOptions), a.MadeSteps,
			activities.MadeQuery{Tenant: r.in.Tenant, RunID: r.in.RunID, First: n, Last: last})
		*m = madeSteps{historyLength: hl, first: n, last: last, pending: f}
	}
	read := *m
	if f := read.pending; f != nil {
		var got activities.MadeSteps
		if err := f.Get(ctx, &got); err != nil {
			return nil, &runFailure{msg: fmt.Sprintf("read whether step %d was made", n), err: err}
		}
		read.pending, read.steps = nil, got.Steps
		if m.pending == f {
			// No coroutine began another read meanwhile.
			*m = read
		}
	}
	return &read, nil
}

// made returns what the store holds of step n of the run, when a worker
// made it and died before its workflow task completed, or nil. Only a run
// under step identity asks; it reads the store once a workflow task for
// the steps from n on (see madeSpan).
func (r *run) made(ctx workflow.Context, n int64) (*activities.MadeStep, error) {
	if !r.identity {
		return nil, nil
	}
	if n >= 1 && n <= int64(len(r.status.Steps)) && r.status.Steps[n-1].made {
		return &activities.MadeStep{Step: n, Tool: r.status.Steps[n-1].Tool, ArgsHash: r.status.Steps[n-1].ArgsHash}, nil
	}
	read, err := r.readMade(ctx, n)
	if err != nil {
		return nil, err
	}
	return read.at(n), nil
}

// madeFrom reports whether the store holds made a step of the run from n
// on (within what one read covers): a worker made it and died before the
// run recorded it.
func (r *run) madeFrom(ctx workflow.Context, n int64) (bool, error) {
	if !r.identity {
		return false, nil
	}
	read, err := r.readMade(ctx, n)
	if err != nil {
		return false, err
	}
	for _, s := range read.steps {
		if s.Step >= n {
			return true, nil
		}
	}
	return false, nil
}

// madeStep reports whether step s was made, by the store, when its args
// hash is the step's: the key of a step edited by an approver holds the
// edited arguments' hash, which s then has too.
func (r *run) madeStep(ctx workflow.Context, s *Step) (bool, error) {
	if s.made {
		return true, nil
	}
	m, err := r.made(ctx, s.Step)
	if err != nil || m == nil {
		return false, err
	}
	if m.Tool != s.Tool || m.ArgsHash != s.ArgsHash {
		workflow.GetLogger(ctx).Warn("the store holds another call under the step's number", "step", s.Step,
			"tool", s.Tool, "stored_tool", m.Tool, "args_hash", s.ArgsHash, "stored_args_hash", m.ArgsHash)
		return false, nil
	}
	s.made = true
	workflow.GetLogger(ctx).Info("step was made by a worker that died before the run recorded it: made again from the store",
		"step", s.Step, "tool", s.Tool, "key", s.Key)
	return true, nil
}

// makesAnyway reports whether step s of a cancelled or paused run runs
// all the same: a worker made it and died before the run recorded it (it
// is replayed from the store), or it is a read, which has no effect and
// which that worker ran before a later step it made. It takes back what a
// cancel recorded of it.
func (r *run) makesAnyway(ctx workflow.Context, s *Step) (bool, error) {
	if !r.identity || (!r.halted() && r.status.Paused == nil) {
		return false, nil
	}
	anyway, err := r.madeStep(ctx, s)
	if err == nil && !anyway && s.Class == tools.ClassRead {
		anyway, err = r.madeFrom(ctx, s.Step+1)
	}
	if err != nil || !anyway {
		return false, err
	}
	if s.State == StepCancelled {
		s.State, s.Error, s.FinishedAt = StepRunning, "", time.Time{}
	}
	return true, nil
}

// stopping reports whether a cancelled run stops here, at a turn's
// boundary (beforePlanning) or between the calls of a turn: it does
// unless a step from its next on was made (see madeFrom). A model is
// never asked again after a cancel: the calls a dead worker made are in
// the turn the run already holds.
func (r *run) stopping(ctx workflow.Context, beforePlanning bool) (bool, error) {
	if !r.cancelled() {
		return false, nil
	}
	if beforePlanning && r.in.Planner != planner.NameScript {
		return true, nil
	}
	made, err := r.madeFrom(ctx, int64(len(r.status.Steps))+1)
	return !made, err
}

// gateTurn is gate at a turn's boundary: a paused run waits, unless it
// follows a script whose next steps a dead worker made (see madeFrom).
func (r *run) gateTurn(ctx workflow.Context) error {
	if r.status.Paused == nil || r.halted() {
		return nil
	}
	if r.in.Planner == planner.NameScript {
		if made, err := r.madeFrom(ctx, int64(len(r.status.Steps))+1); err != nil || made {
			return err
		}
	}
	return r.gate(ctx)
}

// refuse makes call, the i-th of its turn, which this worker's registry
// refused, the run's next step, failed as refused, and returns what the
// planner learns of it. A script's refusal came from a planning turn in
// the workflow task: the run lets that task complete before its next
// local step, so that the refusal is in the history before any later
// effect (taskLoad.refused).
func (r *run) refuse(ctx workflow.Context, call activities.PlannedCall, i int) planner.Observation {
	s := r.numberRefused(ctx, call, i)
	if r.in.Planner == planner.NameScript {
		r.task.sync(ctx)
		r.task.refused = true
	}
	workflow.GetLogger(ctx).Warn("planner proposed an invalid call: the step is refused", "step", s.Step,
		"tool", call.Proposed.Tool, "error", call.Invalid)
	r.touch(ctx)
	o := r.observation(s, planner.OutcomeInvalid)
	o.Error = call.Invalid
	return o
}

// numberRefused records a refused call as the run's next step.
func (r *run) numberRefused(ctx workflow.Context, call activities.PlannedCall, i int) *Step {
	n := int64(len(r.status.Steps)) + 1
	key := ""
	if k, err := keys.New(r.in.Tenant, r.in.RunID, n, call.Proposed.Tool); err == nil {
		key = k.String()
	}
	now := workflow.Now(ctx)
	r.status.Steps = append(r.status.Steps, Step{
		Step: n, Turn: r.turns, CallID: r.callID(call, i), Tool: call.Proposed.Tool, Key: key, Args: call.Proposed.Args,
		State: StepFailed, Error: RefusedPrefix + call.Invalid, Refused: true, PlannedAt: now, FinishedAt: now,
	})
	return &r.status.Steps[n-1]
}

// RefusedPrefix begins the error of a step whose call was refused before
// it ran (Step.Refused).
const RefusedPrefix = "refused: "

// scriptEnd is the final message of a scripted run under step identity:
// the script's own when every step was made, else which were not and
// why, so that a run whose script was not all made never reads as if it
// were.
func (r *run) scriptEnd(msg string) string {
	if !r.identity || r.in.Planner != planner.NameScript {
		return msg
	}
	var undone []string
	for _, s := range r.status.Steps {
		switch s.State {
		case StepDone, StepDuplicate:
			continue
		}
		why := string(s.State)
		if s.Error != "" {
			why += ": " + s.Error
		}
		undone = append(undone, fmt.Sprintf("step %d %s %s", s.Step, s.Tool, why))
	}
	if len(undone) == 0 {
		return msg
	}
	return fmt.Sprintf("every call of the plan was proposed; %d of %d steps were not made: %s",
		len(undone), len(r.status.Steps), strings.Join(undone, "; "))
}
