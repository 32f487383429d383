package workflows

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/tools"
)

// a is the receiver for naming activities; it is never dereferenced.
var a *activities.Activities

// summaryLen bounds a step's result summary, in bytes.
const summaryLen = 160

// AgentRun is one agent run. Each turn it asks the planner for the next
// calls; each valid call becomes the next numbered step, waits for an
// approval when its tool's rule says so, and runs under the step's
// idempotency key: a database tool's as a local activity (see localStep),
// any other's as an activity whose ID is the key. The run ends when the
// planner is done or the step limit is reached, and continues as new,
// carrying its steps, when its history grows long.
func AgentRun(ctx workflow.Context, in RunInput) (Status, error) {
	in = in.WithDefaults()
	if err := in.runnable(); err != nil {
		return Status{}, temporal.NewNonRetryableApplicationError(err.Error(), "InvalidInput", err)
	}
	checkCarry(in.Carry)
	r := newRun(ctx, in)
	if c := in.Carry; c == nil || c.Bundled {
		v := workflow.GetVersion(ctx, bundledChanges, workflow.DefaultVersion, runEvents)
		// A later generation keeps the run's first answers on limits and
		// on step identity.
		r.bundled, r.limits = v >= 1, v >= spendLimits && (c == nil || c.Limits)
		r.identity = v >= stepIdentity && (c == nil || c.Identity)
		r.story.on = v >= runEvents && (c == nil || c.Events)
	}
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (Status, error) { return r.snapshot().withSummaries(), nil }); err != nil {
		return Status{}, fmt.Errorf("register status query: %w", err)
	}
	signals := workflow.GetSignalChannel(ctx, SignalApproval)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var sig Approval
			signals.Receive(ctx, &sig)
			r.onApproval(ctx, sig)
		}
	})
	// A child run takes the cancel, pause and resume its parent passes
	// down (see passDown).
	fromParent := workflow.GetSignalChannel(ctx, signalParentControl)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var pc parentControl
			fromParent.Receive(ctx, &pc)
			r.onParentControl(ctx, pc)
		}
	})
	resolves := workflow.GetSignalChannel(ctx, SignalResolve)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var sig Resolution
			resolves.Receive(ctx, &sig)
			r.onResolve(ctx, sig)
		}
	})
	answers := workflow.GetSignalChannel(ctx, SignalAnswer)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var sig Answer
			answers.Receive(ctx, &sig)
			r.onAnswer(ctx, sig)
		}
	})

	if err := r.registerControls(ctx); err != nil {
		return Status{}, err
	}
	r.startStory(ctx)

	err := r.loop(ctx)
	var can *workflow.ContinueAsNewError
	switch {
	case errors.As(err, &can):
		// A turn boundary has no pending step, so a signal still buffered
		// cannot apply; read it here so that it is logged, not dropped
		// silently with this generation.
		for {
			var sig Approval
			if !signals.ReceiveAsync(&sig) {
				break
			}
			r.onApproval(ctx, sig)
		}
		for {
			var sig Resolution
			if !resolves.ReceiveAsync(&sig) {
				break
			}
			r.onResolve(ctx, sig)
		}
		for {
			var sig Answer
			if !answers.ReceiveAsync(&sig) {
				break
			}
			r.onAnswer(ctx, sig)
		}
		// A control from the parent is not dropped with this generation:
		// a cancel ends the run here, a pause or resume goes with it.
		controlled := false
		for {
			var pc parentControl
			if !fromParent.ReceiveAsync(&pc) {
				break
			}
			r.onParentControl(ctx, pc)
			controlled = true
		}
		switch {
		case controlled && r.cancelled():
			r.status.State, r.status.Message, r.ctl.ended = RunCancelled, r.cancelledBy(), true
			r.touch(ctx)
			r.flushStory(ctx)
			return r.snapshot(), nil
		case controlled:
			return Status{}, r.continueAsNew(ctx)
		}
		return Status{}, err
	case err != nil:
		r.status.State = RunFailed
		r.status.Error = failureMessage(err)
		r.ctl.ended = true
		workflow.GetLogger(ctx).Error("run failed", "error", err)
		r.touch(ctx)
		r.flushStory(ctx)
		return r.snapshot(), err
	}
	r.status.State = RunCompleted
	if r.cancelled() {
		r.status.State = RunCancelled
		r.status.Message = r.cancelledBy()
	}
	r.ctl.ended = true
	r.touch(ctx)
	r.flushStory(ctx)
	return r.snapshot(), nil
}

// run is one generation of a run's state.
type run struct {
	in       RunInput
	status   Status
	history  []planner.Observation
	proposed int
	// bundled is set in a run that began with every change below recorded
	// at once (see version); its database steps run as local activities.
	bundled bool
	// limits is set in a run that began under version spendLimits of
	// bundledChanges: its steps wait for approval at a money limit (see
	// awaitLimit). Others have their amounts counted, never parked.
	limits bool
	// identity is set in a run that began under version stepIdentity of
	// bundledChanges: a step's identity does not depend on the worker that
	// replays it (see stepIdentity). madeRead is what the current workflow
	// task read of the store about the run's steps (see made).
	identity bool
	madeRead madeSteps
	// task counts the local activities of the current workflow task.
	task taskLoad
	// turns counts the planning turns, carried across Continue-As-New.
	turns int
	ctl   controls
	// early are the answers that came while their step's round of
	// questions was being recorded, by step (see awaitAnswer).
	early map[int64][]Answer
	// story is what the run told of itself in its event log.
	story story
}

// bundledChanges is the change ID that stands for every change ID of this
// package before it, recorded once when a run (and each generation of it)
// begins: one marker and one search-attribute upsert instead of one of
// each per change. A run that began under it also runs its database steps
// as local activities (see localStep), takes its script in batches (see
// scriptBatch) and keeps no result summaries (see withSummaries). A run
// that began before it replays each change as it recorded it, and finishes
// as it started, in every generation (Carry.Bundled): its database steps
// stay activities.
const bundledChanges = "bundled-changes-1"

// spendLimits is the version of bundledChanges under which a run's steps
// carry its budget to their charge and wait for approval at a money limit
// (see awaitLimit); version 1 is every change before.
const spendLimits workflow.Version = 2

// version returns the version of changeID for this run: 1 in a run that
// began under bundledChanges, else what workflow.GetVersion records or
// replays for it. Every change before bundledChanges has versions 0 and 1
// only; a later change calls workflow.GetVersion itself.
func (r *run) version(ctx workflow.Context, changeID string) workflow.Version {
	if r.bundled {
		return 1
	}
	return workflow.GetVersion(ctx, changeID, workflow.DefaultVersion, 1)
}

func newRun(ctx workflow.Context, in RunInput) *run {
	now := workflow.Now(ctx)
	r := &run{in: in, status: Status{
		Tenant: in.Tenant, RunID: in.RunID, Goal: in.Goal, Parent: in.Parent, Planner: in.Planner,
		State: RunRunning, StartedAt: now, UpdatedAt: now, Budget: in.Limits.Spend,
	}}
	if c := in.Carry; c != nil {
		r.status.Steps = c.Steps
		r.status.Generation = c.Generation
		r.status.StartedAt = c.StartedAt
		r.history = c.History
		r.proposed = c.Proposed
		r.turns = c.Turns
		r.status.Paused = c.Paused
		r.status.Messages = c.Messages
		r.settle()
	}
	return r
}

// intentOncePerRun is the change ID under which a run refuses to execute
// a call that repeats an applied step (see appliedIntent).
const intentOncePerRun = "intent-once-per-run"

// appliedIntent returns the earlier step of the run that applied tool with
// the arguments whose hash is argsHash, or nil. An edited step counts under
// both its proposed and its executed arguments: a planner that proposes
// again what a person edited down must not get the original amount. The
// steps are the whole run's, carried across Continue-As-New, so the check
// needs no database.
func (r *run) appliedIntent(tool, argsHash string) *Step {
	for i := range r.status.Steps {
		s := &r.status.Steps[i]
		if s.Tool != tool || s.State != StepDone {
			continue
		}
		if s.ArgsHash == argsHash || (s.Edit != nil && s.Edit.OriginalArgsHash == argsHash) {
			return s
		}
	}
	return nil
}

// execute runs step s's tool: a database tool's as a local activity, in
// the workflow task (see localStep); any other's as an activity whose ID is
// the step's key (with the round after a person answered not_applied, for
// a new activity).
func (r *run) execute(ctx workflow.Context, s *Step, call activities.PlannedCall, round int) (_ activities.ToolOutput, err error) {
	in := activities.ToolInput{Tenant: r.in.Tenant, RunID: r.in.RunID, Step: s.Step, Tool: s.Tool, Args: s.Args, ArgsHash: s.ArgsHash,
		Reply: s.reply}
	if r.limits {
		in.Spend = &activities.SpendInput{Budget: r.in.Limits.Spend, OtherCurrencies: r.in.Limits.OtherCurrencies,
			Exception: s.Limit != nil && s.Limit.Exception}
		if p := r.in.Parent; p != nil {
			in.Spend.BudgetRun = p.BudgetRun
		}
	}
	if call.Delegate != nil {
		return r.delegate(ctx, s, call)
	}
	in.Tree = r.treeOf(s, call)
	if r.localStep(call) {
		// Facts an attempt may not have written are written again: a
		// fact written twice is one event.
		in.Facts = r.takeStory(ctx)
		defer func() { r.wrote(in.Facts, err) }()
		return r.executeLocal(ctx, call, in)
	}
	r.flushStory(ctx)
	opts := toolOptions
	opts.ActivityID = s.Key
	switch {
	case round > 0:
		opts.ActivityID = fmt.Sprintf("%s#%d", s.Key, round+1)
	case s.sendReply:
		// The attempt that sends a round's answers is an activity of its
		// own.
		opts.ActivityID = fmt.Sprintf("%s#input%d", s.Key, len(s.Questions))
	case s.Limit != nil && s.Approval != nil:
		// A step that waited at a limit runs again in a new activity.
		opts.ActivityID = fmt.Sprintf("%s#limit%d", s.Key, s.Approval.Round)
	}
	s.sendReply = false
	opts.StartToCloseTimeout = call.Timeout
	if limit := retriesPerAttempt * call.Timeout; limit > opts.ScheduleToCloseTimeout {
		// An attempt that may last long (an MCP task followed, a person's
		// answer to a live question) keeps room for retries after it.
		opts.ScheduleToCloseTimeout = limit
	}
	var out activities.ToolOutput
	err = workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), a.RunTool, in).Get(ctx, &out)
	return out, err
}

// plan asks the planner for this turn's calls. A script's turn only reads
// the run's own plan and checks the call against the worker's registry: it
// runs as a local activity, in the workflow task, with no round trip
// through the server (runs started before this change keep the activity
// they began with). A model's turn is a regular activity: it is slow, it
// heartbeats, and any worker may take it.
func (r *run) plan(ctx workflow.Context, in activities.PlanInput) workflow.Future {
	if r.in.Planner == planner.NameScript &&
		r.version(ctx, localScriptPlanning) == 1 {
		return workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, localPlanOptions), a.Plan, in)
	}
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, planOptions), a.Plan, in)
}

// localScriptPlanning is the change ID under which a script's turns run as
// local activities.
const localScriptPlanning = "local-script-planning"

// planInput is what the planner is told this turn. A scripted run's planner
// needs only the plan's next calls (see scriptBatch): it gets them alone,
// the first at position 0 (the position an earlier release's script
// planner reads), and no history.
// Sending the whole plan and history every turn made a run's history grow
// with the square of its length.
func (r *run) planInput() activities.PlanInput {
	in := activities.PlanInput{Tenant: r.in.Tenant, RunID: r.in.RunID, Planner: r.in.Planner}
	if r.identity {
		in.FirstStep = int64(len(r.status.Steps)) + 1
	}
	if p := r.in.Parent; p != nil {
		// A child run may use only its grant, empty or not.
		in.Depth, in.Granted, in.Grant, in.Model = p.Depth, true, r.in.Grant, r.in.Model
	}
	if r.in.Planner == planner.NameScript {
		next := min(r.proposed, len(r.in.Plan))
		in.Plan = r.in.Plan[next:min(next+r.scriptBatch(next), len(r.in.Plan))]
		in.PlanOffset = next
		// A run that began under bundledChanges takes its turn's answer
		// without the calls it sent.
		in.Compact = r.bundled
		return in
	}
	in.Goal, in.Proposed, in.History = r.in.Goal, r.proposed, r.history
	return in
}

// scriptBatch is how many calls of a scripted run's plan, from position
// next on, one planning turn takes. A run that began under bundledChanges
// takes up to maxScriptBatch calls, of at most maxScriptBatchBytes of
// arguments together (one at least): the script proposes them all, each
// checked, and the run makes them in order, planning again after the
// first call that is not done, from the call after it, as it would have
// one call a turn. A run that began before takes one call a turn.
func (r *run) scriptBatch(next int) int {
	if !r.bundled {
		return 1
	}
	n, bytes := 0, 0
	for _, c := range r.in.Plan[next:] {
		bytes += len(c.Args)
		if n == maxScriptBatch || (n > 0 && bytes > maxScriptBatchBytes) {
			break
		}
		n++
	}
	return n
}

// Bounds of one scripted planning turn's calls (see scriptBatch).
const (
	maxScriptBatch      = 32
	maxScriptBatchBytes = 64 << 10
)

// remember keeps an observation for the planner's next turns. A script
// never reads them, so a scripted run keeps none: they would only grow what
// Continue-As-New carries.
func (r *run) remember(o planner.Observation) {
	if r.in.Planner != planner.NameScript {
		r.history = append(r.history, o)
	}
}

// historyFull reports whether the run should continue as new: its history
// has reached the run's limit, or Temporal suggests it.
func (r *run) historyFull(ctx workflow.Context) bool {
	return r.historyLength(ctx) >= r.in.Limits.HistoryLimit || workflow.GetInfo(ctx).GetContinueAsNewSuggested()
}

func (r *run) continueAsNew(ctx workflow.Context) error {
	r.flushStory(ctx)
	next := r.in
	next.Carry = &Carry{
		Steps:      r.status.Steps,
		History:    r.history,
		Proposed:   r.proposed,
		Generation: r.status.Generation + 1,
		StartedAt:  r.status.StartedAt,
		Bundled:    r.bundled,
		Limits:     r.limits,
		Identity:   r.identity,
		Events:     r.story.on,
		Format:     carryFormat,
		Turns:      r.turns,
		Paused:     r.status.Paused,
		Messages:   r.status.Messages,
	}
	workflow.GetLogger(ctx).Info("continuing as new", "steps", len(r.status.Steps), "generation", next.Carry.Generation)
	return workflow.NewContinueAsNewError(ctx, AgentRun, next)
}

// touch records that the run's state changed, and settles it (see
// settle).
func (r *run) touch(ctx workflow.Context) {
	r.settle()
	r.status.UpdatedAt = workflow.Now(ctx)
	r.observe(ctx)
}

// withSummaries fills in the summary of each step that has a result and no
// summary: the status query answers with them, while a run that began
// under bundledChanges keeps none in its state, what it carries across
// Continue-As-New or its result, since each is its result's first bytes.
func (s Status) withSummaries() Status {
	for i := range s.Steps {
		if st := &s.Steps[i]; st.Summary == "" && len(st.Result) > 0 {
			st.Summary = summarize(string(st.Result))
		}
	}
	return s
}

// snapshot copies the status so a query cannot race the run's own writes.
func (r *run) snapshot() Status {
	s := r.status
	s.Steps = append([]Step(nil), r.status.Steps...)
	for i := range s.Steps {
		if ap := s.Steps[i].Approval; ap != nil {
			cp := *ap
			cp.Warned = append([]string(nil), ap.Warned...)
			s.Steps[i].Approval = &cp
		}
		if res := s.Steps[i].Resolution; res != nil {
			cp := *res
			s.Steps[i].Resolution = &cp
		}
		if e := s.Steps[i].Edit; e != nil {
			cp := *e
			s.Steps[i].Edit = &cp
		}
		s.Steps[i].FollowUps = append([]FollowUp(nil), s.Steps[i].FollowUps...)
	}
	s.Messages = append([]AcceptedMessage(nil), r.status.Messages...)
	s.Receipt = s.receipt()
	return s
}

// summarize cuts s to summaryLen bytes on a rune boundary.
func summarize(s string) string {
	if len(s) <= summaryLen {
		return s
	}
	cut := summaryLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

var planOptions = workflow.ActivityOptions{
	StartToCloseTimeout:    2 * time.Minute,
	HeartbeatTimeout:       heartbeatTimeout,
	ScheduleToCloseTimeout: 30 * time.Minute,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:        time.Second,
		BackoffCoefficient:     2,
		MaximumInterval:        time.Minute,
		NonRetryableErrorTypes: []string{activities.ErrTypeUnknownPlanner, activities.ErrTypePlanner},
	},
}

// localPlanOptions retry a script's turn, a local activity, as planOptions
// retry a model's: reading the plan and checking a call takes
// milliseconds, so an attempt that takes seconds has met a worker in
// trouble.
var localPlanOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout:    10 * time.Second,
	ScheduleToCloseTimeout: planOptions.ScheduleToCloseTimeout,
	RetryPolicy:            planOptions.RetryPolicy,
}

// heartbeatTimeout is the heartbeat timeout of steps, planning turns and
// deliveries, which heartbeat every activities.HeartbeatEvery while they
// run: the attempt of a worker that died is retried after this and the
// first retry interval (1 s), not after its whole StartToClose timeout, so
// within 10 s. The SDK sends a running attempt's heartbeats to the server
// at most every 80% of this (6.4 s), which leaves 1.6 s for them to arrive.
const heartbeatTimeout = 8 * time.Second

// toolOptions retries a step with backoff for at most the retry horizon the
// tools' retention windows were validated against.
var toolOptions = workflow.ActivityOptions{
	ScheduleToCloseTimeout: tools.DefaultRetryHorizon,
	HeartbeatTimeout:       heartbeatTimeout,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaximumInterval:    time.Minute,
		NonRetryableErrorTypes: []string{
			activities.ErrTypeKeyReuse, activities.ErrTypeInvalidArgs,
			activities.ErrTypeUnknownTool, activities.ErrTypeOutcomeUnknown, activities.ErrTypeUnstorable,
		},
	},
}

// retriesPerAttempt is how many of its attempts a step's retries may last
// at the least: a step whose attempt may last longer than a third of the
// retry horizon has that horizon stretched.
const retriesPerAttempt = 3

// bookkeepingHorizon bounds the retries of the approvals table's writes:
// longer than a database outage a run should ride out, short enough that a
// failure nobody foresaw ends in a failed run that says why, rather than a
// step that reads as pending, is listed nowhere and waits for ever.
const bookkeepingHorizon = 24 * time.Hour

// bookkeepingOptions retry the approvals table's writes for at most
// bookkeepingHorizon, and not at all when PostgreSQL refuses the data.
var bookkeepingOptions = workflow.ActivityOptions{
	StartToCloseTimeout:    30 * time.Second,
	ScheduleToCloseTimeout: bookkeepingHorizon,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:        time.Second,
		BackoffCoefficient:     2,
		MaximumInterval:        time.Minute,
		NonRetryableErrorTypes: []string{activities.ErrTypeUnstorable},
	},
}
