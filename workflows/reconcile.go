package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
)

// ReconcileScheduleID is the Temporal Schedule that runs [Reconcile].
const ReconcileScheduleID = "oncerun-reconciliation"

// ReconcileInput configures one reconciliation pass. Zero fields take the
// worker's configuration.
type ReconcileInput struct {
	// Settlement: only effects older than this are compared.
	Settlement time.Duration `json:"settlement,omitempty"`
	// Lookback is how far back the pass looks.
	Lookback time.Duration `json:"lookback,omitempty"`
}

// ReconcileResult is what one pass found.
type ReconcileResult struct {
	// At is when the pass began, by the workflow's clock.
	At   time.Time                  `json:"at"`
	Pass activities.ReconcileOutput `json:"pass"`
}

// Reconcile runs one reconciliation pass: one activity compares every
// reconciled tool's effects with its provider's ledger, records the drift
// and sets the drift gauges. A pass that fails is retried a few times;
// the next scheduled pass starts afresh, and findings are recorded once
// however often a pass runs.
func Reconcile(ctx workflow.Context, in ReconcileInput) (ReconcileResult, error) {
	res := ReconcileResult{At: workflow.Now(ctx)}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: 5 * time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute, MaximumAttempts: 5,
			NonRetryableErrorTypes: []string{activities.ErrTypeInvalidArgs},
		},
	})
	err := workflow.ExecuteActivity(actx, a.ReconcilePass, activities.ReconcileInput{
		Settlement: in.Settlement, Lookback: in.Lookback,
	}).Get(ctx, &res.Pass)
	if err != nil {
		return res, err
	}
	workflow.GetLogger(ctx).Info("reconciliation pass done", "configured", res.Pass.Configured,
		"checked", res.Pass.Checked, "recorded", res.Pass.Recorded, "drift_count", res.Pass.DriftCount,
		"oldest_unreconciled_age_seconds", res.Pass.OldestUnreconciledAgeSeconds)
	return res, nil
}
