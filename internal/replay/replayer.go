package replay

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/workflows"
)

// planActivity is the activity type of a planning turn
// ((*activities.Activities).Plan), as an activity and as a local activity.
const planActivity = "Plan"

// replayed is what a replay saw of the run.
type replayed struct {
	// status is the run's status at the end of the history, read through
	// the status query's handler; nil when the workflow registered none.
	status *workflows.Status
	// plans are the inputs of the run's planning turns, in the order the
	// code asked for them.
	plans []activities.PlanInput
	// task is the history length, in events, of the last workflow task the
	// code ran in: where a replay that failed stopped.
	task int64
}

// replayHistory replays h, a history of the workflow execution id (and
// Temporal's run id, if known), with this build's workflow code.
func replayHistory(id, runID string, h *historypb.History) (replayed, error) {
	c := &capture{}
	r, err := sdkworker.NewWorkflowReplayerWithOptions(sdkworker.WorkflowReplayerOptions{
		Interceptors: []interceptor.WorkerInterceptor{c},
	})
	if err != nil {
		return replayed{}, fmt.Errorf("new replayer: %w", err)
	}
	r.RegisterWorkflow(workflows.AgentRun)
	err = r.ReplayWorkflowHistoryWithOptions(discard, h, sdkworker.ReplayWorkflowHistoryOptions{
		OriginalExecution: workflow.Execution{ID: id, RunID: runID},
	})
	out := replayed{plans: c.plans, task: c.task}
	if err != nil {
		return out, err
	}
	if c.status != nil {
		st, err := c.status()
		if err != nil {
			return out, fmt.Errorf("status query: %w", err)
		}
		out.status = &st
	}
	return out, nil
}

// discard is the replayer's logger: the SDK logs a replay's failure,
// which the check reports itself.
var discard = sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))

// errNoStatus reports a run whose code registered no status query.
var errNoStatus = errors.New("the run registered no status query")

// capture is an interceptor of one replay: it keeps the status query's
// handler, the input of each planning turn, and the workflow task the code
// last ran in. It adds nothing to the run's commands.
type capture struct {
	interceptor.WorkerInterceptorBase
	status func() (workflows.Status, error)
	plans  []activities.PlanInput
	task   int64
}

// InterceptWorkflow wraps the run's outbound calls.
func (c *capture) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &captureInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, c: c}
}

type captureInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	c *capture
}

// Init puts the capture between the workflow and its outbound calls.
func (i *captureInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&captureOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}, c: i.c})
}

type captureOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	c *capture
}

// at records the workflow task the code runs in.
func (o *captureOutbound) at(ctx workflow.Context) {
	o.c.task = int64(o.Next.GetInfo(ctx).GetCurrentHistoryLength())
}

// plan keeps the input of a planning turn.
func (o *captureOutbound) plan(activityType string, args []any) {
	if activityType != planActivity || len(args) == 0 {
		return
	}
	if in, ok := args[0].(activities.PlanInput); ok {
		o.c.plans = append(o.c.plans, in)
	}
}

func (o *captureOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	o.at(ctx)
	o.plan(activityType, args)
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

func (o *captureOutbound) ExecuteLocalActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	o.at(ctx)
	o.plan(activityType, args)
	return o.Next.ExecuteLocalActivity(ctx, activityType, args...)
}

func (o *captureOutbound) NewTimer(ctx workflow.Context, d time.Duration) workflow.Future {
	o.at(ctx)
	return o.Next.NewTimer(ctx, d)
}

func (o *captureOutbound) AwaitWithTimeout(ctx workflow.Context, d time.Duration, condition func() bool) (bool, error) {
	o.at(ctx)
	return o.Next.AwaitWithTimeout(ctx, d, condition)
}

func (o *captureOutbound) Now(ctx workflow.Context) time.Time {
	o.at(ctx)
	return o.Next.Now(ctx)
}

func (o *captureOutbound) GetVersion(ctx workflow.Context, changeID string, minSupported, maxSupported workflow.Version) workflow.Version {
	o.at(ctx)
	return o.Next.GetVersion(ctx, changeID, minSupported, maxSupported)
}

func (o *captureOutbound) SetQueryHandler(ctx workflow.Context, queryType string, handler any) error {
	if h, ok := handler.(func() (workflows.Status, error)); ok && queryType == workflows.QueryStatus {
		o.c.status = h
	}
	return o.Next.SetQueryHandler(ctx, queryType, handler)
}
