package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/workflows"
)

// WatchdogConfig configures the expiry watchdog's schedule.
type WatchdogConfig struct {
	// Interval between passes. Default 5 minutes (WATCHDOG_INTERVAL).
	Interval time.Duration
	// Policy for expired keys of open runs: hold (default) or prune
	// (EXPIRY_POLICY).
	Policy string
	// BatchSize bounds the keys one activity locks. Default 250
	// (WATCHDOG_BATCH_SIZE).
	BatchSize int
	// DutyCycle is the share of a pass's time its batches may keep the
	// database busy, in (0, 1]; 1 runs them back to back. Default
	// workflows.DefaultWatchdogDutyCycle (WATCHDOG_DUTY_CYCLE).
	DutyCycle float64
	// ScheduleID names the schedule. Default workflows.WatchdogScheduleID;
	// deployments sharing a namespace need one each.
	ScheduleID string
}

// EnsureWatchdogSchedule creates the watchdog's Temporal Schedule, or
// updates it to cfg if it exists: every worker calls it at start, and the
// schedule, with overlap policy SKIP, runs one pass at a time however many
// workers there are.
func EnsureWatchdogSchedule(ctx context.Context, c client.Client, taskQueue string, cfg WatchdogConfig) error {
	id := cmp.Or(cfg.ScheduleID, workflows.WatchdogScheduleID)
	interval := cfg.Interval
	if interval <= 0 {
		interval = 5 * time.Minute
	}
	action := &client.ScheduleWorkflowAction{
		ID:       id,
		Workflow: workflows.Watchdog,
		// Every field set here, not defaulted in the workflow: a pass in
		// flight during a deploy that changes a default must replay as it
		// began.
		Args: []any{workflows.WatchdogInput{
			Policy:     cmp.Or(cfg.Policy, activities.PolicyHold),
			BatchSize:  cmp.Or(cfg.BatchSize, workflows.DefaultWatchdogBatch),
			MaxBatches: workflows.DefaultWatchdogMaxBatches,
			DutyCycle:  cmp.Or(cfg.DutyCycle, workflows.DefaultWatchdogDutyCycle),
		}},
		TaskQueue: taskQueue,
	}
	spec := client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: interval}}}
	_, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID: id, Spec: spec, Action: action,
	})
	if err == nil {
		return nil
	}
	if !errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return fmt.Errorf("create schedule %s: %w", id, err)
	}
	h := c.ScheduleClient().GetHandle(ctx, id)
	err = h.Update(ctx, client.ScheduleUpdateOptions{DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
		s := in.Description.Schedule
		s.Spec = &spec
		s.Action = action
		return &client.ScheduleUpdate{Schedule: &s}, nil
	}})
	if err != nil {
		return fmt.Errorf("update schedule %s: %w", id, err)
	}
	return nil
}
