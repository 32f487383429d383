package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/planner"
)

// loop plans turn after turn until the planner is done, a limit is
// reached, the run is cancelled or its history calls for Continue-As-New.
// A paused run waits before each turn.
func (r *run) loop(ctx workflow.Context) error {
	lim := r.in.Limits
	for {
		if stop, err := r.stopping(ctx, true); err != nil || stop {
			return err
		}
		if len(r.status.Steps) >= lim.MaxSteps {
			r.status.Message = fmt.Sprintf("stopped at the limit of %d steps", lim.MaxSteps) + r.unread()
			return nil
		}
		// A MaxSteps near the int range overflows 2*MaxSteps and ends the
		// run at once; RunInput.Validate bounds it where runs start. The
		// expression stays as it was, so that runs of earlier releases
		// replay the same.
		if r.proposed >= 2*lim.MaxSteps {
			r.status.Message = fmt.Sprintf("stopped after %d proposed calls, %d of them invalid", r.proposed, r.proposed-len(r.status.Steps)) + r.unread()
			return nil
		}
		if err := r.gateTurn(ctx); err != nil {
			return err
		}
		if stop, err := r.stopping(ctx, true); err != nil || stop {
			return err
		}
		if r.historyFull(ctx) {
			return r.continueAsNew(ctx)
		}
		r.turns++
		r.deliverMessages(r.turns)
		var plan activities.PlanOutput
		in := r.planInput()
		in.Turn = r.turns
		r.turnStarted(ctx)
		if r.in.Planner == planner.NameScript {
			// A script's turn of a run that tells its story is a local
			// activity (see plan): it carries the facts.
			in.Facts = r.takeStory(ctx)
		} else {
			r.flushStory(ctx)
		}
		err := r.plan(ctx, in).Get(ctx, &plan)
		r.wrote(in.Facts, err)
		r.task.ranPlan(r, plan)
		r.turnEnded(ctx, plan, err)
		if err != nil {
			return &runFailure{msg: fmt.Sprintf("plan turn %d", r.proposed+1), err: err}
		}
		if in.Compact {
			for i := range min(len(plan.Calls), len(in.Plan)) {
				plan.Calls[i] = plan.Calls[i].Expand(in.Plan[i])
			}
		}
		if stop, err := r.stopping(ctx, false); err != nil || stop {
			// Cancelled while the planner thought: its calls are not made
			// (but for those a worker made and died before recording).
			return err
		}
		if plan.Done || len(plan.Calls) == 0 {
			if r.undelivered() > 0 {
				// A message came while the planner thought: it must not end
				// the run unread.
				continue
			}
			r.status.Message = r.scriptEnd(plan.Message)
			return nil
		}
		if plan.Parallel && r.in.Planner != planner.NameScript && len(plan.Calls) > 1 &&
			workflow.GetVersion(ctx, parallelTurns, workflow.DefaultVersion, 1) == 1 {
			if err := r.takeTurn(ctx, plan.Calls); err != nil {
				return err
			}
			continue
		}
		for i, call := range plan.Calls {
			if len(r.status.Steps) >= lim.MaxSteps {
				break
			}
			if stop, err := r.stopping(ctx, false); err != nil {
				return err
			} else if stop {
				break
			}
			// A script's batch (see scriptBatch) may continue as new
			// between its calls: the next generation plans from the next
			// call, as the next turn would. A model's batch is its turn's
			// and is made whole.
			if i > 0 && r.in.Planner == planner.NameScript && r.historyFull(ctx) {
				return r.continueAsNew(ctx)
			}
			r.proposed++
			goOn, err := r.take(ctx, call, i)
			if err != nil {
				return err
			}
			if !goOn && !(r.identity && r.cancelled()) {
				// The planner proposed the rest of its batch expecting this
				// call to succeed: let it plan again, knowing the outcome.
				// A cancelled run goes on through the batch while a later
				// call was made by a worker that died (see stopping).
				break
			}
		}
	}
}

// parallelTurns is the change ID under which the calls a model proposes
// in one turn, independent by its contract, all become steps at once and
// run concurrently (see takeTurn).
const parallelTurns = "parallel-turns"

// take makes one proposed call of a sequential turn: refuse it, or number
// it and run it. It reports whether the call was done, so that the rest of
// the planner's batch may follow.
func (r *run) take(ctx workflow.Context, call activities.PlannedCall, i int) (bool, error) {
	if call.Invalid != "" && !call.Made {
		r.remember(r.invalid(ctx, call, i))
		return false, nil
	}
	s, err := r.number(ctx, call, i)
	if err != nil {
		return false, err
	}
	o, done, err := r.step(ctx, s, call, nil)
	if err != nil {
		return false, err
	}
	r.remember(o)
	return done, nil
}

// takeTurn makes the calls of one parallel turn: each valid call becomes
// the next numbered step at once, in the order proposed, and each runs in
// its own coroutine, asking its approval beside the others and running
// once it may, at most Limits.Parallel at a time. A call that is refused,
// rejected, expired or fails does not stop the others. The turn ends when
// every step has ended; the planner then learns of every call, in the
// order proposed, whatever order they finished in.
func (r *run) takeTurn(ctx workflow.Context, calls []activities.PlannedCall) error {
	obs := make([]*planner.Observation, len(calls))
	type job struct {
		i    int
		step int64
		call activities.PlannedCall
	}
	var jobs []job
	for i, call := range calls {
		if len(r.status.Steps) >= r.in.Limits.MaxSteps {
			break
		}
		r.proposed++
		if call.Invalid != "" && !call.Made {
			o := r.invalid(ctx, call, i)
			obs[i] = &o
			continue
		}
		s, err := r.number(ctx, call, i)
		if err != nil {
			return err
		}
		jobs = append(jobs, job{i: i, step: s.Step, call: call})
	}
	slots := &turnSlots{limit: r.in.Limits.Parallel}
	left := len(jobs)
	var runErr error
	for _, j := range jobs {
		workflow.Go(ctx, func(ctx workflow.Context) {
			// No step is added during the turn, so the pointer holds.
			o, _, err := r.step(ctx, &r.status.Steps[j.step-1], j.call, slots)
			obs[j.i] = &o
			if err != nil && runErr == nil {
				runErr = err
				// The run fails: the turn's other steps start no more,
				// their approvals are withdrawn, and those running end on
				// their own terms before it does.
				r.ctl.halt = "the run is failing: " + failureMessage(err)
				r.stopSteps(ctx)
				r.touch(ctx)
			}
			left--
		})
	}
	if err := workflow.Await(ctx, func() bool { return left == 0 }); err != nil {
		return err
	}
	if runErr != nil {
		return runErr
	}
	for _, o := range obs {
		if o != nil {
			r.remember(*o)
		}
	}
	return nil
}

// invalid is what the planner learns of call, the i-th of its turn, which
// this worker's registry refused: under step identity the call is the
// run's next step, refused (see refuse); a run begun before it gives the
// call no step.
func (r *run) invalid(ctx workflow.Context, call activities.PlannedCall, i int) planner.Observation {
	if r.identity {
		return r.refuse(ctx, call, i)
	}
	workflow.GetLogger(ctx).Warn("planner proposed an invalid call", "tool", call.Proposed.Tool, "error", call.Invalid)
	return planner.Observation{Call: call.Proposed, Turn: r.turns, Outcome: planner.OutcomeInvalid, Error: call.Invalid}
}

// number makes call, the i-th of its turn, the run's next step.
func (r *run) number(ctx workflow.Context, call activities.PlannedCall, i int) (*Step, error) {
	n := int64(len(r.status.Steps)) + 1
	key, err := keys.New(r.in.Tenant, r.in.RunID, n, call.Proposed.Tool)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "InvalidKey", err)
	}
	r.status.Steps = append(r.status.Steps, Step{
		Step: n, Turn: r.turns, CallID: r.callID(call, i), Tool: call.Proposed.Tool, Class: call.Class, Key: key.String(),
		Args: call.Args, ArgsHash: call.ArgsHash, State: StepRunning, PlannedAt: workflow.Now(ctx), Guarantee: call.Guarantee,
		made: call.Made,
	})
	return &r.status.Steps[n-1], nil
}

// callID is the id a step of call, the i-th of its turn, keeps: the
// planner's, when it may be sent back (see validCallID), else for a
// model's call one of the run's own.
func (r *run) callID(call activities.PlannedCall, i int) string {
	id := call.Proposed.ID
	if !validCallID(id) {
		id = ""
		if r.in.Planner != planner.NameScript {
			id = fmt.Sprintf("call_%d_%d", r.turns, i+1)
		}
	}
	return id
}

// validCallID reports whether a planner's call id may be kept and sent
// back: 1 to 64 letters, digits, '_' or '-'.
func validCallID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// turnSlots counts the steps of a parallel turn that run at once.
type turnSlots struct {
	limit, used int
}

// slot is a step's place among the steps of its turn that run at once; a
// sequential turn's steps have none to wait for.
type slot struct {
	turn *turnSlots
	held bool
}

// acquire waits for a place among the turn's running steps; it returns
// without one once the run halts (see halted).
func (sl *slot) acquire(ctx workflow.Context, r *run) error {
	if sl.turn == nil || sl.held {
		return nil
	}
	t := sl.turn
	if err := workflow.Await(ctx, func() bool { return r.halted() || t.used < t.limit }); err != nil {
		return err
	}
	if !r.halted() {
		t.used++
		sl.held = true
	}
	return nil
}

func (sl *slot) release() {
	if sl.held {
		sl.turn.used--
		sl.held = false
	}
}

// start waits until step s may run: the run is not paused and the step
// holds a slot of its turn. It reports false, having cancelled the step,
// when the run was cancelled meanwhile.
func (r *run) start(ctx workflow.Context, s *Step, sl *slot, why string) (planner.Observation, bool, error) {
	// A step a worker made and died before recording is made again, from
	// the store, whatever the run's cancel or pause says.
	if anyway, err := r.makesAnyway(ctx, s); err != nil || anyway {
		return planner.Observation{}, err == nil, err
	}
	if err := r.gate(ctx); err != nil {
		return planner.Observation{}, false, err
	}
	if err := sl.acquire(ctx, r); err != nil {
		return planner.Observation{}, false, err
	}
	// A pause may have come while the step waited for its slot.
	if err := r.gate(ctx); err != nil {
		return planner.Observation{}, false, err
	}
	if r.halted() {
		// The cancel came while the step waited.
		if anyway, err := r.makesAnyway(ctx, s); err != nil || anyway {
			return planner.Observation{}, err == nil, err
		}
		sl.release()
		return r.cancelStep(ctx, s, why), false, nil
	}
	return planner.Observation{}, true, nil
}

// step runs numbered step s: a duplicate of an applied intent is not run;
// a step that needs approval waits for it; then the step runs under its
// key, and an unknown outcome waits for a person. It returns what the
// planner learns, and whether the step was done. slots, for a step of a
// parallel turn, bound how many of the turn's steps run at once.
func (r *run) step(ctx workflow.Context, s *Step, call activities.PlannedCall, slots *turnSlots) (planner.Observation, bool, error) {
	log := workflow.GetLogger(ctx)
	parallel := slots != nil
	sl := &slot{turn: slots}
	defer sl.release()
	if err := r.awaitSameIntent(ctx, s, call, parallel); err != nil {
		return planner.Observation{}, false, err
	}
	if r.halted() {
		if anyway, err := r.makesAnyway(ctx, s); err != nil {
			return planner.Observation{}, false, err
		} else if !anyway {
			return r.cancelStep(ctx, s, "not started"), false, nil
		}
	}
	if o, dup, err := r.duplicateUnlessMade(ctx, s, call); err != nil || dup {
		return o, dup, err
	}
	if call.NeedsApproval && !call.Made {
		if err := r.awaitApproval(ctx, s, call.ApprovalReason); err != nil {
			return planner.Observation{}, false, err
		}
		if s.State == StepCancelled && s.Approval.Decision != "" {
			// Approved, then cancelled before it started: unless a worker
			// made it and died before recording. The decision and its
			// record in the approvals table are in the history before a
			// worker can make the step, so only the cancel came first
			// here.
			if made, err := r.madeStep(ctx, s); err != nil {
				return planner.Observation{}, false, err
			} else if made {
				s.State, s.Error, s.FinishedAt = StepApproved, "", time.Time{}
			}
		}
		if s.State != StepApproved {
			return r.observation(s, notApproved(s.State)), false, nil
		}
		// An approver may have edited the call into one an earlier step
		// applied.
		if s.Edit != nil && !parallel {
			if o, dup, err := r.duplicateUnlessMade(ctx, s, call); err != nil || dup {
				return o, dup, err
			}
		}
	}
	if o, ok, err := r.start(ctx, s, sl, "not started"); err != nil || !ok {
		return o, false, err
	}
	if parallel && call.OncePerRun {
		// An edit, or a sibling that needed no approval, may have made
		// another step of the turn the same intent: the first to start
		// makes it, and the others then learn it was made.
		if err := r.awaitIntentFree(ctx, s); err != nil {
			return planner.Observation{}, false, err
		}
		if o, dup, err := r.duplicateUnlessMade(ctx, s, call); err != nil || dup {
			return o, dup, err
		}
	}
	s.State = StepRunning
	s.StartedAt = workflow.Now(ctx)
	r.touch(ctx)
	out, err := r.execute(ctx, s, call, 0)
	if o, ended, runErr := r.parkedAtLimit(ctx, s, sl, call, parallel, &out, &err); ended || runErr != nil {
		return o, o.Outcome == planner.OutcomeDuplicate, runErr
	}
	for err != nil {
		nr, ok := r.unknownOutcome(ctx, s, call, err)
		if !ok {
			break
		}
		// A step that waits for a person gives its slot to the turn's
		// other steps.
		sl.release()
		res, applied, stepErr, runErr := r.awaitResolution(ctx, s, nr)
		if runErr != nil {
			return planner.Observation{}, false, runErr
		}
		if stepErr != nil {
			err = stepErr
			break
		}
		if applied {
			out, err = activities.ToolOutput{Key: s.Key, Result: res.Result, Replayed: res.Replayed}, nil
			break
		}
		// Nothing happened, a person says: run the step again, under its
		// key, unless the run was cancelled meanwhile.
		why := fmt.Sprintf("its effect did not happen, as %s answered, and it was not sent again", s.Resolution.Resolver)
		if o, ok, err := r.start(ctx, s, sl, why); err != nil || !ok {
			return o, false, err
		}
		s.State = StepRunning
		r.touch(ctx)
		out, err = r.execute(ctx, s, call, s.Resolution.Round)
		// The limits may have been reached while a person looked.
		if o, ended, runErr := r.parkedAtLimit(ctx, s, sl, call, parallel, &out, &err); ended || runErr != nil {
			return o, o.Outcome == planner.OutcomeDuplicate, runErr
		}
	}
	s.FinishedAt = workflow.Now(ctx)
	if err != nil {
		s.State = StepFailed
		s.Error = failure(err)
		log.Warn("step failed", "step", s.Step, "tool", s.Tool, "key", s.Key, "error", err)
		r.touch(ctx)
		return r.observation(s, planner.OutcomeFailed), false, nil
	}
	s.State, s.Result, s.Replayed = StepDone, out.Result, out.Replayed
	if !r.bundled {
		s.Summary = summarize(string(out.Result))
	}
	s.delivering = len(out.FollowUps) > 0
	r.deliverFollowUps(ctx, s, out.FollowUps)
	s.delivering = false
	r.touch(ctx)
	return r.observation(s, planner.OutcomeDone), true, nil
}

// parkedAtLimit handles what a step's attempt may answer short of a
// result: parked (it would cross a money limit, nothing ran, and it waits
// for an approver, holding no slot; approved, as an exception, or edited,
// it runs again, as often as it parks), or asked (its server needs a
// person's answer before it completes the call, which completed nothing;
// answered, the call runs again with the answers). It updates *out and
// *err with the last attempt's answer; ended reports that the step ended
// without running (rejected, expired, cancelled, unanswered, or edited
// into an intent an earlier step applied), with o its observation.
func (r *run) parkedAtLimit(ctx workflow.Context, s *Step, sl *slot, call activities.PlannedCall, parallel bool,
	out *activities.ToolOutput, err *error) (o planner.Observation, ended bool, runErr error) {
	for *err == nil && (out.Parked != nil || out.Question != nil || out.Duplicate != nil) {
		if d := out.Duplicate; d != nil {
			return r.treeDuplicate(ctx, s, d), true, nil
		}
		sl.release()
		if q := out.Question; q != nil {
			reply, ok, werr := r.awaitAnswer(ctx, s, q)
			if werr != nil || !ok {
				return r.observation(s, unanswered(s)), true, werr
			}
			s.reply, s.sendReply = &reply, true
		} else {
			o, ok, werr := r.awaitLimit(ctx, s, out.Parked)
			if werr != nil || !ok {
				return o, true, werr
			}
			// An approver may have edited the call into one an earlier
			// step applied.
			if s.Edit != nil && !parallel {
				if o, dup, err := r.duplicateUnlessMade(ctx, s, call); err != nil || dup {
					return o, dup, err
				}
			}
		}
		if o, ok, serr := r.start(ctx, s, sl, "not started"); serr != nil || !ok {
			return o, true, serr
		}
		s.State = StepRunning
		r.touch(ctx)
		*out, *err = r.execute(ctx, s, call, 0)
	}
	return planner.Observation{}, false, nil
}

// awaitSameIntent waits, in a parallel turn, until no earlier step of the
// turn with the same intent (a tool that makes each intent once per run,
// the same canonical arguments) is still undecided or running: the step
// then learns whether that one applied it (see duplicate), as it would
// have in a turn made one call after another. Two identical calls of one
// turn make one effect.
func (r *run) awaitSameIntent(ctx workflow.Context, s *Step, call activities.PlannedCall, parallel bool) error {
	if !parallel || !call.OncePerRun {
		return nil
	}
	return workflow.Await(ctx, func() bool {
		if r.cancelled() {
			return true
		}
		for i := range s.Step - 1 {
			e := &r.status.Steps[i]
			if e.Turn != s.Turn || e.Tool != s.Tool ||
				(e.ArgsHash != s.ArgsHash && (e.Edit == nil || e.Edit.OriginalArgsHash != s.ArgsHash)) {
				continue
			}
			switch e.State {
			case StepPendingApproval, StepApproved, StepRunning, StepNeedsResolution, StepWaitingForInput:
				return false
			}
		}
		return true
	})
}

// awaitIntentFree waits, in a parallel turn, until no other step of the
// turn with step s's intent (its tool, and its arguments as they will run,
// or as proposed before an edit) is running.
func (r *run) awaitIntentFree(ctx workflow.Context, s *Step) error {
	same := func(e *Step) bool {
		return e.ArgsHash == s.ArgsHash || (e.Edit != nil && e.Edit.OriginalArgsHash == s.ArgsHash) ||
			(s.Edit != nil && e.ArgsHash == s.Edit.OriginalArgsHash)
	}
	return workflow.Await(ctx, func() bool {
		for i := range r.status.Steps {
			e := &r.status.Steps[i]
			if e == s || e.Turn != s.Turn || e.Tool != s.Tool || e.StartedAt.IsZero() || !same(e) {
				continue
			}
			if e.State == StepRunning || e.State == StepNeedsResolution || e.State == StepWaitingForInput {
				return false
			}
		}
		return true
	})
}

// duplicateUnlessMade is duplicate in a run under step identity: a step
// that would repeat an applied intent is not a duplicate when the store
// holds its own key made (see made), for its effect exists.
func (r *run) duplicateUnlessMade(ctx workflow.Context, s *Step, call activities.PlannedCall) (planner.Observation, bool, error) {
	if !r.identity {
		o, dup := r.duplicate(ctx, s, call)
		return o, dup, nil
	}
	if s.made || !call.OncePerRun || (r.appliedIntent(s.Tool, s.ArgsHash) == nil && r.treeIntent(s.Tool, s.ArgsHash) == nil) {
		return planner.Observation{}, false, nil
	}
	if made, err := r.madeStep(ctx, s); err != nil || made {
		return planner.Observation{}, false, err
	}
	o, dup := r.duplicate(ctx, s, call)
	return o, dup, nil
}

// duplicate records step s as a duplicate, and returns what the planner
// learns, when its tool makes each intent once per run and an earlier
// step of the run applied the same tool with the same arguments.
func (r *run) duplicate(ctx workflow.Context, s *Step, call activities.PlannedCall) (planner.Observation, bool) {
	if !call.OncePerRun || r.version(ctx, intentOncePerRun) != 1 {
		return planner.Observation{}, false
	}
	done := r.appliedIntent(s.Tool, s.ArgsHash)
	if done == nil {
		// Another run of the tree (a child, or an ancestor) may have
		// made it.
		in := r.treeIntent(s.Tool, s.ArgsHash)
		if in == nil {
			return planner.Observation{}, false
		}
		s.State, s.DuplicateOf, s.DuplicateRun, s.Result = StepDuplicate, in.Step, in.RunID, in.Result
		s.FinishedAt = workflow.Now(ctx)
		workflow.GetLogger(ctx).Info("call repeats a step another run of the tree applied; not executed again", "step", s.Step,
			"tool", s.Tool, "duplicate_of_run", in.RunID, "duplicate_of", in.Step, "args_hash", s.ArgsHash)
		r.touch(ctx)
		return r.observation(s, planner.OutcomeDuplicate), true
	}
	s.State, s.DuplicateOf, s.Result, s.Summary = StepDuplicate, done.Step, done.Result, done.Summary
	s.FinishedAt = workflow.Now(ctx)
	workflow.GetLogger(ctx).Info("call repeats an applied step; not executed again", "step", s.Step, "tool", s.Tool,
		"duplicate_of", done.Step, "args_hash", s.ArgsHash)
	r.touch(ctx)
	return r.observation(s, planner.OutcomeDuplicate), true
}

// observation is what the planner learns of a finished step. The call is
// the one the planner proposed; an edited step also says who changed it
// and what ran, so that the planner's history never differs from the
// effect.
func (r *run) observation(s *Step, outcome planner.Outcome) planner.Observation {
	o := planner.Observation{
		Step: int(s.Step), Turn: s.Turn, Call: planner.Call{Tool: s.Tool, Args: s.Args, ID: s.CallID},
		Outcome: outcome, Result: s.Result, Error: s.Error, DuplicateOf: int(s.DuplicateOf),
	}
	if e := s.Edit; e != nil {
		o.Call.Args = e.OriginalArgs
		o.Edit = &planner.Edit{Args: e.Args, By: e.EditedBy, Comment: e.Comment}
	}
	return o
}
