package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/planner"
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
const carryFormat = 1

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

// madeSteps is what the current workflow task read of the store: the
// steps from first to last that it holds completed. A new task reads
// again: the task before may have been a worker's that died after making
// a step.
type madeSteps struct {
	historyLength int
	first, last   int64
	steps         map[int64]activities.MadeStep
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
	m := &r.madeRead
	if hl := workflow.GetInfo(ctx).GetCurrentHistoryLength(); hl != m.historyLength || n < m.first || n > m.last {
		last := int64(len(r.status.Steps)) + madeSpan
		var got activities.MadeSteps
		err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, madeOptions), a.MadeSteps,
			activities.MadeQuery{Tenant: r.in.Tenant, RunID: r.in.RunID, First: n, Last: last}).Get(ctx, &got)
		if err != nil {
			return nil, &runFailure{msg: fmt.Sprintf("read whether step %d was made", n), err: err}
		}
		*m = madeSteps{historyLength: workflow.GetInfo(ctx).GetCurrentHistoryLength(), first: n, last: last,
			steps: map[int64]activities.MadeStep{}}
		for _, s := range got.Steps {
			m.steps[s.Step] = s
		}
	}
	if s, ok := m.steps[n]; ok {
		return &s, nil
	}
	return nil, nil
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

// nextMade reports whether the run's next step, which no call of the
// run's record holds yet, was made by a worker that died before the run
// recorded it: a cancelled or paused run still plans and makes it, from
// the store, so that its record names every effect.
func (r *run) nextMade(ctx workflow.Context) (bool, error) {
	if !r.identity {
		return false, nil
	}
	m, err := r.made(ctx, int64(len(r.status.Steps))+1)
	return m != nil, err
}

// stopping reports whether a cancelled run stops here, at a turn's
// boundary or between the calls of a turn: it does unless its next step
// was made (see nextMade).
func (r *run) stopping(ctx workflow.Context) (bool, error) {
	if !r.cancelled() {
		return false, nil
	}
	made, err := r.nextMade(ctx)
	return !made, err
}

// gateTurn is gate at a turn's boundary: a paused run waits, unless its
// next step was made (see nextMade).
func (r *run) gateTurn(ctx workflow.Context) error {
	if r.status.Paused == nil || r.halted() {
		return nil
	}
	if made, err := r.nextMade(ctx); err != nil || made {
		return err
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

// approvedBefore applies, to step s whose wait ended cancelled but which
// the store holds made, the decision of record that let a worker make it
// before it died: the cancel reached this worker first, and the step's
// effect exists. It reports whether it did.
func (r *run) approvedBefore(ctx workflow.Context, s *Step, round int) (bool, error) {
	if !r.identity || s.State != StepCancelled {
		return false, nil
	}
	var got activities.MadeSteps
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, madeOptions), a.MadeSteps,
		activities.MadeQuery{Tenant: r.in.Tenant, RunID: r.in.RunID, First: s.Step, Last: s.Step, WithDecisions: true,
			Round: round}).Get(ctx, &got)
	if err != nil {
		return false, &runFailure{msg: fmt.Sprintf("read whether step %d was made", s.Step), err: err}
	}
	if len(got.Steps) == 0 || got.Steps[0].Tool != s.Tool {
		return false, nil
	}
	m := got.Steps[0]
	d := m.Decision
	if d == nil || (d.Decision != string(DecisionApprove) && d.Decision != string(DecisionEdit)) {
		d = &activities.MadeDecision{Decision: string(DecisionApprove), Approver: "oncerun",
			Comment: "its effect was made by a worker that died before the run recorded it", DecidedAt: workflow.Now(ctx)}
	}
	if Decision(d.Decision) == DecisionEdit && d.EditedArgsHash == m.ArgsHash && s.Edit == nil {
		s.Edit = &StepEdit{OriginalArgs: s.Args, OriginalArgsHash: s.ArgsHash, Args: d.EditedArgs, ArgsHash: d.EditedArgsHash,
			EditedBy: d.Approver, EditedAt: d.DecidedAt, Comment: d.Comment}
		s.Args, s.ArgsHash = d.EditedArgs, d.EditedArgsHash
	}
	if m.ArgsHash != s.ArgsHash {
		return false, nil
	}
	s.Approval.Decision, s.Approval.Approver, s.Approval.Comment, s.Approval.DecidedAt =
		Decision(d.Decision), d.Approver, d.Comment, d.DecidedAt
	s.State, s.Error, s.FinishedAt, s.made = StepApproved, "", time.Time{}, true
	workflow.GetLogger(ctx).Info("step's approval was withdrawn by a cancel that came after a worker made it: made again from the store",
		"step", s.Step, "tool", s.Tool, "key", s.Key, "approver", d.Approver)
	return true, nil
}
