package reconcile

import (
	"cmp"
	"context"
	"errors"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/schedule"
)

// Names the schedule, the workflow and the activity are known by in
// Temporal. They are those of earlier releases, so that a schedule made by
// one starts passes a worker of another runs.
const (
	ScheduleID       = "oncerun-reconciliation"
	WorkflowName     = "Reconcile"
	PassActivityName = "ReconcilePass"
	// DefaultInterval is the default of Config.Interval.
	DefaultInterval = 10 * time.Minute
)

// errTypeConfig is the error type of a pass whose configuration it cannot
// run with; it is not retried.
const errTypeConfig = "InvalidArgs"

// Input configures one scheduled pass. Zero fields take the worker's
// configuration.
type Input struct {
	// Settlement: only effects older than this are compared.
	Settlement time.Duration `json:"settlement,omitempty"`
	// Lookback is how far back the pass looks.
	Lookback time.Duration `json:"lookback,omitempty"`
}

// Result is what one scheduled pass found.
type Result struct {
	// At is when the pass began, by the workflow's clock.
	At   time.Time  `json:"at"`
	Pass PassOutput `json:"pass"`
}

// PassOutput sums up a pass: what the open findings add up to after it.
// The findings themselves stay in reconciliation_findings, out of the
// workflow's history.
type PassOutput struct {
	// Configured is false when the worker has no reconciliation configured
	// and nothing was compared.
	Configured bool `json:"configured"`
	// DriftCount counts the open findings.
	DriftCount int `json:"drift_count"`
	// DriftAmount sums their absolute amounts by currency, in integer minor
	// units.
	DriftAmount map[string]int64 `json:"drift_amount,omitempty"`
	// OldestUnreconciledAgeSeconds is the age of the oldest open finding's
	// effect.
	OldestUnreconciledAgeSeconds float64 `json:"oldest_unreconciled_age_seconds"`
	// Checked counts the effects and messages compared, Recorded the new
	// findings and Skipped the messages left for a later pass.
	Checked  int `json:"checked"`
	Recorded int `json:"recorded"`
	Skipped  int `json:"skipped,omitempty"`
}

// Register registers [Workflow] as [WorkflowName] and acts' ReconcilePass
// as [PassActivityName] on r.
func Register(r schedule.Registry, acts *Activities) {
	r.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowName})
	r.RegisterActivityWithOptions(acts.ReconcilePass, activity.RegisterOptions{Name: PassActivityName})
}

// Workflow runs one reconciliation pass: one activity compares every
// reconciled tool's effects with its provider's ledger, records the drift
// and sets the drift gauges. A pass that fails is retried a few times; the
// next scheduled pass starts afresh, and findings are recorded once however
// often a pass runs.
func Workflow(ctx workflow.Context, in Input) (Result, error) {
	res := Result{At: workflow.Now(ctx)}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: 5 * time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute, MaximumAttempts: 5,
			NonRetryableErrorTypes: []string{errTypeConfig},
		},
	})
	if err := workflow.ExecuteActivity(actx, PassActivityName, in).Get(ctx, &res.Pass); err != nil {
		return res, err
	}
	workflow.GetLogger(ctx).Info("reconciliation pass done", "configured", res.Pass.Configured,
		"checked", res.Pass.Checked, "recorded", res.Pass.Recorded, "drift_count", res.Pass.DriftCount,
		"oldest_unreconciled_age_seconds", res.Pass.OldestUnreconciledAgeSeconds)
	return res, nil
}

// Activities is the pass as a Temporal activity, with the worker's
// configuration and gauges.
type Activities struct {
	// Config configures the pass. Nil: the worker has no reconciliation
	// configured, and a pass compares nothing.
	Config *Config
	// Metrics receives each pass's report. Nil: none.
	Metrics *Metrics
	// Log receives a line per pass. Default: Config.Log.
	Log *zap.Logger
}

func (a *Activities) log() *zap.Logger {
	switch {
	case a.Log != nil:
		return a.Log
	case a.Config != nil && a.Config.Log != nil:
		return a.Config.Log
	}
	return zap.NewNop()
}

// ReconcilePass runs one pass ([Pass]) and sets the gauges to its report.
// A ledger that cannot be read fails the activity, to be retried, after
// the other sources were compared and the gauges set; a configuration the
// pass cannot run with fails it for good.
func (a *Activities) ReconcilePass(ctx context.Context, in Input) (PassOutput, error) {
	if a.Config == nil {
		a.log().Warn("reconciliation pass skipped: this worker has no reconciliation configured")
		return PassOutput{}, nil
	}
	cfg := *a.Config
	if in.Settlement > 0 {
		cfg.Settlement = in.Settlement
	}
	if in.Lookback > 0 {
		cfg.Lookback = in.Lookback
	}
	rep, err := Pass(ctx, cfg)
	if errors.Is(err, ErrConfig) {
		return PassOutput{}, temporal.NewNonRetryableApplicationError(err.Error(), errTypeConfig, err)
	}
	// A report with no DriftAmount map was never made: the open findings
	// could not be read.
	if rep.DriftAmount != nil && a.Metrics != nil {
		a.Metrics.Observe(rep)
	}
	out := PassOutput{
		Configured: true, DriftCount: rep.DriftCount, DriftAmount: rep.DriftAmount,
		OldestUnreconciledAgeSeconds: rep.OldestUnreconciledAgeSeconds,
		Checked:                      rep.Checked, Recorded: rep.Recorded, Skipped: rep.Skipped,
	}
	if err != nil {
		return out, err
	}
	a.log().Info("reconciliation pass done", zap.Int("checked", out.Checked), zap.Int("recorded", out.Recorded),
		zap.Int("drift_count", out.DriftCount), zap.Float64("oldest_unreconciled_age_seconds", out.OldestUnreconciledAgeSeconds))
	return out, nil
}

// EnsureSchedule creates reconciliation's Temporal Schedule, or updates it
// to cfg (its Interval and ScheduleID) if it exists: every worker calls it
// at start. The pass's other settings live in the workers' configuration,
// so that a change to them needs no change to the schedule.
func EnsureSchedule(ctx context.Context, c client.Client, taskQueue string, cfg Config) error {
	id := cmp.Or(cfg.ScheduleID, ScheduleID)
	interval := cfg.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	return schedule.Ensure(ctx, c, id, interval, &client.ScheduleWorkflowAction{
		ID: id, Workflow: WorkflowName, Args: []any{Input{}}, TaskQueue: taskQueue,
	})
}
