package workflows

import (
	"cmp"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
)

// Defaults of [WatchdogInput].
const (
	DefaultWatchdogBatch      = 250
	DefaultWatchdogMaxBatches = 100
	// WatchdogScheduleID is the Temporal Schedule that runs [Watchdog].
	WatchdogScheduleID = "oncerun-expiry-watchdog"
)

// WatchdogInput configures one pass of the expiry watchdog.
type WatchdogInput struct {
	// Policy is what happens to an expired key whose run is open: "hold"
	// (default) or "prune".
	Policy string `json:"policy,omitempty"`
	// BatchSize bounds the keys locked by one activity. Default
	// DefaultWatchdogBatch.
	BatchSize int `json:"batch_size,omitempty"`
	// MaxBatches bounds one pass; the next scheduled pass goes on. Default
	// DefaultWatchdogMaxBatches.
	MaxBatches int `json:"max_batches,omitempty"`
}

// WatchdogResult sums one pass.
type WatchdogResult struct {
	Cutoff  time.Time              `json:"cutoff"`
	Batches int                    `json:"batches"`
	Totals  activities.PruneOutput `json:"totals"`
}

// Watchdog prunes the keys that expired before the pass began, in batches,
// oldest first, until a batch comes back short or MaxBatches is reached. The
// cutoff is the workflow's clock, so a pass is deterministic on replay.
func Watchdog(ctx workflow.Context, in WatchdogInput) (WatchdogResult, error) {
	in.Policy = cmp.Or(in.Policy, activities.PolicyHold)
	in.BatchSize = cmp.Or(in.BatchSize, DefaultWatchdogBatch)
	in.MaxBatches = cmp.Or(in.MaxBatches, DefaultWatchdogMaxBatches)
	res := WatchdogResult{Cutoff: workflow.Now(ctx)}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute, MaximumAttempts: 10,
			NonRetryableErrorTypes: []string{activities.ErrTypeInvalidArgs},
		},
	})
	for res.Batches < in.MaxBatches {
		var out activities.PruneOutput
		err := workflow.ExecuteActivity(actx, a.PruneExpired, activities.PruneInput{
			Cutoff: res.Cutoff, BatchSize: in.BatchSize, Policy: in.Policy,
		}).Get(ctx, &out)
		if err != nil {
			return res, err
		}
		res.Batches++
		t := &res.Totals
		t.Selected += out.Selected
		t.Pruned += out.Pruned
		t.Held += out.Held
		t.PrunedAlive += out.PrunedAlive
		t.Alerts += out.Alerts
		t.Skipped += out.Skipped
		// A short batch means the backlog is done; skipped keys (runs
		// Temporal could not describe) would come back first in the next
		// batch, so the pass ends and the next one tries again.
		if out.Selected < in.BatchSize || out.Skipped > 0 {
			break
		}
	}
	workflow.GetLogger(ctx).Info("expiry watchdog pass done", "batches", res.Batches, "selected", res.Totals.Selected,
		"pruned", res.Totals.Pruned, "held", res.Totals.Held, "pruned_alive", res.Totals.PrunedAlive, "alerts", res.Totals.Alerts)
	return res, nil
}
