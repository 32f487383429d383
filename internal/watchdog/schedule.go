package watchdog

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// EnsureSchedule creates the watchdog's Temporal Schedule, or updates it to
// cfg if it exists: every worker calls it at start, and the schedule, with
// overlap policy SKIP, runs one pass at a time however many workers there
// are. Each pass runs on taskQueue with every field of its [Input] set.
func EnsureSchedule(ctx context.Context, c client.Client, taskQueue string, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.WithDefaults()
	id := cfg.ScheduleID
	action := &client.ScheduleWorkflowAction{
		ID:        id,
		Workflow:  WorkflowName,
		Args:      []any{cfg.input()},
		TaskQueue: taskQueue,
	}
	spec := client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: cfg.Interval}}}
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
