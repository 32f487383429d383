package activities

import (
	"cmp"
	"context"
	"slices"
	"time"

	"go.temporal.io/sdk/activity"
	"go.uber.org/zap"
)

// DefaultDeadlineWarnings are the points before an approval deadline at
// which a pending step is warned about: a day and an hour before.
var DefaultDeadlineWarnings = []time.Duration{24 * time.Hour, time.Hour}

// DeadlineWarning says that a step still waits for a decision and its
// deadline comes near.
type DeadlineWarning struct {
	Tenant   string    `json:"tenant"`
	RunID    string    `json:"run_id"`
	Step     int64     `json:"step"`
	Tool     string    `json:"tool"`
	Deadline time.Time `json:"deadline"`
	// Before is how long before the deadline the warning was due, one of
	// the points the run was given when the step began to wait.
	Before time.Duration `json:"before"`
	// OnExpiry is what the deadline will do to the step: "expire" or
	// "reject".
	OnExpiry string `json:"on_expiry,omitempty"`
}

// DeadlineWarner delivers a deadline warning beyond the log line: a metric,
// the alert webhook. An error is retried by the warning's activity.
type DeadlineWarner interface {
	DeadlineWarning(ctx context.Context, w DeadlineWarning) error
}

// deadlineWarnings are the worker's warning points, longest first, with no
// repeats and none that is not positive.
func (a *Activities) deadlineWarnings() []time.Duration {
	points := a.DeadlineWarnings
	if points == nil {
		points = DefaultDeadlineWarnings
	}
	var out []time.Duration
	for _, p := range points {
		if p > 0 && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(x, y time.Duration) int { return cmp.Compare(y, x) })
	return out
}

// WarnApprovalDeadline warns that step w.Step of a run still waits for a
// decision w.Before its deadline: an error log line naming the run, step,
// tool, tenant and deadline, then the Warner (metric, webhook). The run
// schedules each warning once; the Warner's delivery is retried with the
// activity, so a receiver may see a warning twice after a failed attempt
// and should drop repeats by their id (tenant, run, step, before).
func (a *Activities) WarnApprovalDeadline(ctx context.Context, w DeadlineWarning) error {
	// The line is written by the first attempt only: a retry is the
	// webhook's, not a second warning.
	if activity.IsActivity(ctx) && activity.GetInfo(ctx).Attempt > 1 {
		return a.deliverWarning(ctx, w)
	}
	a.log(ctx).Error("approval deadline comes near: the step still waits for a decision",
		zap.String("tenant", w.Tenant), zap.String("run_id", w.RunID), zap.Int64("step", w.Step),
		zap.String("tool", w.Tool), zap.Time("deadline", w.Deadline), zap.Duration("before", w.Before),
		zap.String("on_expiry", w.OnExpiry))
	return a.deliverWarning(ctx, w)
}

// deliverWarning hands w to the Warner, if any.
func (a *Activities) deliverWarning(ctx context.Context, w DeadlineWarning) error {
	if a.Warner == nil {
		return nil
	}
	return a.Warner.DeadlineWarning(ctx, w)
}
