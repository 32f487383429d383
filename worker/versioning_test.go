package worker

import (
	"cmp"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/reconcile"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/watchdog"
	"github.com/oncerun/oncerun/tools"
)

func envOf(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

func TestVersioningFromEnv(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		vars map[string]string
		want Versioning
	}{
		"unversioned": {},
		"a deployment": {vars: map[string]string{settings.EnvDeploymentName: "shop"},
			want: Versioning{DeploymentName: "shop"}},
		"a build ID": {vars: map[string]string{settings.EnvDeploymentName: "shop", settings.EnvWorkerBuildID: "v42"},
			want: Versioning{DeploymentName: "shop", BuildID: "v42"}},
		"auto-upgrade": {vars: map[string]string{settings.EnvDeploymentName: "shop", settings.EnvVersioningBehavior: "auto-upgrade"},
			want: Versioning{DeploymentName: "shop", Behavior: workflow.VersioningBehaviorAutoUpgrade}},
		"pinned": {vars: map[string]string{settings.EnvDeploymentName: "shop", settings.EnvVersioningBehavior: " Pinned "},
			want: Versioning{DeploymentName: "shop", Behavior: workflow.VersioningBehaviorPinned}},
	} {
		got, _, err := ConfigFromEnv(envOf(c.vars))
		require.NoError(t, err, name)
		assert.Equal(t, c.want, got.Versioning, name)
	}
}

func TestVersioningFromEnvNamesTheBadVariable(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		vars map[string]string
		want []string
	}{
		"an unknown behaviour": {map[string]string{settings.EnvDeploymentName: "shop", settings.EnvVersioningBehavior: "sticky"},
			[]string{settings.EnvVersioningBehavior, `"sticky"`, "auto-upgrade", "pinned"}},
		"a build ID without a deployment": {map[string]string{settings.EnvWorkerBuildID: "v42"},
			[]string{settings.EnvWorkerBuildID, settings.EnvDeploymentName}},
		"a behaviour without a deployment": {map[string]string{settings.EnvVersioningBehavior: "pinned"},
			[]string{settings.EnvVersioningBehavior, settings.EnvDeploymentName}},
		"a dot in the deployment": {map[string]string{settings.EnvDeploymentName: "shop.eu"},
			[]string{settings.EnvDeploymentName, `"shop.eu"`, "'.'"}},
		"a colon in the deployment": {map[string]string{settings.EnvDeploymentName: "shop:eu"},
			[]string{settings.EnvDeploymentName, "':'"}},
		"a reserved deployment": {map[string]string{settings.EnvDeploymentName: "__unversioned__"},
			[]string{settings.EnvDeploymentName, "'__'"}},
		"a reserved build ID": {map[string]string{settings.EnvDeploymentName: "shop", settings.EnvWorkerBuildID: "__x"},
			[]string{settings.EnvWorkerBuildID, "'__'"}},
		"a build ID too long": {map[string]string{settings.EnvDeploymentName: "shop", settings.EnvWorkerBuildID: strings.Repeat("b", 256)},
			[]string{settings.EnvWorkerBuildID, "at most 255"}},
	} {
		_, _, err := ConfigFromEnv(envOf(c.vars))
		require.Error(t, err, name)
		for _, w := range c.want {
			assert.Contains(t, err.Error(), w, name)
		}
	}
}

// TestAVersionedWorkersDefaults: a versioned worker's build ID is its
// executable's and its registry's, and AgentRun auto-upgrades; a build ID
// given is kept; an unversioned worker gets no defaults.
func TestAVersionedWorkersDefaults(t *testing.T) {
	t.Parallel()
	d := tools.Digest{Registry: "9e0d1c2b3a4f" + strings.Repeat("7", 52)}
	v, err := Versioning{DeploymentName: "shop"}.resolve(d)
	require.NoError(t, err)
	assert.Regexp(t, regexp.MustCompile(`^[0-9a-f]{8}\.9e0d1c2b3a4f$`), v.BuildID)
	exe, err := executableDigest()
	require.NoError(t, err)
	assert.Equal(t, exe[:8]+".9e0d1c2b3a4f", v.BuildID)
	assert.Equal(t, workflow.VersioningBehaviorAutoUpgrade, v.Behavior)
	other, err := Versioning{DeploymentName: "shop"}.resolve(tools.Digest{Registry: strings.Repeat("1", 64)})
	require.NoError(t, err)
	assert.NotEqual(t, v.BuildID, other.BuildID, "another registry, another version")

	v, err = Versioning{DeploymentName: "shop", BuildID: "v42", Behavior: workflow.VersioningBehaviorPinned}.resolve(d)
	require.NoError(t, err)
	assert.Equal(t, Versioning{DeploymentName: "shop", BuildID: "v42", Behavior: workflow.VersioningBehaviorPinned}, v)
	assert.Equal(t, sdkworker.DeploymentOptions{UseVersioning: true, DefaultVersioningBehavior: workflow.VersioningBehaviorPinned,
		Version: sdkworker.WorkerDeploymentVersion{DeploymentName: "shop", BuildID: "v42"}}, v.deploymentOptions())

	v, err = Versioning{}.resolve(d)
	require.NoError(t, err)
	assert.Equal(t, Versioning{}, v)
	assert.Equal(t, sdkworker.DeploymentOptions{}, v.deploymentOptions())
}

// registration is one workflow a registrar was given.
type registration struct {
	name     string
	behavior workflow.VersioningBehavior
	options  bool // registered with options
}

// recorder records the workflows registered with it.
type recorder struct{ workflows []registration }

func (r *recorder) RegisterWorkflow(w any) {
	r.workflows = append(r.workflows, registration{name: funcName(w)})
}

func (r *recorder) RegisterWorkflowWithOptions(w any, o workflow.RegisterOptions) {
	r.workflows = append(r.workflows, registration{name: cmp.Or(o.Name, funcName(w)), behavior: o.VersioningBehavior, options: true})
}

func (r *recorder) RegisterActivity(any)                                      {}
func (r *recorder) RegisterActivityWithOptions(any, activity.RegisterOptions) {}

func funcName(f any) string {
	name := runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name()
	return name[strings.LastIndex(name, ".")+1:]
}

// TestVersioningBehaviourOfEachWorkflow: a versioned worker registers
// AgentRun with its behaviour (AutoUpgrade unless told otherwise) and the
// watchdog's and reconciliation's passes as Pinned; an unversioned worker
// registers them as it always did, with no behaviour.
func TestVersioningBehaviourOfEachWorkflow(t *testing.T) {
	t.Parallel()
	const (
		auto   = workflow.VersioningBehaviorAutoUpgrade
		pinned = workflow.VersioningBehaviorPinned
		none   = workflow.VersioningBehaviorUnspecified
	)
	for name, c := range map[string]struct {
		opts sdkworker.DeploymentOptions
		want []registration
	}{
		"unversioned": {want: []registration{{name: "AgentRun"}, {watchdog.WorkflowName, none, true}, {reconcile.WorkflowName, none, true}}},
		"versioned": {opts: sdkworker.DeploymentOptions{UseVersioning: true},
			want: []registration{{"AgentRun", auto, true}, {watchdog.WorkflowName, pinned, true}, {reconcile.WorkflowName, pinned, true}}},
		"versioned, auto-upgrade": {opts: sdkworker.DeploymentOptions{UseVersioning: true, DefaultVersioningBehavior: auto},
			want: []registration{{"AgentRun", auto, true}, {watchdog.WorkflowName, pinned, true}, {reconcile.WorkflowName, pinned, true}}},
		"versioned, pinned": {opts: sdkworker.DeploymentOptions{UseVersioning: true, DefaultVersioningBehavior: pinned},
			want: []registration{{"AgentRun", pinned, true}, {watchdog.WorkflowName, pinned, true}, {reconcile.WorkflowName, pinned, true}}},
	} {
		r := &recorder{}
		register(r, c.opts, &activities.Activities{}, &WatchdogActivities{}, &ReconcileActivities{})
		assert.Equal(t, c.want, r.workflows, name)
	}
}

// TestAVersionedTemporalWorkerTakesTheRegistrations: Temporal's own worker
// refuses (panics at) a workflow registered without a behaviour on a
// versioned worker; NewWorker gives each one.
func TestAVersionedTemporalWorkerTakesTheRegistrations(t *testing.T) {
	t.Parallel()
	c, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	require.NoError(t, err)
	defer c.Close()
	v := Versioning{DeploymentName: "shop", BuildID: "v42"}
	v, err = v.resolve(tools.Digest{})
	require.NoError(t, err)
	assert.NotPanics(t, func() {
		NewWorker(c, "q", &activities.Activities{}, &WatchdogActivities{}, &ReconcileActivities{},
			sdkworker.Options{DeploymentOptions: sdkworker.DeploymentOptions{UseVersioning: true, Version: sdkworker.WorkerDeploymentVersion{DeploymentName: "shop", BuildID: "v42"}}})
	})
	assert.NotPanics(t, func() {
		NewWorker(c, "q", &activities.Activities{}, &WatchdogActivities{}, &ReconcileActivities{}, sdkworker.Options{DeploymentOptions: v.deploymentOptions()})
	})
}
