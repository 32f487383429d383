package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/oncerun/oncerun/internal/deployment"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/workflows"
)

// errNoDeploymentName refuses a deployment command that names none.
var errNoDeploymentName = errors.New("no deployment name: give --name N or set " + settings.EnvDeploymentName)

// newDeploymentCmd builds `oncerun deployment` and its commands.
func newDeploymentCmd(conn *connections) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "deployment",
		Short: "Read the workers' Worker Deployment and move runs to a new build",
		Long: `Temporal's Worker Versioning for rolling deploys (docs/deploy.md, "Rolling
deploys"). A worker with TEMPORAL_DEPLOYMENT_NAME set polls as one version
(its TEMPORAL_WORKER_BUILD_ID) of that deployment, and Temporal sends new
runs to the deployment's current version only: start the new build's
workers beside the old ones, then make it current (set-current), or send it
a share of the runs first (ramp). Runs that auto-upgrade (the default of
AgentRun, ONCERUN_VERSIONING_BEHAVIOR) move to the current version at their
next workflow task; pin keeps one run on a build until it ends.

--name defaults to TEMPORAL_DEPLOYMENT_NAME.`,
	}
	getName := func() (string, error) {
		if name == "" && conn.env.Getenv != nil {
			name = conn.env.Getenv(settings.EnvDeploymentName)
		}
		if name == "" {
			return "", errNoDeploymentName
		}
		return name, nil
	}
	open := func(ctx context.Context) (client.Client, string, error) {
		name, err := getName()
		if err != nil {
			return nil, "", err
		}
		tc, err := conn.temporal(ctx)
		if err != nil {
			return nil, "", err
		}
		return tc, name, nil
	}
	cmd.PersistentFlags().StringVar(&name, "name", "", "the Worker Deployment (default $"+settings.EnvDeploymentName+")")
	cmd.AddCommand(newDeploymentDescribeCmd(open), newSetCurrentCmd(open), newRampCmd(open),
		newPinCmd(open), newUnpinCmd(conn))
	return cmd
}

// deploymentOf opens what a deployment command acts on: a client of
// Temporal, and the deployment's name (--name, or TEMPORAL_DEPLOYMENT_NAME).
type deploymentOf func(ctx context.Context) (client.Client, string, error)

// temporal is the command's Temporal client.
func (c *connections) temporal(ctx context.Context) (client.Client, error) {
	rc, err := c.client(ctx, false)
	if err != nil {
		return nil, err
	}
	return rc.Temporal, nil
}

func newDeploymentDescribeCmd(open deploymentOf) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "describe [--name N] [--json]",
		Short: "List the deployment's versions: which is current, which ramps, their drainage and pollers",
		Long: `List the deployment's versions, oldest first: each one's build ID, whether it
is current (new runs and auto-upgrade runs go to it) or ramping (and at what
percent), its drainage (draining while open pinned runs use it, drained
once none does: its workers may stop), its workflow task queues, and the
workers Temporal has seen poll them in the last minutes, with the registry
digest each worker's identity carries (the first 12 hex characters of
` + "`oncerun tools`" + `'s registry digest).

--json prints an object with name, current_build_id ("" when the task
queues' unversioned workers get new runs), ramping_build_id and
ramping_percent (absent when nothing ramps), and versions: each with
build_id, current, ramping, drainage (draining or drained; absent for the
current and the ramping version and until Temporal has checked),
created_at, task_queues and pollers (identity, task_queue,
registry_digest, last_access_at).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			tc, name, err := open(ctx)
			if err != nil {
				return err
			}
			d, err := deployment.Describe(ctx, tc, name)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), d)
			}
			return printDeployment(cmd.OutOrStdout(), d)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the deployment as JSON")
	return cmd
}

// printDeployment prints d for people.
func printDeployment(out io.Writer, d deployment.Description) error {
	current := d.CurrentBuildID
	if current == "" {
		current = "none (unversioned workers get new runs)"
	}
	fmt.Fprintf(out, "deployment %s: current %s", d.Name, current)
	switch {
	case d.RampingBuildID != "":
		fmt.Fprintf(out, ", ramping %s at %g%%", d.RampingBuildID, d.RampingPercent)
	case d.RampingPercent > 0:
		fmt.Fprintf(out, ", ramping unversioned workers at %g%%", d.RampingPercent)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BUILD ID\tSTATE\tDRAINAGE\tCREATED\tTASK QUEUES\tPOLLERS")
	for _, v := range d.Versions {
		state := "-"
		switch {
		case v.Current:
			state = "current"
		case v.Ramping:
			state = fmt.Sprintf("ramping %g%%", d.RampingPercent)
		}
		pollers := make([]string, len(v.Pollers))
		for i, p := range v.Pollers {
			pollers[i] = p.Identity
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", v.BuildID, state, dash(v.Drainage), when(v.CreatedAt),
			dash(strings.Join(v.TaskQueues, ", ")), dash(strings.Join(pollers, ", ")))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newSetCurrentCmd(open deploymentOf) *cobra.Command {
	return &cobra.Command{
		Use:   "set-current BUILD-ID [--name N]",
		Short: "Make a build the deployment's current version",
		Long: `Make BUILD-ID the deployment's current version: new runs start on its
workers, and runs that auto-upgrade move to them at their next workflow
task (an approval, a timer, a step's end); pinned runs stay on their
build. A build ID the deployment does not have is refused, naming the ones
it has: a version exists once one of its workers has polled. Temporal
refuses too a version whose workers do not poll every task queue the
current version's did.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			tc, name, err := open(ctx)
			if err != nil {
				return err
			}
			was, err := deployment.SetCurrent(ctx, tc, name, args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if was.CurrentBuildID == args[0] {
				fmt.Fprintf(out, "deployment %s: %s was current already\n", name, args[0])
				return nil
			}
			fmt.Fprintf(out, "deployment %s: %s is current (was %s): new runs start on it, auto-upgrade runs move to it at their next workflow task\n",
				name, args[0], dash(was.CurrentBuildID))
			return nil
		},
	}
}

func newRampCmd(open deploymentOf) *cobra.Command {
	var percent float32
	cmd := &cobra.Command{
		Use:   "ramp BUILD-ID --percent P [--name N]",
		Short: "Send a share of the current version's runs to a build",
		Long: `Make BUILD-ID the deployment's ramping version: it gets P percent (0 to 100)
of the new runs and of the auto-upgrade runs' workflow tasks the current
version would get. set-current of the ramping build ends the ramp.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if percent < 0 || percent > 100 {
				return fmt.Errorf("--percent %g: give a percent from 0 to 100", percent)
			}
			ctx := cmd.Context()
			tc, name, err := open(ctx)
			if err != nil {
				return err
			}
			if _, err := deployment.Ramp(ctx, tc, name, args[0], percent); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deployment %s: %s ramps at %g%%\n", name, args[0], percent)
			return nil
		},
	}
	cmd.Flags().Float32Var(&percent, "percent", 0, "the share of runs it gets, 0 to 100 (required)")
	_ = cmd.MarkFlagRequired("percent")
	return cmd
}

// pinFlags are the flags of pin and unpin.
type pinFlags struct{ tenant, runID, buildID string }

func (f *pinFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.tenant, "tenant", "", "tenant of the run (required)")
	cmd.Flags().StringVar(&f.runID, "run-id", "", "the run's id (or give it as the argument)")
}

// workflowID is the run's workflow, or an error naming what is missing.
func (f *pinFlags) workflowID(cmd *cobra.Command, args []string) (string, error) {
	runID, err := runIDOf(cmd, args, f.runID)
	if err != nil {
		return "", err
	}
	f.runID = runID
	if f.tenant == "" {
		return "", errors.New("give --tenant T: the run's tenant")
	}
	return workflows.WorkflowID(f.tenant, runID), nil
}

func newPinCmd(open deploymentOf) *cobra.Command {
	var f pinFlags
	cmd := &cobra.Command{
		Use:   "pin RUN-ID --build-id B [--tenant T] [--name N]",
		Short: "Keep one run on a build until it ends, whatever is current",
		Long: `Set a pinned versioning override on the run: its workflow tasks go to the
workers of build B of the deployment until the run ends or ` + "`oncerun deployment\nunpin`" + `, whatever version is current. Use it for a run that must end on
the build it began on: one that waits for an approval of a tool the new
build removes. Keep a worker of B running until the run ends (describe
shows the version draining, then drained). Continue-As-New keeps the pin,
and child runs started afterwards inherit it; a child run already running
is a run of its own: pin it too.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			wid, err := f.workflowID(cmd, args)
			if err != nil {
				return err
			}
			if f.buildID == "" {
				return errors.New("give --build-id B: the build to pin the run to")
			}
			ctx := cmd.Context()
			tc, name, err := open(ctx)
			if err != nil {
				return err
			}
			if err := deployment.Pin(ctx, tc, wid, name, f.buildID); err != nil {
				return fmt.Errorf("run %s of tenant %s: %w", f.runID, f.tenant, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s of tenant %s is pinned to build %s of deployment %s until it ends or is unpinned\n",
				f.runID, f.tenant, f.buildID, name)
			return nil
		},
	}
	f.bind(cmd)
	cmd.Flags().StringVar(&f.buildID, "build-id", "", "the build to keep the run on (required)")
	return cmd
}

func newUnpinCmd(conn *connections) *cobra.Command {
	var f pinFlags
	cmd := &cobra.Command{
		Use:   "unpin RUN-ID [--tenant T]",
		Short: "Remove a run's pin: it follows its versioning behaviour again",
		Long: `Remove the run's versioning override (oncerun deployment pin): an
auto-upgrade run moves to the current version at its next workflow task.
Unpinning a run that is not pinned changes nothing.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			wid, err := f.workflowID(cmd, args)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			tc, err := conn.temporal(ctx)
			if err != nil {
				return err
			}
			if err := deployment.Unpin(ctx, tc, wid); err != nil {
				return fmt.Errorf("run %s of tenant %s: %w", f.runID, f.tenant, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s of tenant %s is unpinned: it follows its versioning behaviour again\n", f.runID, f.tenant)
			return nil
		},
	}
	f.bind(cmd)
	return cmd
}
