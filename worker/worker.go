package worker

import (
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/workflows"
)

// NewWorker returns a Temporal worker on taskQueue with oncerun's workflow
// and acts registered. The caller starts and stops it.
func NewWorker(c client.Client, taskQueue string, acts *activities.Activities, opts sdkworker.Options) sdkworker.Worker {
	if taskQueue == "" {
		taskQueue = workflows.DefaultTaskQueue
	}
	w := sdkworker.New(c, taskQueue, opts)
	w.RegisterWorkflow(workflows.AgentRun)
	w.RegisterWorkflow(workflows.Watchdog)
	RegisterReconcile(w)
	w.RegisterActivity(acts)
	return w
}
