package host

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"

	"go.temporal.io/sdk/interceptor"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/tools"
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

// EnvCrashAroundEffect names a point around an external tool's effect at
// which the worker kills itself (SIGKILL) the first time it gets there:
// "before:<tool>" once the key's lease has committed and before anything is
// sent, "after:<tool>" once the provider has answered and before the
// outcome is recorded. Fault injection for failure drills; never set it in
// production.
const EnvCrashAroundEffect = "ONCERUN_CRASH_AROUND_EFFECT"

// crashAroundEffect wraps the tool that spec names so that the process
// kills itself at the point spec names.
func crashAroundEffect(spec string, ts []tools.Tool, log *zap.Logger) ([]tools.Tool, error) {
	if spec == "" {
		return ts, nil
	}
	point, name, ok := strings.Cut(spec, ":")
	if !ok || (point != "before" && point != "after") {
		return nil, fmt.Errorf("%s %q is not before:<tool> or after:<tool>", EnvCrashAroundEffect, spec)
	}
	out := slices.Clone(ts)
	for i, t := range out {
		if t.Name != name {
			continue
		}
		if t.Class != tools.ClassExternal {
			return nil, fmt.Errorf("%s: tool %s is %s, not external", EnvCrashAroundEffect, name, t.Class)
		}
		run := t.Run
		die := func() {
			log.Warn("fault injection: killing this worker "+point+" the effect", zap.String("env", EnvCrashAroundEffect), zap.String("tool", name))
			_ = log.Sync()
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
		out[i].Run = func(ctx context.Context, call tools.Call) (any, error) {
			if point == "before" {
				die()
			}
			res, err := run(ctx, call)
			if err == nil {
				die()
			}
			return res, err
		}
		log.Warn("fault injection on: this worker will kill itself "+point+" an effect", zap.String("env", EnvCrashAroundEffect), zap.String("tool", name))
		return out, nil
	}
	return nil, fmt.Errorf("%s: no tool %q", EnvCrashAroundEffect, name)
}
