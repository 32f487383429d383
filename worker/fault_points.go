package worker

import (
	"context"
	"net"
	"net/http/httptrace"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/agents"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// Where each point is placed:
//
//   - after-lease, during-effect and after-apply wrap the tool's Run in the
//     worker's registry: the store calls Run once the lease is committed
//     (external) or inside the key's transaction (natural, keyed).
//   - before-claim and after-commit are a worker interceptor around the
//     RunTool activity; after-commit reads ToolOutput.Replayed, the
//     activity's own account of whether this attempt recorded the outcome.
//   - workflow-task, approval-wait, child-start and child-started are a
//     workflow interceptor.
//
// A fault never fires where a step is being retried after an earlier
// death, so that a retry that lands on another worker with the same fault
// goes through: the activity points fire on a step's first attempt only
// (after-commit on any attempt that recorded the outcome itself, which at
// most one does), and the workflow points only in a run whose first
// workflow task this worker ran, never in one it took over by replaying
// its history.
//
// A database tool's step is a local activity, which runs in its run's
// workflow task: a worker that dies in it loses the task, and the worker
// that takes the run over runs the step again from its first attempt. The
// activity points of a local step therefore also fire only in a run whose
// first workflow task this worker ran (see heldRuns), and the
// workflow-task point fires when the run schedules the local step.

// withFaults wraps the tools that fs name at after-lease, during-effect or
// after-apply.
func (fs faults) withFaults(all []tools.Tool) []tools.Tool {
	out := slices.Clone(all)
	for i, t := range out {
		lease, during, apply := fs.at(settings.PointAfterLease, t.Name), fs.at(settings.PointDuringEffect, t.Name), fs.at(settings.PointAfterApply, t.Name)
		if lease == nil && during == nil && apply == nil {
			continue
		}
		run, external := t.Run, t.Class == tools.ClassExternal
		out[i].Run = func(ctx context.Context, call tools.Call) (any, error) {
			if !firstAttempt(ctx) {
				return run(ctx, call)
			}
			fields := keyFields(call)
			lease.fire(fields...)
			if during != nil && external {
				ctx = duringRequest(ctx, func() { during.fire(fields...) })
			}
			res, err := run(ctx, call)
			if err == nil {
				if !external {
					during.fire(fields...)
				}
				apply.fire(fields...)
			}
			return res, err
		}
	}
	return out
}

// duringRequest returns ctx with an HTTP client trace that calls fire once
// a request made with it has reached the server's host whole (its TCP
// segments acknowledged) and before its answer is read; where that cannot
// be observed, as soon as the request is written. A server that answers
// before the acknowledgement is seen (a fast one over loopback) meets the
// fault when the answer's first byte arrives, before the client reads it:
// the point is never missed.
func duringRequest(ctx context.Context, fire func()) context.Context {
	var (
		conn atomic.Pointer[net.Conn]
		once sync.Once
	)
	fireOnce := func() { once.Do(fire) }
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { conn.Store(&i.Conn) },
		WroteRequest: func(w httptrace.WroteRequestInfo) {
			c := conn.Load()
			if w.Err != nil || c == nil {
				return
			}
			// The transport flushes the request after this hook returns.
			if !whenDelivered(*c, fireOnce) {
				fireOnce()
			}
		},
		GotFirstResponseByte: fireOnce,
	})
}

// firstAttempt reports whether ctx is the first attempt of its activity
// (or no activity's): for a local activity, also in a run this worker has
// held since its start.
func firstAttempt(ctx context.Context) bool {
	if !activity.IsActivity(ctx) {
		return true
	}
	info := activity.GetInfo(ctx)
	if info.IsLocalActivity && !heldRuns.held(info.WorkflowExecution.RunID) {
		return false
	}
	return info.Attempt <= 1
}

// heldRuns are the runs whose first workflow task this worker ran, for the
// local steps' faults. A fault worker is a test's or a drill's, and its
// runs few: the set is not pruned.
var heldRuns runSet

type runSet struct{ m sync.Map }

func (s *runSet) add(runID string)       { s.m.Store(runID, true) }
func (s *runSet) held(runID string) bool { _, ok := s.m.Load(runID); return ok }

func keyFields(call tools.Call) []zap.Field {
	k := call.Key
	return []zap.Field{zap.String("tenant", k.Tenant), zap.String("run_id", k.RunID), zap.Int64("step", k.Step),
		zap.String("tool", k.Tool), zap.String("key", k.String())}
}

func inputFields(in activities.ToolInput) []zap.Field {
	return []zap.Field{zap.String("tenant", in.Tenant), zap.String("run_id", in.RunID), zap.Int64("step", in.Step),
		zap.String("tool", in.Tool)}
}

// faultInterceptor places the points of fs that are not in a tool's Run.
type faultInterceptor struct {
	interceptor.WorkerInterceptorBase
	fs faults
}

// runToolName is the activity type of a step.
const runToolName = "RunTool"

// requestApprovalName is the activity type that records a pending approval.
const requestApprovalName = "RequestApproval"

func (c *faultInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &faultActivity{fs: c.fs}
	i.Next = next
	return i
}

type faultActivity struct {
	interceptor.ActivityInboundInterceptorBase
	fs faults
}

func (c *faultActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	var tin activities.ToolInput
	isStep := len(in.Args) > 0 && activity.GetInfo(ctx).ActivityType.Name == runToolName
	if isStep {
		tin, isStep = in.Args[0].(activities.ToolInput)
	}
	if isStep && firstAttempt(ctx) {
		c.fs.at(settings.PointBeforeClaim, tin.Tool).fire(inputFields(tin)...)
	}
	res, err := c.Next.ExecuteActivity(ctx, in)
	if err != nil || !isStep {
		return res, err
	}
	if f := c.fs.at(settings.PointAfterCommit, tin.Tool); f != nil {
		out, ok := res.(activities.ToolOutput)
		if ok && !out.Replayed {
			f.fire(append(inputFields(tin), zap.String("key", out.Key), zap.Bool("resolved", out.Resolved))...)
		}
	}
	return res, err
}

func (c *faultInterceptor) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	// Every fault needs it: the workflow points fire in it, and the
	// activity points of local steps ask it whether this worker has held
	// the run since its start.
	i := &faultWorkflow{fs: c.fs}
	i.Next = next
	return i
}

// faultWorkflow is one run's workflow interceptor: a new one is made each
// time a worker builds the run, by running it from its start or by
// replaying its history.
type faultWorkflow struct {
	interceptor.WorkflowInboundInterceptorBase
	fs faults
	// live is set when this worker ran the run's first workflow task: it
	// has held the run since its start, rather than taking it over by
	// replaying its history.
	live bool
	// approval is the tool of the step whose pending approval the run
	// recorded last.
	approval string
}

func (w *faultWorkflow) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	o := &faultWorkflowOutbound{w: w}
	o.Next = outbound
	return w.Next.Init(o)
}

func (w *faultWorkflow) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	w.live = !workflow.IsReplaying(ctx)
	if w.live {
		heldRuns.add(workflow.GetInfo(ctx).WorkflowExecution.RunID)
	}
	return w.Next.ExecuteWorkflow(ctx, in)
}

// fire fires f if this workflow task is the first to reach its point.
func (w *faultWorkflow) fire(ctx workflow.Context, f *fault, fields ...zap.Field) {
	if f == nil || !w.live || workflow.IsReplaying(ctx) {
		return
	}
	info := workflow.GetInfo(ctx)
	f.fire(append(fields, zap.String("workflow_id", info.WorkflowExecution.ID),
		zap.Int("history_length", info.GetCurrentHistoryLength()))...)
}

type faultWorkflowOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	w *faultWorkflow
}

func (o *faultWorkflowOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	approval := ""
	if len(args) > 0 {
		switch in := args[0].(type) {
		case activities.ToolInput:
			if activityType == runToolName {
				o.w.fire(ctx, o.w.fs.at(settings.PointWorkflowTask, in.Tool), inputFields(in)...)
			}
		case activities.ApprovalRequest:
			if activityType == requestApprovalName {
				approval = in.Tool
			}
		}
	}
	o.w.approval = approval
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

func (o *faultWorkflowOutbound) ExecuteLocalActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	if in, ok := firstArg[activities.ToolInput](args); ok && activityType == runToolName {
		o.w.fire(ctx, o.w.fs.at(settings.PointWorkflowTask, in.Tool), inputFields(in)...)
	}
	return o.Next.ExecuteLocalActivity(ctx, activityType, args...)
}

// firstArg returns args[0] as a T.
func firstArg[T any](args []any) (T, bool) {
	var zero T
	if len(args) == 0 {
		return zero, false
	}
	v, ok := args[0].(T)
	return v, ok
}

// ExecuteChildWorkflow places child-start before the child's start is
// commanded, and child-started where the run learns that Temporal started
// the child.
func (o *faultWorkflowOutbound) ExecuteChildWorkflow(ctx workflow.Context, childWorkflowType string, args ...any) workflow.ChildWorkflowFuture {
	in, ok := firstArg[workflows.RunInput](args)
	if !ok || in.Parent == nil {
		return o.Next.ExecuteChildWorkflow(ctx, childWorkflowType, args...)
	}
	tool := agents.ToolPrefix + in.Parent.Agent
	fields := []zap.Field{zap.String("tool", tool), zap.String("child_run_id", in.RunID), zap.Int64("step", in.Parent.Step)}
	o.w.fire(ctx, o.w.fs.at(settings.PointChildStart, tool), fields...)
	fut := o.Next.ExecuteChildWorkflow(ctx, childWorkflowType, args...)
	f := o.w.fs.at(settings.PointChildStarted, tool)
	if f == nil {
		return fut
	}
	return &faultChildFuture{ChildWorkflowFuture: fut, started: &firingFuture{Future: fut.GetChildWorkflowExecution(),
		fire: func(ctx workflow.Context) { o.w.fire(ctx, f, fields...) }}}
}

// faultChildFuture is a child run's future whose start fires a fault. Its
// GetChildWorkflowExecution is a future the SDK did not make, which only
// Get may read: a workflow.Selector would refuse it, and run code that
// selects on a child's start must not carry child-started.
type faultChildFuture struct {
	workflow.ChildWorkflowFuture
	started workflow.Future
}

func (f *faultChildFuture) GetChildWorkflowExecution() workflow.Future { return f.started }

// firingFuture fires its fault once the future it wraps is ready and read.
type firingFuture struct {
	workflow.Future
	fire func(workflow.Context)
}

func (f *firingFuture) Get(ctx workflow.Context, v any) error {
	err := f.Future.Get(ctx, v)
	if err == nil {
		f.fire(ctx)
	}
	return err
}

func (o *faultWorkflowOutbound) AwaitWithTimeout(ctx workflow.Context, timeout time.Duration, condition func() bool) (bool, error) {
	if tool := o.w.approval; tool != "" {
		o.w.approval = ""
		o.w.fire(ctx, o.w.fs.at(settings.PointApprovalWait, tool), zap.String("tool", tool))
	}
	return o.Next.AwaitWithTimeout(ctx, timeout, condition)
}
