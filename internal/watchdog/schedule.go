package watchdog

import (
	"context"

	"go.temporal.io/sdk/client"

	"github.com/oncerun/oncerun/internal/schedule"
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
	return schedule.Ensure(ctx, c, cfg.ScheduleID, cfg.Interval, &client.ScheduleWorkflowAction{
		ID:        cfg.ScheduleID,
		Workflow:  WorkflowName,
		Args:      []any{cfg.input()},
		TaskQueue: taskQueue,
	})
}
