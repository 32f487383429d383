package worker

import (
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/reconcile"
	"github.com/oncerun/oncerun/internal/watchdog"
	"github.com/oncerun/oncerun/workflows"
)

// NewWorker returns a Temporal worker on taskQueue with oncerun's workflows
// and acts registered, the expiry watchdog's workflow and activity with wd,
// and reconciliation's with rc (none when wd or rc is nil: another worker
// on the queue must run them). The caller starts and stops it.
func NewWorker(c client.Client, taskQueue string, acts *activities.Activities, wd *WatchdogActivities, rc *ReconcileActivities,
	opts sdkworker.Options) sdkworker.Worker {
	if taskQueue == "" {
		taskQueue = workflows.DefaultTaskQueue
	}
	w := sdkworker.New(c, taskQueue, opts)
	w.RegisterWorkflow(workflows.AgentRun)
	if wd != nil {
		watchdog.Register(w, wd)
	}
	if rc != nil {
		reconcile.Register(w, rc)
	}
	w.RegisterActivity(acts)
	return w
}
