package deployment

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// ErrNoDeployment reports a deployment name Temporal does not know.
var ErrNoDeployment = errors.New("deployment does not exist")

// ErrUnknownBuildID reports a build ID that is not a version of the
// deployment.
var ErrUnknownBuildID = errors.New("unknown build ID")

// Drainage states of a version that is neither current nor ramping, as
// Temporal reports them (it checks every few minutes).
const (
	// Draining: open pinned runs still use the version; keep its workers.
	Draining = "draining"
	// Drained: no open run uses the version; its workers may stop (a query
	// of a closed run may still want one for a while).
	Drained = "drained"
)

// Description is a Worker Deployment as `oncerun deployment describe
// --json` prints it.
type Description struct {
	// Name is the deployment's name.
	Name string `json:"name"`
	// CurrentBuildID is the current version's build ID: the version that
	// gets new runs and the workflow tasks of auto-upgrade runs. Empty:
	// the task queues' unversioned workers get them.
	CurrentBuildID string `json:"current_build_id"`
	// RampingBuildID and RampingPercent are the version that gets
	// RampingPercent of what the current version would get. Both absent:
	// nothing ramps; a percent without a build ID ramps to unversioned
	// workers.
	RampingBuildID string  `json:"ramping_build_id,omitempty"`
	RampingPercent float32 `json:"ramping_percent,omitempty"`
	// Versions are the deployment's versions, oldest first.
	Versions []Version `json:"versions"`
}

// Version is one version of a deployment.
type Version struct {
	// BuildID names the version within its deployment.
	BuildID string `json:"build_id"`
	// Current and Ramping say whether the version is the current one or
	// the ramping one.
	Current bool `json:"current"`
	Ramping bool `json:"ramping"`
	// Drainage, for a version that is neither, is Draining or Drained;
	// absent until Temporal has checked.
	Drainage string `json:"drainage,omitempty"`
	// CreatedAt is when the version's first worker polled.
	CreatedAt time.Time `json:"created_at"`
	// TaskQueues are the workflow task queues its workers poll.
	TaskQueues []string `json:"task_queues,omitempty"`
	// Pollers are the workers of the version Temporal has seen poll those
	// queues in the last minutes (absent when Temporal could not say).
	Pollers []Poller `json:"pollers,omitempty"`
}

// Poller is one worker polling a task queue.
type Poller struct {
	// Identity is the worker's Temporal identity.
	Identity string `json:"identity"`
	// TaskQueue is the queue it polls.
	TaskQueue string `json:"task_queue"`
	// RegistryDigest is the short registry digest its identity carries
	// (an oncerun worker's, see [Identity]).
	RegistryDigest string `json:"registry_digest,omitempty"`
	// LastAccessAt is when it last polled.
	LastAccessAt time.Time `json:"last_access_at"`
}

// Has reports whether the deployment has a version buildID.
func (d Description) Has(buildID string) bool {
	return slices.ContainsFunc(d.Versions, func(v Version) bool { return v.BuildID == buildID })
}

// BuildIDs are the build IDs of the deployment's versions, oldest first.
func (d Description) BuildIDs() []string {
	ids := make([]string, len(d.Versions))
	for i, v := range d.Versions {
		ids[i] = v.BuildID
	}
	return ids
}

// Describe reads the deployment name: its versions, which is current and
// which ramps, each version's drainage, and, as far as Temporal can say,
// each version's task queues and pollers. A name Temporal does not know is
// an error wrapping [ErrNoDeployment].
func Describe(ctx context.Context, tc client.Client, name string) (Description, error) {
	d, _, err := describe(ctx, tc, name)
	if err != nil {
		return Description{}, err
	}
	h := tc.WorkerDeploymentClient().GetHandle(name)
	pollers := map[string][]queuePoller{} // by task queue, every version's
	for i := range d.Versions {
		v := &d.Versions[i]
		vd, err := h.DescribeVersion(ctx, client.WorkerDeploymentDescribeVersionOptions{BuildID: v.BuildID})
		if err != nil {
			continue // pollers "if available": the rest of the description stands
		}
		for _, q := range vd.Info.TaskQueuesInfos {
			if q.Type != client.TaskQueueTypeWorkflow {
				continue
			}
			v.TaskQueues = append(v.TaskQueues, q.Name)
			ps, ok := pollers[q.Name]
			if !ok {
				ps = queuePollers(ctx, tc, q.Name)
				pollers[q.Name] = ps
			}
			for _, p := range ps {
				if p.deployment == name && p.buildID == v.BuildID {
					v.Pollers = append(v.Pollers, p.Poller)
				}
			}
		}
		slices.Sort(v.TaskQueues)
	}
	return d, nil
}

// describe reads the deployment without its pollers, and returns the
// conflict token that serialises a change of it.
func describe(ctx context.Context, tc client.Client, name string) (Description, []byte, error) {
	resp, err := tc.WorkerDeploymentClient().GetHandle(name).Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return Description{}, nil, fmt.Errorf("%w: %q: no versioned worker has polled under that name (TEMPORAL_DEPLOYMENT_NAME) in this namespace", ErrNoDeployment, name)
		}
		return Description{}, nil, fmt.Errorf("describe deployment %s: %w", name, err)
	}
	info := resp.Info
	d := Description{Name: cmp.Or(info.Name, name), Versions: []Version{}}
	rc := info.RoutingConfig
	if rc.CurrentVersion != nil {
		d.CurrentBuildID = rc.CurrentVersion.BuildID
	}
	if rc.RampingVersion != nil {
		d.RampingBuildID = rc.RampingVersion.BuildID
	}
	if rc.RampingVersion != nil || rc.RampingVersionPercentage > 0 {
		d.RampingPercent = rc.RampingVersionPercentage
	}
	for _, s := range info.VersionSummaries {
		v := Version{BuildID: s.Version.BuildID, CreatedAt: s.CreateTime, Drainage: drainage(s.DrainageStatus)}
		v.Current = rc.CurrentVersion != nil && v.BuildID == d.CurrentBuildID
		v.Ramping = rc.RampingVersion != nil && v.BuildID == d.RampingBuildID
		if v.Current || v.Ramping {
			v.Drainage = ""
		}
		d.Versions = append(d.Versions, v)
	}
	slices.SortStableFunc(d.Versions, func(a, b Version) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.BuildID, b.BuildID))
	})
	return d, resp.ConflictToken, nil
}

func drainage(s client.WorkerDeploymentVersionDrainageStatus) string {
	switch s {
	case client.WorkerDeploymentVersionDrainageStatusDraining:
		return Draining
	case client.WorkerDeploymentVersionDrainageStatusDrained:
		return Drained
	}
	return ""
}

// queuePoller is a poller with the version it polls as.
type queuePoller struct {
	Poller
	deployment, buildID string
}

// queuePollers are the pollers Temporal has seen on the workflow task
// queue q ([Pollers]), or none when it cannot say.
func queuePollers(ctx context.Context, tc client.Client, q string) []queuePoller {
	ps, err := Pollers(ctx, tc, q)
	if err != nil {
		return nil
	}
	out := make([]queuePoller, 0, len(ps))
	for _, p := range ps {
		o := p.GetDeploymentOptions()
		out = append(out, queuePoller{
			Poller: Poller{Identity: p.GetIdentity(), TaskQueue: q, RegistryDigest: DigestOfIdentity(p.GetIdentity()),
				LastAccessAt: p.GetLastAccessTime().AsTime()},
			deployment: o.GetDeploymentName(), buildID: o.GetBuildId(),
		})
	}
	return out
}

// unknownBuildID is the error of a build ID d does not have.
func unknownBuildID(d Description, buildID string) error {
	versions := "none"
	if len(d.Versions) > 0 {
		versions = strings.Join(d.BuildIDs(), ", ")
	}
	return fmt.Errorf("%w: %q is not a version of deployment %s (its versions: %s); a worker of that build must poll first (TEMPORAL_DEPLOYMENT_NAME=%s TEMPORAL_WORKER_BUILD_ID=%s)",
		ErrUnknownBuildID, buildID, d.Name, versions, d.Name, buildID)
}

// SetCurrent makes buildID the deployment's current version: new runs
// start on it, and auto-upgrade runs move to it at their next workflow
// task; pinned runs stay where they are. It returns the deployment as it
// was. A build ID the deployment does not have is an error wrapping
// [ErrUnknownBuildID], naming the versions it has.
func SetCurrent(ctx context.Context, tc client.Client, name, buildID string) (Description, error) {
	d, token, err := describe(ctx, tc, name)
	if err != nil {
		return Description{}, err
	}
	if !d.Has(buildID) {
		return d, unknownBuildID(d, buildID)
	}
	_, err = tc.WorkerDeploymentClient().GetHandle(name).SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{
		BuildID: buildID, ConflictToken: token,
	})
	if err != nil {
		return d, fmt.Errorf("make %s the current version of deployment %s: %w", buildID, name, err)
	}
	return d, nil
}

// Ramp sends percent (0 to 100) of what the current version would get to
// buildID. It returns the deployment as it was; a build ID it does not
// have is an error wrapping [ErrUnknownBuildID].
func Ramp(ctx context.Context, tc client.Client, name, buildID string, percent float32) (Description, error) {
	if percent < 0 || percent > 100 {
		return Description{}, fmt.Errorf("a ramp of %g%%: give a percent from 0 to 100", percent)
	}
	d, token, err := describe(ctx, tc, name)
	if err != nil {
		return Description{}, err
	}
	if !d.Has(buildID) {
		return d, unknownBuildID(d, buildID)
	}
	_, err = tc.WorkerDeploymentClient().GetHandle(name).SetRampingVersion(ctx, client.WorkerDeploymentSetRampingVersionOptions{
		BuildID: buildID, Percentage: percent, ConflictToken: token,
	})
	if err != nil {
		return d, fmt.Errorf("ramp deployment %s to %s at %g%%: %w", name, buildID, percent, err)
	}
	return d, nil
}

// WaitForVersion waits until Temporal knows the version (name, buildID):
// a versioned worker's first poll registers it, a moment after the worker
// starts. It returns the last error when ctx ends first.
func WaitForVersion(ctx context.Context, tc client.Client, name, buildID string) error {
	h := tc.WorkerDeploymentClient().GetHandle(name)
	for {
		_, err := h.DescribeVersion(ctx, client.WorkerDeploymentDescribeVersionOptions{BuildID: buildID})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("version %s of deployment %s was not registered: %w", buildID, name, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
