package worker

import (
	"context"
	"os"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/activities"
)

// The messages of the lines a worker logs, at info, around each activity
// attempt it runs (local activities too). Each line carries the worker's
// pid, workflow_id, workflow_run_id, activity_id, activity_type, attempt
// and local; a step's lines also carry its tenant, run_id, step and tool.
// The chaos harness pairs them with the worker deaths it saw to measure how
// soon an attempt that died with its worker runs again elsewhere.
const (
	LogActivityStarted  = "activity started"
	LogActivityFinished = "activity finished"
)

// activityLog logs each activity attempt as it starts and as it returns.
// It is the outermost activity interceptor, so that a crash fault fires
// between the two lines.
type activityLog struct {
	interceptor.WorkerInterceptorBase
	log *zap.Logger
}

func newActivityLog(log *zap.Logger) *activityLog {
	return &activityLog{log: log.With(zap.Int("pid", os.Getpid()))}
}

func (c *activityLog) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &activityLogInbound{log: c.log}
	i.Next = next
	return i
}

type activityLogInbound struct {
	interceptor.ActivityInboundInterceptorBase
	log *zap.Logger
}

func (c *activityLogInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	if !c.log.Core().Enabled(zap.InfoLevel) {
		return c.Next.ExecuteActivity(ctx, in)
	}
	info := activity.GetInfo(ctx)
	fields := make([]zap.Field, 0, 12)
	fields = append(fields,
		zap.String("workflow_id", info.WorkflowExecution.ID), zap.String("workflow_run_id", info.WorkflowExecution.RunID),
		zap.String("activity_id", info.ActivityID), zap.String("activity_type", info.ActivityType.Name),
		zap.Int32("attempt", info.Attempt), zap.Bool("local", info.IsLocalActivity))
	if len(in.Args) > 0 {
		if tin, ok := in.Args[0].(activities.ToolInput); ok {
			fields = append(fields, inputFields(tin)...)
		}
	}
	c.log.Info(LogActivityStarted, fields...)
	began := time.Now()
	res, err := c.Next.ExecuteActivity(ctx, in)
	c.log.Info(LogActivityFinished, append(fields, zap.Duration("took", time.Since(began)), zap.Bool("failed", err != nil))...)
	return res, err
}
