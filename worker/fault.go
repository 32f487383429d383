package worker

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"

	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/agents"
	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/tools"
)

// faultSpec is what the fault variables say, as the environment has them.
type faultSpec struct {
	// crashAt and stallAt are settings.EnvCrashAt and settings.EnvStallAt;
	// crashAfterCommit and crashAroundEffect are the older spellings
	// settings.EnvCrashAfterCommit and settings.EnvCrashAroundEffect.
	crashAt, stallAt, crashAfterCommit, crashAroundEffect string
}

// pointText says where a worker is when a fault fires at a point.
var pointText = map[string]string{
	settings.PointBeforeClaim:  "before the step's key is claimed",
	settings.PointAfterLease:   "before the effect (the key's lease is committed, nothing was sent)",
	settings.PointDuringEffect: "during the effect (it is under way and not recorded)",
	settings.PointAfterApply:   "after the effect (the provider applied it, the outcome is not recorded)",
	settings.PointAfterCommit:  "after the step committed, before Temporal hears of it",
	settings.PointWorkflowTask: "during the workflow task that schedules the step, before the task completes",
	settings.PointApprovalWait: "as the run begins to wait for the step's approval",
	settings.PointChildStart:   "during the workflow task that starts the step's child run, before the task completes",
	settings.PointChildStarted: "once the step's child run has started, before the run records it",
}

// fault is one point at which this worker kills or stops itself, once.
type fault struct {
	point, tool string
	stall       bool
	// env is the variable that set it, for log lines.
	env   string
	fired atomic.Bool
	log   *zap.Logger
	// signal sends sig to this process; a test may replace it.
	signal func(sig syscall.Signal)
}

// faults are a worker's fault points.
type faults []*fault

// parseFaults reads the fault-injection variables of cfg. The points are
// checked against the tools of the worker, all: the tool must exist, and
// points around an external effect need an external tool.
func parseFaults(cfg Config, all []tools.Tool) (faults, error) {
	var fs faults
	add := func(env, spec string, stall bool) error {
		for entry := range strings.SplitSeq(spec, ",") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			point, tool, ok := strings.Cut(entry, ":")
			if !ok || !slices.Contains(settings.Points, point) || tool == "" {
				return fmt.Errorf("%s entry %q is not <point>:<tool> with a point of %s", env, entry, strings.Join(settings.Points, ", "))
			}
			fs = append(fs, &fault{point: point, tool: tool, stall: stall, env: env, log: cfg.Logger})
		}
		return nil
	}
	if err := add(settings.EnvCrashAt, cfg.faults.crashAt, false); err != nil {
		return nil, err
	}
	if err := add(settings.EnvStallAt, cfg.faults.stallAt, true); err != nil {
		return nil, err
	}
	if cfg.faults.crashAfterCommit != "" {
		fs = append(fs, &fault{point: settings.PointAfterCommit, tool: cfg.faults.crashAfterCommit, env: settings.EnvCrashAfterCommit, log: cfg.Logger})
	}
	if spec := cfg.faults.crashAroundEffect; spec != "" {
		when, tool, ok := strings.Cut(spec, ":")
		point := map[string]string{"before": settings.PointAfterLease, "after": settings.PointAfterApply}[when]
		if !ok || point == "" || tool == "" {
			return nil, fmt.Errorf("%s %q is not before:<tool> or after:<tool>", settings.EnvCrashAroundEffect, spec)
		}
		fs = append(fs, &fault{point: point, tool: tool, env: settings.EnvCrashAroundEffect, log: cfg.Logger})
	}
	var subAgents *agents.Set
	if slices.ContainsFunc(fs, (*fault).child) {
		set, err := agentSet(cfg, func(tool string) bool {
			return slices.ContainsFunc(all, func(t tools.Tool) bool { return t.Name == tool })
		})
		if err != nil {
			return nil, err
		}
		subAgents = set
	}
	for _, f := range fs {
		if f.child() {
			if _, ok := subAgents.Lookup(f.tool); !ok {
				return nil, fmt.Errorf("%s: %s needs a sub-agent's tool (%s<name>); the deployment has none named %q",
					f.env, f.point, agents.ToolPrefix, f.tool)
			}
			continue
		}
		i := slices.IndexFunc(all, func(t tools.Tool) bool { return t.Name == f.tool })
		if i < 0 {
			return nil, fmt.Errorf("%s: no tool %q", f.env, f.tool)
		}
		class := all[i].Class
		switch {
		case (f.point == settings.PointAfterLease || f.point == settings.PointAfterApply) && class != tools.ClassExternal:
			return nil, fmt.Errorf("%s: %s needs an external tool; %s is %s", f.env, f.point, f.tool, class)
		case f.point == settings.PointDuringEffect && class == tools.ClassRead:
			return nil, fmt.Errorf("%s: %s needs a tool with an effect; %s is %s", f.env, f.point, f.tool, class)
		case f.point == settings.PointDuringEffect && cfg.mcp != nil && cfg.mcp.sources[f.tool].Transport == mcp.TransportStdio:
			return nil, fmt.Errorf("%s: %s can never fire on %s: its server is a stdio child and the call sends no HTTP request "+
				"(use after-commit or before-claim, or serve it over http)", f.env, f.point, f.tool)
		}
	}
	return fs, nil
}

// child reports whether f is at a point of a delegating step.
func (f *fault) child() bool {
	return f.point == settings.PointChildStart || f.point == settings.PointChildStarted
}

// at returns the fault at point for tool, or nil.
func (fs faults) at(point, tool string) *fault {
	for _, f := range fs {
		if f.point == point && f.tool == tool {
			return f
		}
	}
	return nil
}

// announce logs, at start, what each fault will do.
func (fs faults) announce() {
	for _, f := range fs {
		f.log.Warn(fmt.Sprintf("fault injection on: this worker will %s itself %s, in a step of %s; never set %s in production",
			f.verb(), pointText[f.point], f.tool, f.env),
			zap.String("env", f.env), zap.String("point", f.point), zap.String("tool", f.tool))
	}
}

func (f *fault) verb() string {
	if f.stall {
		return "stop"
	}
	return "kill"
}

func (f *fault) doing() string {
	if f.stall {
		return "stopping"
	}
	return "killing"
}

// fire kills or stops this process, the first time only, after a warning
// that names the point. A stopped process goes on where it stopped once it
// is sent SIGCONT.
func (f *fault) fire(fields ...zap.Field) {
	if f == nil || !f.fired.CompareAndSwap(false, true) {
		return
	}
	fields = append([]zap.Field{zap.String("env", f.env), zap.String("point", f.point)}, fields...)
	f.log.Warn("fault injection: "+f.doing()+" this worker "+pointText[f.point], fields...)
	_ = f.log.Sync()
	send := f.signal
	if send == nil {
		send = signalSelf
	}
	if f.stall {
		send(syscall.SIGSTOP)
		f.log.Warn("fault injection: this worker was continued; it goes on as a stale worker", fields...)
		return
	}
	send(syscall.SIGKILL)
	if f.signal == nil {
		select {} // the signal is on its way
	}
}
