package host

import (
	"context"
	"os"
	"syscall"

	"go.temporal.io/sdk/interceptor"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/activities"
)

// EnvCrashAfterCommit names a tool whose first successful step makes the
// worker kill itself (SIGKILL) after the effect committed and before
// Temporal hears of it: fault injection for demos and failure drills. Never
// set it in production.
const EnvCrashAfterCommit = "ONCERUN_CRASH_AFTER_COMMIT"

// crashAfterCommit is the worker interceptor behind EnvCrashAfterCommit.
type crashAfterCommit struct {
	interceptor.WorkerInterceptorBase
	tool string
	log  *zap.Logger
}

func (c *crashAfterCommit) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &crashingActivity{crashAfterCommit: c}
	i.Next = next
	return i
}

type crashingActivity struct {
	interceptor.ActivityInboundInterceptorBase
	*crashAfterCommit
}

func (c *crashingActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	res, err := c.Next.ExecuteActivity(ctx, in)
	if err != nil || len(in.Args) == 0 {
		return res, err
	}
	if tin, ok := in.Args[0].(activities.ToolInput); ok && tin.Tool == c.tool {
		c.log.Warn("fault injection: the step committed; killing this worker before Temporal hears of it",
			zap.String("env", EnvCrashAfterCommit), zap.String("tool", tin.Tool), zap.Int64("step", tin.Step))
		_ = c.log.Sync()
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
	return res, err
}
