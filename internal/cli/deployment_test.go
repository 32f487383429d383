package cli

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	deploymentpb "go.temporal.io/api/deployment/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"
	sdkworker "go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/oncerun/oncerun/internal/deployment"
	"github.com/oncerun/oncerun/internal/settings"
)

// fakeHandle is the SDK's mock of a deployment's handle, with the method
// the mock lacks.
type fakeHandle struct{ mocks.WorkerDeploymentHandle }

func (*fakeHandle) SetManagerIdentity(context.Context, client.WorkerDeploymentSetManagerIdentityOptions) (client.WorkerDeploymentSetManagerIdentityResponse, error) {
	panic("not used by oncerun")
}

// deploymentWorld is a Temporal client whose deployment "shop" has the
// versions v41 (current) and v42, each polled by one worker on queue
// oncerun.
type deploymentWorld struct {
	tc     *mocks.Client
	handle *fakeHandle
	env    Env
}

func newDeploymentWorld(t *testing.T) *deploymentWorld {
	t.Helper()
	w := &deploymentWorld{tc: &mocks.Client{}, handle: &fakeHandle{}}
	wdc := &mocks.WorkerDeploymentClient{}
	w.tc.On("WorkerDeploymentClient").Return(wdc).Maybe()
	wdc.On("GetHandle", "shop").Return(w.handle).Maybe()
	wdc.On("GetHandle", mock.Anything).Return(func() client.WorkerDeploymentHandle {
		h := &fakeHandle{}
		h.On("Describe", mock.Anything, mock.Anything).Return(client.WorkerDeploymentDescribeResponse{},
			serviceerror.NewNotFound("worker deployment not found"))
		return h
	}()).Maybe()
	at := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	v41 := sdkworker.WorkerDeploymentVersion{DeploymentName: "shop", BuildID: "v41"}
	w.handle.On("Describe", mock.Anything, mock.Anything).Return(client.WorkerDeploymentDescribeResponse{
		ConflictToken: []byte("token"),
		Info: client.WorkerDeploymentInfo{Name: "shop", RoutingConfig: client.WorkerDeploymentRoutingConfig{CurrentVersion: &v41},
			VersionSummaries: []client.WorkerDeploymentVersionSummary{
				{Version: sdkworker.WorkerDeploymentVersion{DeploymentName: "shop", BuildID: "v42"}, CreateTime: at.Add(time.Hour),
					DrainageStatus: client.WorkerDeploymentVersionDrainageStatusUnspecified},
				{Version: v41, CreateTime: at},
			}},
	}, nil).Maybe()
	for _, build := range []string{"v41", "v42"} {
		w.handle.On("DescribeVersion", mock.Anything, client.WorkerDeploymentDescribeVersionOptions{BuildID: build}).Return(
			client.WorkerDeploymentVersionDescription{Info: client.WorkerDeploymentVersionInfo{TaskQueuesInfos: []client.WorkerDeploymentTaskQueueInfo{
				{Name: "oncerun", Type: client.TaskQueueTypeWorkflow}, {Name: "oncerun", Type: client.TaskQueueTypeActivity}}}}, nil).Maybe()
	}
	poller := func(id, build string) *taskqueuepb.PollerInfo {
		return &taskqueuepb.PollerInfo{Identity: id, LastAccessTime: timestamppb.New(at),
			DeploymentOptions: &deploymentpb.WorkerDeploymentOptions{DeploymentName: "shop", BuildId: build}}
	}
	w.tc.On("DescribeTaskQueue", mock.Anything, "oncerun", enumspb.TASK_QUEUE_TYPE_WORKFLOW).Return(
		&workflowservice.DescribeTaskQueueResponse{Pollers: []*taskqueuepb.PollerInfo{poller("1@a@9e0d1c2b3a4f", "v41")}}, nil).Maybe()
	// The other partitions: v42's worker polled the second one.
	w.tc.On("DescribeTaskQueue", mock.Anything, "/_sys/oncerun/1", enumspb.TASK_QUEUE_TYPE_WORKFLOW).Return(
		&workflowservice.DescribeTaskQueueResponse{Pollers: []*taskqueuepb.PollerInfo{poller("2@b@51c0e2a8b7d3", "v42"), poller("1@a@9e0d1c2b3a4f", "v41")}}, nil).Maybe()
	w.tc.On("DescribeTaskQueue", mock.Anything, mock.Anything, enumspb.TASK_QUEUE_TYPE_WORKFLOW).Return(
		&workflowservice.DescribeTaskQueueResponse{}, nil).Maybe()
	w.env = Env{Temporal: w.tc, Getenv: func(name string) string {
		if name == settings.EnvDeploymentName {
			return "shop"
		}
		return ""
	}}
	return w
}

func TestDeploymentDescribe(t *testing.T) {
	t.Parallel()
	w := newDeploymentWorld(t)
	out, err := run(t, w.env, "deployment", "describe", "--json")
	require.NoError(t, err, out)
	var d deployment.Description
	require.NoError(t, json.Unmarshal([]byte(out), &d), out)
	assert.Equal(t, "shop", d.Name)
	assert.Equal(t, "v41", d.CurrentBuildID)
	require.Equal(t, []string{"v41", "v42"}, d.BuildIDs(), "oldest first")
	assert.True(t, d.Versions[0].Current)
	assert.False(t, d.Versions[1].Current)
	assert.Equal(t, []string{"oncerun"}, d.Versions[1].TaskQueues, "the workflow task queues")
	require.Len(t, d.Versions[0].Pollers, 1, "one entry per worker, whichever partitions it polled")
	assert.Equal(t, "1@a@9e0d1c2b3a4f", d.Versions[0].Pollers[0].Identity)
	assert.Equal(t, "9e0d1c2b3a4f", d.Versions[0].Pollers[0].RegistryDigest)
	require.Len(t, d.Versions[1].Pollers, 1, "a poller of another partition is found")
	assert.Equal(t, "51c0e2a8b7d3", d.Versions[1].Pollers[0].RegistryDigest)
	assert.Contains(t, out, `"current_build_id": "v41"`)

	out, err = run(t, w.env, "deployment", "describe")
	require.NoError(t, err, out)
	assert.Contains(t, out, "deployment shop: current v41\n")
	assert.Regexp(t, `(?m)^v41\s+current\s+-\s+2026-05-01 09:00:00Z\s+oncerun\s+1@a@9e0d1c2b3a4f$`, out)
	assert.Regexp(t, `(?m)^v42\s+-\s+-\s+`, out)
}

func TestDeploymentCommandsNameWhatIsWrong(t *testing.T) {
	t.Parallel()
	w := newDeploymentWorld(t)
	for name, c := range map[string]struct {
		env  Env
		args []string
		want []string
	}{
		"no deployment name": {Env{Temporal: w.tc}, []string{"deployment", "describe"},
			[]string{"no deployment name", "--name", settings.EnvDeploymentName}},
		"a deployment Temporal does not know": {w.env, []string{"deployment", "describe", "--name", "shopp"},
			[]string{"deployment does not exist", `"shopp"`, settings.EnvDeploymentName}},
		"an unknown build ID": {w.env, []string{"deployment", "set-current", "v99"},
			[]string{"unknown build ID", `"v99" is not a version of deployment shop (its versions: v41, v42)`, "TEMPORAL_WORKER_BUILD_ID=v99"}},
		"a ramp to an unknown build ID": {w.env, []string{"deployment", "ramp", "v99", "--percent", "10"},
			[]string{`"v99" is not a version of deployment shop`}},
		"a ramp beyond 100%": {w.env, []string{"deployment", "ramp", "v42", "--percent", "120"},
			[]string{"--percent 120", "0 to 100"}},
		"a pin to an unknown build ID": {w.env, []string{"deployment", "pin", "r1", "--tenant", "acme", "--build-id", "v99"},
			[]string{"run r1 of tenant acme", `"v99" is not a version of deployment shop`}},
		"a pin without a tenant": {w.env, []string{"deployment", "pin", "r1", "--build-id", "v41"},
			[]string{"--tenant"}},
		"a pin without a build": {w.env, []string{"deployment", "pin", "r1", "--tenant", "acme"},
			[]string{"--build-id"}},
		"a pin without a deployment": {Env{Temporal: w.tc}, []string{"deployment", "pin", "r1", "--tenant", "acme", "--build-id", "v41"},
			[]string{"no deployment name"}},
	} {
		out, err := run(t, c.env, c.args...)
		require.Error(t, err, name)
		for _, want := range c.want {
			assert.Contains(t, err.Error()+out, want, name)
		}
	}
	w.handle.AssertNotCalled(t, "SetCurrentVersion", mock.Anything, mock.Anything)
	w.handle.AssertNotCalled(t, "SetRampingVersion", mock.Anything, mock.Anything)
	w.tc.AssertNotCalled(t, "UpdateWorkflowExecutionOptions", mock.Anything, mock.Anything)
}

func TestDeploymentSetCurrentAndRamp(t *testing.T) {
	t.Parallel()
	w := newDeploymentWorld(t)
	w.handle.On("SetCurrentVersion", mock.Anything, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: "v42", ConflictToken: []byte("token")}).
		Return(client.WorkerDeploymentSetCurrentVersionResponse{}, nil).Once()
	out, err := run(t, w.env, "deployment", "set-current", "v42")
	require.NoError(t, err, out)
	assert.Equal(t, "deployment shop: v42 is current (was v41): new runs start on it, auto-upgrade runs move to it at their next workflow task\n", out)

	w.handle.On("SetRampingVersion", mock.Anything, client.WorkerDeploymentSetRampingVersionOptions{BuildID: "v42", Percentage: 10, ConflictToken: []byte("token")}).
		Return(client.WorkerDeploymentSetRampingVersionResponse{}, nil).Once()
	out, err = run(t, w.env, "deployment", "ramp", "v42", "--percent", "10")
	require.NoError(t, err, out)
	assert.Equal(t, "deployment shop: v42 ramps at 10%\n", out)
	w.handle.AssertExpectations(t)
}

func TestDeploymentPinAndUnpin(t *testing.T) {
	t.Parallel()
	w := newDeploymentWorld(t)
	pinned := func(r client.UpdateWorkflowExecutionOptionsRequest) bool {
		o, ok := r.WorkflowExecutionOptionsChanges.VersioningOverride.Value.(*client.PinnedVersioningOverride)
		return r.WorkflowId == "oncerun/acme/r1" && ok &&
			o.Version == sdkworker.WorkerDeploymentVersion{DeploymentName: "shop", BuildID: "v41"}
	}
	w.tc.On("UpdateWorkflowExecutionOptions", mock.Anything, mock.MatchedBy(pinned)).Return(client.WorkflowExecutionOptions{}, nil).Once()
	out, err := run(t, w.env, "deployment", "pin", "r1", "--tenant", "acme", "--build-id", "v41")
	require.NoError(t, err, out)
	assert.Equal(t, "run r1 of tenant acme is pinned to build v41 of deployment shop until it ends or is unpinned\n", out)

	unpinned := func(r client.UpdateWorkflowExecutionOptionsRequest) bool {
		c := r.WorkflowExecutionOptionsChanges.VersioningOverride
		return r.WorkflowId == "oncerun/acme/r1" && c != nil && c.Value == nil
	}
	w.tc.On("UpdateWorkflowExecutionOptions", mock.Anything, mock.MatchedBy(unpinned)).Return(client.WorkflowExecutionOptions{}, nil).Once()
	out, err = run(t, Env{Temporal: w.tc}, "deployment", "unpin", "--run-id", "r1", "--tenant", "acme")
	require.NoError(t, err, out, "unpin needs no deployment name")
	assert.Equal(t, "run r1 of tenant acme is unpinned: it follows its versioning behaviour again\n", out)

	w.tc.On("UpdateWorkflowExecutionOptions", mock.Anything, mock.Anything).Return(client.WorkflowExecutionOptions{},
		serviceerror.NewNotFound("workflow not found for ID: oncerun/acme/r2")).Once()
	_, err = run(t, w.env, "deployment", "unpin", "r2", "--tenant", "acme")
	require.ErrorIs(t, err, deployment.ErrNoRun)
	assert.ErrorContains(t, err, "run r2 of tenant acme: no open run")
	w.tc.AssertExpectations(t)
}
