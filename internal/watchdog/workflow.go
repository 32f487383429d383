package watchdog

import (
	"cmp"
	"math"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/schedule"
)

// The names under which the watchdog's workflow and activity are
// registered. They are in recorded histories and running passes: they
// never change, whatever the Go functions are called.
const (
	WorkflowName      = "Watchdog"
	PruneActivityName = "PruneExpired"
)

// Register registers [Workflow] as [WorkflowName] and acts' PruneExpired as
// [PruneActivityName] on r.
func Register(r schedule.Registry, acts *Activities) {
	r.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowName})
	r.RegisterActivityWithOptions(acts.PruneExpired, activity.RegisterOptions{Name: PruneActivityName})
}

// Input configures one pass. Zero fields take [Config]'s defaults.
type Input struct {
	// Policy is what happens to an expired key whose run is open:
	// PolicyHold or PolicyPrune.
	Policy string `json:"policy,omitempty"`
	// BatchSize bounds the keys locked by one activity.
	BatchSize int `json:"batch_size,omitempty"`
	// MaxBatches bounds one pass; the next scheduled pass goes on.
	MaxBatches int `json:"max_batches,omitempty"`
	// DutyCycle is the share of a pass's time its batches may keep the
	// database busy, in (0, 1]: after a batch that took t there, the pass
	// waits t·(1−DutyCycle)/DutyCycle before the next one. 1 never waits.
	DutyCycle float64 `json:"duty_cycle,omitempty"`
}

// Pause is how long a pass waits after a batch that kept the database busy
// for dbTime, so that its batches take at most the DutyCycle share of the
// pass's time.
func (in Input) Pause(dbTime time.Duration) time.Duration {
	d := in.DutyCycle
	if d <= 0 {
		d = DefaultDutyCycle
	}
	if d >= 1 {
		return 0
	}
	return time.Duration(math.Round(float64(dbTime) * (1 - d) / d))
}

// pauseChange versions the pause between batches: passes begun before it
// run their batches back to back, even when their batches reported a
// database time (new activity workers beside old workflow workers during a
// deploy).
const pauseChange = "watchdog-pause"

// Result sums one pass.
type Result struct {
	Cutoff  time.Time   `json:"cutoff"`
	Batches int         `json:"batches"`
	Totals  PruneOutput `json:"totals"`
	// Paused is the time the pass waited between batches.
	Paused time.Duration `json:"paused,omitempty"`
}

// Workflow is one pass of the watchdog. It prunes the keys that expired
// before the pass began, in batches, oldest first, until a batch comes back
// short or MaxBatches is reached. Between batches it waits on a timer sized
// from the last batch's database time ([Input.Pause]), so that pruning a
// backlog leaves the database to the runs' claims most of the time. The
// cutoff is the workflow's clock, so a pass is deterministic on replay.
func Workflow(ctx workflow.Context, in Input) (Result, error) {
	in.Policy = cmp.Or(in.Policy, DefaultPolicy)
	in.BatchSize = cmp.Or(in.BatchSize, DefaultBatchSize)
	in.MaxBatches = cmp.Or(in.MaxBatches, DefaultMaxBatches)
	res := Result{Cutoff: workflow.Now(ctx)}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute, MaximumAttempts: 10,
			NonRetryableErrorTypes: []string{activities.ErrTypeInvalidArgs},
		},
	})
	for res.Batches < in.MaxBatches {
		var out PruneOutput
		err := workflow.ExecuteActivity(actx, PruneActivityName, PruneInput{
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
		if workflow.GetVersion(ctx, pauseChange, workflow.DefaultVersion, 1) == 1 {
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
