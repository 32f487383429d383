package workflows

import (
	"cmp"
	"math"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
)

// Defaults of [WatchdogInput].
const (
	DefaultWatchdogBatch      = 250
	DefaultWatchdogMaxBatches = 100
	// DefaultWatchdogDutyCycle keeps claims' p99 within 2× of idle while
	// a backlog is pruned (docs/watchdog.md); a pass of MaxBatches still
	// ends within seconds.
	DefaultWatchdogDutyCycle = 0.05
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
	// DutyCycle is the share of a pass's time its batches may keep the
	// database busy, in (0, 1]: after a batch that took t there, the pass
	// waits t·(1−DutyCycle)/DutyCycle before the next one. 1 never waits.
	// Default DefaultWatchdogDutyCycle.
	DutyCycle float64 `json:"duty_cycle,omitempty"`
}

// Pause is how long a pass waits after a batch that kept the database busy
// for dbTime, so that its batches take at most the DutyCycle share of the
// pass's time.
func (in WatchdogInput) Pause(dbTime time.Duration) time.Duration {
	d := in.DutyCycle
	if d <= 0 {
		d = DefaultWatchdogDutyCycle
	}
	if d >= 1 {
		return 0
	}
	return time.Duration(math.Round(float64(dbTime) * (1 - d) / d))
}

// watchdogPauseChange versions the pause between batches: passes begun
// before it run their batches back to back, even when their batches
// reported a database time (new activity workers beside old workflow
// workers during a deploy).
const watchdogPauseChange = "watchdog-pause"

// WatchdogResult sums one pass.
type WatchdogResult struct {
	Cutoff  time.Time              `json:"cutoff"`
	Batches int                    `json:"batches"`
	Totals  activities.PruneOutput `json:"totals"`
	// Paused is the time the pass waited between batches.
	Paused time.Duration `json:"paused,omitempty"`
}

// Watchdog prunes the keys that expired before the pass began, in batches,
// oldest first, until a batch comes back short or MaxBatches is reached.
// Between batches it waits on a timer sized from the last batch's database
// time ([WatchdogInput.Pause]), so that pruning a backlog leaves the
// database to the runs' claims most of the time. The cutoff is the
// workflow's clock, so a pass is deterministic on replay.
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
		t.DBTime += out.DBTime
		// A short batch means the backlog is done; skipped keys (runs
		// Temporal could not describe) would come back first in the next
		// batch, so the pass ends and the next one tries again.
		if out.Selected < in.BatchSize || out.Skipped > 0 {
			break
		}
		// No pause after the pass's last batch: the next pass is an
		// interval away.
		if res.Batches == in.MaxBatches {
			break
		}
		if workflow.GetVersion(ctx, watchdogPauseChange, workflow.DefaultVersion, 1) == 1 {
			pause := in.Pause(out.DBTime)
			if err := workflow.Sleep(ctx, pause); err != nil {
				return res, err
			}
			res.Paused += pause
		}
	}
	workflow.GetLogger(ctx).Info("expiry watchdog pass done", "batches", res.Batches, "selected", res.Totals.Selected,
		"pruned", res.Totals.Pruned, "held", res.Totals.Held, "pruned_alive", res.Totals.PrunedAlive, "alerts", res.Totals.Alerts,
		"db_time", res.Totals.DBTime, "paused", res.Paused)
	return res, nil
}
