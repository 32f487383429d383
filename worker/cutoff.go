package worker

import (
	"context"
	"errors"
	"fmt"
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
// runs under the gate's context of its start: shutting the gate cancels
// every attempt in progress, so that what waits on a black-holed
// connection ends now, not at its deadline.
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
// workflow task whose local activity the gate cancelled.
//
// A regular activity's attempt ends with a retryable error: the worker
// still reports it if it reaches Temporal, and Temporal retries it on a
// worker that polls. A local activity runs inside its workflow task, which
// the worker's SDK keeps alive (heartbeats) while the local activity is
// retried, so that a retryable failure would keep the run on the cut-off
// worker. Its attempt ends instead with a non-retryable error of type
// errTypeCutOff, which the workflow side turns into a panic: the SDK fails
// the workflow task, Temporal clears the run's stickiness and hands the
// task to another worker, and nothing of the failed task, the local
// activity's marker included, is recorded. The workflow never sees the
// error, so its history is as if the task had timed out.
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
	stop := context.AfterFunc(g, func() { cancel(context.Cause(g)) })
	defer stop()
	res, err := c.Next.ExecuteActivity(ctx, in)
	if err != nil && g.Err() != nil {
		// Whatever the attempt made of its cancellation (a context error, an
		// outcome left unknown under its lease), the reason is the cut.
		return nil, cutOffError(fmt.Errorf("%w (the attempt ended: %s)", context.Cause(g), err.Error()), local)
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
	if isCutOff(err) {
		panic(fmt.Sprintf("the workflow task is failed so that another worker takes the run over: %s", err.Error()))
	}
	return err
}

// isCutOff reports an error of an attempt its worker's cut stopped.
func isCutOff(err error) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app) && app.Type() == errTypeCutOff
}

// errCutOff is the cause the gate is shut with: which links are cut off.
func errCutOff(links []string) error {
	return fmt.Errorf("%w from %s", errWorkerCutOff, strings.Join(links, " and "))
}

var errWorkerCutOff = errors.New("worker cut off")
