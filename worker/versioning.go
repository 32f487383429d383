package worker

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/deployment"
	"github.com/oncerun/oncerun/internal/schedule"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/tools"
)

// The spellings of ONCERUN_VERSIONING_BEHAVIOR.
const (
	behaviorAutoUpgrade = "auto-upgrade"
	behaviorPinned      = "pinned"
)

// maxVersionField bounds a deployment name and a build ID: Temporal takes
// longer ones, but not in every version, and no deploy needs them.
const maxVersionField = 255

// Versioning places a worker in a Temporal Worker Deployment (Worker
// Versioning), so that a deploy starts new workers beside the old ones and
// moves the runs over when an operator says so (`oncerun deployment
// set-current`), instead of every worker of a task queue having to run one
// build. The zero value is an unversioned worker, as before: its task
// queue's every worker takes every task.
type Versioning struct {
	// DeploymentName is the Worker Deployment the worker is a version of.
	// Set, the worker is versioned: it polls as the version (DeploymentName,
	// BuildID), and Temporal sends new runs to the deployment's current
	// version. Empty: unversioned (TEMPORAL_DEPLOYMENT_NAME).
	DeploymentName string
	// BuildID names the worker's version within the deployment. Default,
	// for a versioned worker: the first 8 hex characters of the SHA-256 of
	// the worker's executable, a dot, and the first 12 of its registry
	// digest (b3f1a2c4.9e0d1c2b3a4f), so that a new build or a change of
	// the tools it offers is a new version (TEMPORAL_WORKER_BUILD_ID).
	BuildID string
	// Behavior is AgentRun's versioning behaviour.
	// workflow.VersioningBehaviorAutoUpgrade, the default, moves a run to
	// the current version at its next workflow task; Pinned keeps a run on
	// the version it started on until it ends. The expiry watchdog's and
	// reconciliation's passes are short and always Pinned
	// (ONCERUN_VERSIONING_BEHAVIOR: auto-upgrade or pinned).
	Behavior workflow.VersioningBehavior
}

// Enabled reports whether the worker is versioned.
func (v Versioning) Enabled() bool { return v.DeploymentName != "" }

// validate refuses what Temporal would refuse, and a build ID or a
// behaviour without a deployment, naming the variable.
func (v Versioning) validate() error {
	if !v.Enabled() {
		switch {
		case v.BuildID != "":
			return fmt.Errorf("%s %q is set without %s: a build ID names a version of a Worker Deployment; set both, or neither for an unversioned worker",
				settings.EnvWorkerBuildID, v.BuildID, settings.EnvDeploymentName)
		case v.Behavior != workflow.VersioningBehaviorUnspecified:
			return fmt.Errorf("%s is set without %s: a versioning behaviour applies to a versioned worker only; set both, or neither",
				settings.EnvVersioningBehavior, settings.EnvDeploymentName)
		}
		return nil
	}
	name := v.DeploymentName
	switch {
	case strings.ContainsAny(name, ".:"):
		return fmt.Errorf("%s %q: a deployment name may not contain '.' or ':'", settings.EnvDeploymentName, name)
	case strings.HasPrefix(name, "__"):
		return fmt.Errorf("%s %q: a deployment name may not start with '__'", settings.EnvDeploymentName, name)
	case len(name) > maxVersionField || strings.TrimSpace(name) != name:
		return fmt.Errorf("%s %q: give at most %d characters, without leading or trailing spaces", settings.EnvDeploymentName, name, maxVersionField)
	case strings.HasPrefix(v.BuildID, "__"):
		return fmt.Errorf("%s %q: a build ID may not start with '__'", settings.EnvWorkerBuildID, v.BuildID)
	case len(v.BuildID) > maxVersionField || strings.TrimSpace(v.BuildID) != v.BuildID:
		return fmt.Errorf("%s %q: give at most %d characters, without leading or trailing spaces", settings.EnvWorkerBuildID, v.BuildID, maxVersionField)
	}
	switch v.Behavior {
	case workflow.VersioningBehaviorUnspecified, workflow.VersioningBehaviorAutoUpgrade, workflow.VersioningBehaviorPinned:
		return nil
	}
	return fmt.Errorf("%s: unknown versioning behaviour %d", settings.EnvVersioningBehavior, v.Behavior)
}

// versioningFromEnv reads the versioning variables.
func versioningFromEnv(getenv func(string) string) (Versioning, error) {
	v := Versioning{DeploymentName: getenv(settings.EnvDeploymentName), BuildID: getenv(settings.EnvWorkerBuildID)}
	if s := getenv(settings.EnvVersioningBehavior); s != "" {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case behaviorAutoUpgrade:
			v.Behavior = workflow.VersioningBehaviorAutoUpgrade
		case behaviorPinned:
			v.Behavior = workflow.VersioningBehaviorPinned
		default:
			return Versioning{}, fmt.Errorf("%s %q is neither %s nor %s", settings.EnvVersioningBehavior, s, behaviorAutoUpgrade, behaviorPinned)
		}
	}
	if err := v.validate(); err != nil {
		return Versioning{}, err
	}
	return v, nil
}

// behaviorName spells a versioning behaviour as ONCERUN_VERSIONING_BEHAVIOR
// and the logs do: auto-upgrade or pinned ("" when unspecified).
func behaviorName(b workflow.VersioningBehavior) string {
	switch b {
	case workflow.VersioningBehaviorAutoUpgrade:
		return behaviorAutoUpgrade
	case workflow.VersioningBehaviorPinned:
		return behaviorPinned
	}
	return ""
}

// resolve returns v with its defaults, for a worker whose registry has
// digest d: AutoUpgrade, and the build ID of this executable and d. An
// unversioned v is returned as it is.
func (v Versioning) resolve(d tools.Digest) (Versioning, error) {
	if !v.Enabled() {
		return v, nil
	}
	v.Behavior = cmp.Or(v.Behavior, workflow.VersioningBehaviorAutoUpgrade)
	if v.BuildID == "" {
		exe, err := executableDigest()
		if err != nil {
			return Versioning{}, fmt.Errorf("build ID of this worker from its executable: %w; set %s", err, settings.EnvWorkerBuildID)
		}
		v.BuildID = defaultBuildID(exe, d)
	}
	return v, nil
}

// defaultBuildID is the build ID of a worker whose executable's SHA-256
// is exe (hex) and whose registry's digest is d: exe's first 8 hex
// characters, a dot, and d's first 12.
func defaultBuildID(exe string, d tools.Digest) string {
	return exe[:min(8, len(exe))] + "." + d.Short()
}

// executableDigest is the SHA-256 of the running program's file, in hex.
func executableDigest() (string, error) {
	path, err := os.Executable()
	if err != nil {
		return "", err
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// deploymentOptions are the SDK's options of a worker versioned by v
// (resolved), or none.
func (v Versioning) deploymentOptions() sdkworker.DeploymentOptions {
	if !v.Enabled() {
		return sdkworker.DeploymentOptions{}
	}
	return sdkworker.DeploymentOptions{
		UseVersioning:             true,
		Version:                   sdkworker.WorkerDeploymentVersion{DeploymentName: v.DeploymentName, BuildID: v.BuildID},
		DefaultVersioningBehavior: v.Behavior,
	}
}

// pinnedRegistry registers every workflow as Pinned: the watchdog's and
// reconciliation's passes are short, and a pass that began on one version
// ends on it, whatever becomes current meanwhile.
type pinnedRegistry struct{ schedule.Registry }

// RegisterWorkflowWithOptions registers w as Pinned.
func (r pinnedRegistry) RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions) {
	options.VersioningBehavior = workflow.VersioningBehaviorPinned
	r.Registry.RegisterWorkflowWithOptions(w, options)
}

// pollersWait bounds asking Temporal for the task queue's pollers at start.
const pollersWait = 10 * time.Second

// checkPollers asks Temporal for the pollers of the task queue's workflow
// tasks and warns of each other one whose identity carries another
// registry digest than d (ours). A worker with another registry is what a
// rolling deploy looks like, and no run depends on the workers' registries
// agreeing (docs/agent-runs.md, "Step identity"); the warning is for the
// deploy that was not meant to be one. A failure to ask is logged at debug.
func checkPollers(ctx context.Context, tc client.Client, queue, identity string, d tools.Digest, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(ctx, pollersWait)
	defer cancel()
	pollers, err := deployment.Pollers(ctx, tc, queue)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			log.Debug("could not ask Temporal for the task queue's pollers to compare registries", zap.String("task_queue", queue), zap.Error(err))
		}
		return
	}
	ours := d.Short()
	for _, p := range pollers {
		other := deployment.DigestOfIdentity(p.GetIdentity())
		if p.GetIdentity() == identity || other == "" || other == ours {
			continue
		}
		log.Warn(fmt.Sprintf("workers of task queue %s offer different tool registries: ours %s, %s %s; runs do not depend on it (docs/agent-runs.md, Step identity), but check the deploy",
			queue, ours, p.GetIdentity(), other),
			zap.String("task_queue", queue), zap.String("registry_digest", ours),
			zap.String("poller_identity", p.GetIdentity()), zap.String("poller_registry_digest", other),
			zap.String("poller_build_id", p.GetDeploymentOptions().GetBuildId()))
	}
}
