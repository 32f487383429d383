package worker

import (
	"cmp"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/reconcile"
	"github.com/oncerun/oncerun/internal/schedule"
	"github.com/oncerun/oncerun/internal/watchdog"
	"github.com/oncerun/oncerun/workflows"
)

// NewWorker returns a Temporal worker on taskQueue with oncerun's workflows
// and acts registered, the expiry watchdog's workflow and activity with wd,
// and reconciliation's with rc (none when wd or rc is nil: another worker
// on the queue must run them). The caller starts and stops it.
//
// When opts.DeploymentOptions.UseVersioning is set (a versioned worker,
// see [Versioning]), AgentRun is registered with
// opts.DeploymentOptions.DefaultVersioningBehavior (AutoUpgrade when it is
// unspecified) and the watchdog's and reconciliation's workflows as
// Pinned; an unversioned worker registers them with no behaviour.
func NewWorker(c client.Client, taskQueue string, acts *activities.Activities, wd *WatchdogActivities, rc *ReconcileActivities,
	opts sdkworker.Options) sdkworker.Worker {
	if taskQueue == "" {
		taskQueue = workflows.DefaultTaskQueue
	}
	w := sdkworker.New(c, taskQueue, opts)
	register(w, opts.DeploymentOptions, acts, wd, rc)
	return w
}

// registrar is what registering oncerun's workflows and activities needs
// of a Temporal worker.
type registrar interface {
	schedule.Registry
	RegisterWorkflow(w any)
	RegisterActivity(a any)
}

// register registers oncerun's workflows and activities with r, each
// workflow with its versioning behaviour when d versions the worker.
func register(r registrar, d sdkworker.DeploymentOptions, acts *activities.Activities, wd *WatchdogActivities, rc *ReconcileActivities) {
	passes := schedule.Registry(r)
	if d.UseVersioning {
		r.RegisterWorkflowWithOptions(workflows.AgentRun, workflow.RegisterOptions{
			VersioningBehavior: cmp.Or(d.DefaultVersioningBehavior, workflow.VersioningBehaviorAutoUpgrade),
		})
		passes = pinnedRegistry{r}
	} else {
		r.RegisterWorkflow(workflows.AgentRun)
	}
	if wd != nil {
		watchdog.Register(passes, wd)
	}
	if rc != nil {
		reconcile.Register(passes, rc)
	}
	r.RegisterActivity(acts)
}
