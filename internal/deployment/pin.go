package deployment

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
)

// ErrNoRun reports a run with no open workflow execution.
var ErrNoRun = errors.New("no open run")

// Pin sets a pinned versioning override on the workflow workflowID: its
// workflow tasks go to the workers of version (name, buildID) until it
// ends or [Unpin], whatever is current. A build ID the deployment does
// not have is an error wrapping [ErrUnknownBuildID]; a workflow that is
// not open one wrapping [ErrNoRun].
func Pin(ctx context.Context, tc client.Client, workflowID, name, buildID string) error {
	d, _, err := describe(ctx, tc, name)
	if err != nil {
		return err
	}
	if !d.Has(buildID) {
		return unknownBuildID(d, buildID)
	}
	override := &client.PinnedVersioningOverride{Version: sdkworker.WorkerDeploymentVersion{DeploymentName: name, BuildID: buildID}}
	return setOverride(ctx, tc, workflowID, override)
}

// Unpin removes the workflow's versioning override: it follows its own
// behaviour again (an auto-upgrade run moves to the current version at its
// next workflow task).
func Unpin(ctx context.Context, tc client.Client, workflowID string) error {
	return setOverride(ctx, tc, workflowID, nil)
}

func setOverride(ctx context.Context, tc client.Client, workflowID string, o client.VersioningOverride) error {
	_, err := tc.UpdateWorkflowExecutionOptions(ctx, client.UpdateWorkflowExecutionOptionsRequest{
		WorkflowId: workflowID,
		WorkflowExecutionOptionsChanges: client.WorkflowExecutionOptionsChanges{
			VersioningOverride: &client.VersioningOverrideChange{Value: o},
		},
	})
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return fmt.Errorf("%w: %s", ErrNoRun, nf.Message)
	case err != nil:
		return fmt.Errorf("update the run's versioning override: %w", err)
	}
	return nil
}
