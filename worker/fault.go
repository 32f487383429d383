package worker

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"

	"go.uber.org/zap"

	"github.com/oncerun/oncerun/tools"
)

// Fault injection: variables that make a worker kill (or stop) itself at a
// named point of a step, for failure drills, the chaos harness and the
// crash-point tests. Never set them in production; a worker that has one
// set logs a warning at start and another before it fires.
const (
	// EnvCrashAt lists crash points, comma-separated "<point>:<tool>"
	// entries (Point* constants), for example
	// "after-apply:refund_payment,workflow-task:issue_credit". The worker
	// kills itself (SIGKILL) the first time it reaches each.
	EnvCrashAt = "ONCERUN_CRASH_AT"
	// EnvStallAt lists points as EnvCrashAt does, at which the worker
	// stops itself (SIGSTOP) instead: whoever sends it SIGCONT later brings
	// back a stale worker whose lease has expired meanwhile.
	EnvStallAt = "ONCERUN_STALL_AT"
	// EnvCrashAfterCommit names a tool: the same as EnvCrashAt
	// "after-commit:<tool>".
	EnvCrashAfterCommit = "ONCERUN_CRASH_AFTER_COMMIT"
	// EnvCrashAroundEffect is "before:<tool>" or "after:<tool>": the same
	// as EnvCrashAt "after-lease:<tool>" or "after-apply:<tool>".
	EnvCrashAroundEffect = "ONCERUN_CRASH_AROUND_EFFECT"
)

// Fault points, in the order a step reaches them.
const (
	// PointBeforeClaim: a step of the tool has started, and nothing is
	// claimed or written yet.
	PointBeforeClaim = "before-claim"
	// PointAfterLease (external tools): the key's lease is committed and
	// nothing is sent.
	PointAfterLease = "after-lease"
	// PointDuringEffect: the effect is under way. For a natural or keyed
	// tool, its writes are made in the key's transaction and not committed;
	// for an external tool, the call's HTTP request has reached the
	// provider's host (its TCP segments acknowledged) and no answer was
	// read (a call that sends no HTTP request, such as send_email's SMTP,
	// never reaches this point).
	PointDuringEffect = "during-effect"
	// PointAfterApply (external tools): the provider answered that it
	// applied the effect, and the outcome is not recorded.
	PointAfterApply = "after-apply"
	// PointAfterCommit: this attempt recorded the step's outcome (it made
	// the effect, or settled an earlier attempt's unknown outcome through
	// the paired read) and Temporal has not heard of it. Never after a
	// replay of a completed key.
	PointAfterCommit = "after-commit"
	// PointWorkflowTask: the run's workflow task schedules a step of the
	// tool; the task never completes, and another worker replays the run.
	PointWorkflowTask = "workflow-task"
	// PointApprovalWait: the run has recorded the pending approval of a
	// step of the tool and begins to wait for it; another worker takes the
	// wait up from history.
	PointApprovalWait = "approval-wait"
)

// Points lists the fault points.
var Points = []string{
	PointBeforeClaim, PointAfterLease, PointDuringEffect, PointAfterApply,
	PointAfterCommit, PointWorkflowTask, PointApprovalWait,
}

// pointText says where a worker is when a fault fires at a point.
var pointText = map[string]string{
	PointBeforeClaim:  "before the step's key is claimed",
	PointAfterLease:   "before the effect (the key's lease is committed, nothing was sent)",
	PointDuringEffect: "during the effect (it is under way and not recorded)",
	PointAfterApply:   "after the effect (the provider applied it, the outcome is not recorded)",
	PointAfterCommit:  "after the step committed, before Temporal hears of it",
	PointWorkflowTask: "during the workflow task that schedules the step, before the task completes",
	PointApprovalWait: "as the run begins to wait for the step's approval",
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
			if !ok || !slices.Contains(Points, point) || tool == "" {
				return fmt.Errorf("%s entry %q is not <point>:<tool> with a point of %s", env, entry, strings.Join(Points, ", "))
			}
			fs = append(fs, &fault{point: point, tool: tool, stall: stall, env: env, log: cfg.Logger})
		}
		return nil
	}
	if err := add(EnvCrashAt, cfg.CrashAt, false); err != nil {
		return nil, err
	}
	if err := add(EnvStallAt, cfg.StallAt, true); err != nil {
		return nil, err
	}
	if cfg.CrashAfterCommit != "" {
		fs = append(fs, &fault{point: PointAfterCommit, tool: cfg.CrashAfterCommit, env: EnvCrashAfterCommit, log: cfg.Logger})
	}
	if spec := cfg.CrashAroundEffect; spec != "" {
		when, tool, ok := strings.Cut(spec, ":")
		point := map[string]string{"before": PointAfterLease, "after": PointAfterApply}[when]
		if !ok || point == "" || tool == "" {
			return nil, fmt.Errorf("%s %q is not before:<tool> or after:<tool>", EnvCrashAroundEffect, spec)
		}
		fs = append(fs, &fault{point: point, tool: tool, env: EnvCrashAroundEffect, log: cfg.Logger})
	}
	for _, f := range fs {
		i := slices.IndexFunc(all, func(t tools.Tool) bool { return t.Name == f.tool })
		if i < 0 {
			return nil, fmt.Errorf("%s: no tool %q", f.env, f.tool)
		}
		class := all[i].Class
		switch {
		case (f.point == PointAfterLease || f.point == PointAfterApply) && class != tools.ClassExternal:
			return nil, fmt.Errorf("%s: %s needs an external tool; %s is %s", f.env, f.point, f.tool, class)
		case f.point == PointDuringEffect && class == tools.ClassRead:
			return nil, fmt.Errorf("%s: %s needs a tool with an effect; %s is %s", f.env, f.point, f.tool, class)
		}
	}
	return fs, nil
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
