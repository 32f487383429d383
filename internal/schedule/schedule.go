// Package schedule keeps the cluster-wide Temporal Schedules a worker
// owns (the expiry watchdog's, reconciliation's) as its configuration says:
// every worker calls [Ensure] at start, and whichever runs first creates
// the schedule; the others bring it up to date.
package schedule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Registry is what a scheduled job's Register registers its workflow and
// activity on: a Temporal worker, or a test environment.
type Registry interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
	RegisterActivityWithOptions(a any, options activity.RegisterOptions)
}

// Ensure creates the Schedule id that starts action every interval, or
// updates it to them if it exists. Temporal's default overlap policy, SKIP,
// runs one at a time however many workers there are.
func Ensure(ctx context.Context, c client.Client, id string, every time.Duration, action *client.ScheduleWorkflowAction) error {
	spec := client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: every}}}
	_, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{ID: id, Spec: spec, Action: action})
	if err == nil {
		return nil
	}
	if !errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return fmt.Errorf("create schedule %s: %w", id, err)
	}
	err = c.ScheduleClient().GetHandle(ctx, id).Update(ctx, client.ScheduleUpdateOptions{
		DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
			s := in.Description.Schedule
			s.Spec = &spec
			s.Action = action
			return &client.ScheduleUpdate{Schedule: &s}, nil
		},
	})
	if err != nil {
		return fmt.Errorf("update schedule %s: %w", id, err)
	}
	return nil
}
