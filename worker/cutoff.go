package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// errTypeCutOff is the type of the error an activity attempt ends with
// when its worker was cut off while it ran, or was already when it began.
const errTypeCutOff = "oncerun.CutOff"

// gate is open while the worker reaches every link. Each activity attempt
// runs under the gate's context of its start: shutting the gate refuses
// new attempts and ends those in progress that cannot finish (see
// endsRunning), so that what waits on a black-holed connection ends now,
// not at its deadline.
type gate struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newGate() *gate {
	g := &gate{}
	g.open()
	return g
}

// open opens the gate, if it is shut.
func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ctx != nil && g.ctx.Err() == nil {
		return
	}
	g.ctx, g.cancel = context.WithCancelCause(context.Background())
}

// shut shuts the gate: attempts in progress are cancelled with cause, and
// new ones refused until open.
func (g *gate) shut(cause error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cancel(cause)
}

func (g *gate) current() context.Context {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ctx
}

// cutOffInterceptor runs each activity attempt under the gate, and fails a
// workflow task whose local activity the gate ended.
//
// A regular activity's attempt the gate ends returns a retryable error:
// the worker still reports it if it reaches Temporal, and Temporal retries
// it on a worker that polls. A local activity runs inside its workflow
// task, which the worker's SDK keeps alive (heartbeats) while the local
// activity is retried, so that a retryable failure would keep the run on
// the cut-off worker. Its attempt ends instead with a non-retryable error
// of type errTypeCutOff, which the workflow side turns into a panic: the
// SDK fails the workflow task (at its first attempt it says so to Temporal
// at once; a later attempt waits for the task's timeout), Temporal clears
// the run's stickiness and hands the task to another worker. The failed
// task adds a WorkflowTaskFailed event and nothing else: no marker, no
// command. The workflow never sees the error.
//
// The wrapped future is only ever waited on with Get: the SDK's Selector
// and Settable.Chain take its own futures alone, and oncerun's workflows
// wait on every local activity with Get at once.
type cutOffInterceptor struct {
	interceptor.WorkerInterceptorBase
	gate *gate
}

func (c *cutOffInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &cutOffActivity{gate: c.gate}
	i.Next = next
	return i
}

func (c *cutOffInterceptor) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	i := &cutOffWorkflow{}
	i.Next = next
	return i
}

type cutOffActivity struct {
	interceptor.ActivityInboundInterceptorBase
	gate *gate
}

func (c *cutOffActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	local := activity.GetInfo(ctx).IsLocalActivity
	g := c.gate.current()
	if g.Err() != nil {
		return nil, cutOffError(context.Cause(g), local)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(g, func() {
		if cause := context.Cause(g); local || endsRunning(cause) {
			cancel(cause)
		}
	})
	defer stop()
	res, err := c.Next.ExecuteActivity(ctx, in)
	if err != nil && errors.Is(context.Cause(ctx), errWorkerCutOff) {
		// Whatever the attempt made of its cancellation (a context error, an
		// outcome left unknown under its lease), the reason is the cut.
		return nil, cutOffError(fmt.Errorf("%w (the attempt ended: %s)", context.Cause(ctx), err.Error()), local)
	}
	return res, err
}

// cutOffError is the error of an attempt the gate stopped.
func cutOffError(cause error, local bool) error {
	msg := cause.Error()
	if local {
		return temporal.NewNonRetryableApplicationError(msg, errTypeCutOff, nil)
	}
	return temporal.NewApplicationError(msg, errTypeCutOff)
}

type cutOffWorkflow struct {
	interceptor.WorkflowInboundInterceptorBase
}

func (c *cutOffWorkflow) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	o := &cutOffOutbound{}
	o.Next = outbound
	return c.Next.Init(o)
}

type cutOffOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
}

func (c *cutOffOutbound) ExecuteLocalActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	return cutOffFuture{c.Next.ExecuteLocalActivity(ctx, activityType, args...)}
}

// cutOffFuture is a local activity's future that panics, failing its
// workflow task, when the local activity was stopped by its worker's cut.
type cutOffFuture struct {
	workflow.Future
}

func (f cutOffFuture) Get(ctx workflow.Context, valuePtr any) error {
	err := f.Future.Get(ctx, valuePtr)
	// A replayed marker never holds a cut: a task that met one did not
	// complete. Should one ever be recorded, the run must not fail every
	// task for ever.
	if isCutOff(err) && !workflow.IsReplaying(ctx) {
		panic(fmt.Sprintf("the workflow task is failed so that another worker takes the run over: %s", err.Error()))
	}
	return err
}

// isCutOff reports an error of an attempt its worker's cut stopped.
func isCutOff(err error) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app) && app.Type() == errTypeCutOff
}

// errWorkerCutOff is what every cause the gate is shut with is.
var errWorkerCutOff = errors.New("worker cut off")

// cutOff is the cause the gate is shut with: the links cut off.
type cutOff struct{ links []string }

func errCutOff(links []string) error { return &cutOff{links: links} }

func (c *cutOff) Error() string { return "worker cut off from " + strings.Join(c.links, " and ") }

// Is makes every cut errWorkerCutOff.
func (c *cutOff) Is(target error) bool { return target == errWorkerCutOff }

// endsRunning reports whether a cut ends the regular activity attempts in
// progress, not only the local ones: a cut from PostgreSQL does, since
// what they wait on will not answer and their worker still reaches
// Temporal, which would wait for them. A cut from Temporal alone does
// not: an attempt that reaches PostgreSQL records its outcome there, where
// the worker that takes the step over finds it, and ending it would leave
// an external call's outcome unknown for nothing.
func endsRunning(cause error) bool {
	var c *cutOff
	return errors.As(cause, &c) && slices.Contains(c.links, "postgres")
}
