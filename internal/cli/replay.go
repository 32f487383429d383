package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/oncerun/oncerun/internal/replay"
	"github.com/oncerun/oncerun/workflows"
)

// Exit statuses of `oncerun replay`.
const (
	// exitRunsBreak: a run would not replay on this build, or a step's
	// identity would change.
	exitRunsBreak = 1
	// exitNotChecked: the check could not be made (usage, configuration,
	// Temporal), or a run's history could not be read.
	exitNotChecked = 2
)

// defaultReplayLimit is how many runs `oncerun replay --query` checks by
// default.
const defaultReplayLimit = 1000

func newReplayCmd(conn *connections) *cobra.Command {
	var (
		runID, tenant, query, historyFile string
		limit                             int
		asJSON                            bool
	)
	cmd := &cobra.Command{
		Use:   "replay (--run-id R --tenant T | --query Q [--limit N] | --history FILE) [--json]",
		Short: "Check this build against a deployment's runs: replay their histories and their waiting steps",
		Long: `Check this build, before it ships, against the runs a deployment has. Run it
with the configuration the new build's workers will have (ONCERUN_MCP_CONFIG,
ONCERUN_AGENTS_CONFIG, the shop's and providers' variables): it builds the
tool registry as they will, and reaches Temporal as every command does.

Each run's whole history is replayed with this build's workflow code. A
replay that fails (a change that is not versioned) fails the run, naming the
error and the first event of the history the code no longer produces.

For a run that is still open, each step that has not ended (waiting for
approval, approved, running, waiting for a person's answer or resolution)
is checked against this build's registry: its tool is registered, its
arguments pass the tool's schema and hash to the step's args hash, and its
class is the step's. A step that does not would change whether it is
allowed on this build ("step 3 award_points waits for approval, and this
build has no tool award_points: once approved it would fail"). A run that
began before step identity numbered only the calls its registry accepted:
each of its recorded planning turns is checked again, and a call recorded
valid that this build refuses, or refused that it accepts, is named with
the turn's event. A closed run is replayed, and its steps are not checked:
none will run again.

--run-id R --tenant T checks one run (its latest execution). --query Q
checks the runs a Temporal visibility query matches, ANDed with
WorkflowType = "AgentRun": --query 'ExecutionStatus = "Running"' for the
runs in flight, at most --limit (default 1000). --history FILE checks one
JSON history file, as ` + "`temporal workflow show --output json`" + ` writes it, and
reaches no Temporal server.

It prints one line per run (ok, replay failed, identity would change, or
not checked when its history could not be read) and a summary. --json
prints {runs: [{workflow_id, run_id, tenant, temporal_run_id, ok, open,
replay_error, first_event: {id, type}, identity: [{step, tool, why,
event}], skipped, error}], checked, failed, not_checked, more}.

Exit status: 0 when every run is ok; 1 when a run fails its replay or would
change identity; 2 when the check could not be made (a usage error, the
configuration, Temporal unreachable) or a run was not checked.`,
		Args: func(cmd *cobra.Command, args []string) error {
			return asUsage(cobra.NoArgs(cmd, args))
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			f := cmd.Flags()
			if err := replayUsage(runID, tenant, query, historyFile, limit, f.Changed("query"), f.Changed("limit")); err != nil {
				return err
			}
			reg, err := conn.env.Registry()
			if err != nil {
				return &ExitError{Code: exitNotChecked, Err: fmt.Errorf("this build's registry: %w", err)}
			}
			var (
				tc    client.Client
				execs []replay.Execution
				more  bool
			)
			if historyFile != "" {
				execs = []replay.Execution{{File: historyFile}}
			} else {
				rc, err := conn.client(ctx, false)
				if err != nil {
					return &ExitError{Code: exitNotChecked, Err: err}
				}
				tc = rc.Temporal
				if runID != "" {
					execs = []replay.Execution{{WorkflowID: workflows.WorkflowID(tenant, runID)}}
				} else if execs, more, err = replay.List(ctx, tc, query, limit); err != nil {
					return &ExitError{Code: exitNotChecked, Err: err}
				}
			}
			warn := cmd.ErrOrStderr()
			if query != "" && len(execs) == 0 {
				fmt.Fprintf(warn, "note: no agent run matches %s\n", replay.ListQuery(query))
			}
			if more {
				fmt.Fprintf(warn, "note: more runs match than --limit %d: only %d were checked\n", limit, len(execs))
			}
			rep, err := replay.Check(ctx, replay.Config{Registry: reg, Temporal: tc}, execs)
			if err != nil {
				return &ExitError{Code: exitNotChecked, Err: err}
			}
			rep.More = more
			out := cmd.OutOrStdout()
			if asJSON {
				err = writeJSON(out, rep)
			} else {
				err = rep.WriteText(out)
			}
			if err != nil {
				return &ExitError{Code: exitNotChecked, Err: err}
			}
			switch {
			case rep.Failed > 0:
				return &ExitError{Code: exitRunsBreak, Err: fmt.Errorf("%d of %d runs would break on this build", rep.Failed, rep.Checked)}
			case rep.NotChecked > 0:
				return &ExitError{Code: exitNotChecked, Err: fmt.Errorf("%d of %d runs could not be checked", rep.NotChecked, rep.Checked)}
			}
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return asUsage(err) })
	f := cmd.Flags()
	f.StringVar(&runID, "run-id", "", "check one run (with --tenant)")
	f.StringVar(&tenant, "tenant", "", "the tenant of --run-id")
	f.StringVar(&query, "query", "", `check the runs a Temporal visibility query matches, such as 'ExecutionStatus = "Running"'`)
	f.IntVar(&limit, "limit", defaultReplayLimit, "with --query: the most runs checked")
	f.StringVar(&historyFile, "history", "", "check one JSON history file (temporal workflow show --output json)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// replayUsage checks that the flags of `oncerun replay` name one way to
// find runs, with what goes with it.
func replayUsage(runID, tenant, query, historyFile string, limit int, queried, limited bool) error {
	ways := 0
	for _, set := range []bool{runID != "", queried, historyFile != ""} {
		if set {
			ways++
		}
	}
	switch {
	case ways != 1:
		return asUsage(errors.New("give one of --run-id R (with --tenant T), --query Q or --history FILE"))
	case runID != "" && tenant == "":
		return asUsage(errors.New("give --tenant T with --run-id: a run's workflow ID is made of its tenant and run id"))
	case runID == "" && tenant != "":
		return asUsage(errors.New("--tenant goes with --run-id"))
	case queried && query == "":
		return asUsage(errors.New(`--query is empty: give a visibility query, such as 'ExecutionStatus = "Running"'`))
	case limited && !queried:
		return asUsage(errors.New("--limit goes with --query"))
	case limit < 1:
		return asUsage(fmt.Errorf("--limit %d: want at least 1", limit))
	}
	return nil
}

// asUsage makes err, a usage error, exit with status 2; nil stays nil.
func asUsage(err error) error {
	if err == nil {
		return nil
	}
	return &ExitError{Code: exitNotChecked, Err: err}
}
