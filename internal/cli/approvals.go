package cli

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/workflows"
)

func newApprovalsCmd(conn *connections) *cobra.Command {
	var (
		tenant string
		state  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "approvals [--tenant T]",
		Short: "List the steps waiting for approval",
		Long: `List the steps waiting for a decision, oldest first, and then the steps
whose external effect's outcome is unknown, waiting for oncerun resolve.

--json prints an array of objects with tenant, run_id, step, tool, args,
args_hash, goal, reason, requested_by, requested_at and deadline (the steps
waiting for a decision only).

With ONCERUN_API set, the list comes from the approvals service for your
token's tenant, and --state picks pending, decided or needs_resolution
(decisions the runs did not apply, and steps whose outcome is unknown, each
item with its kind); --json then prints the API's items.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, err := conn.api()
			if err != nil {
				return err
			}
			if api != nil {
				if err := refuseInAPIMode(map[string]bool{"tenant": cmd.Flags().Changed("tenant")}); err != nil {
					return err
				}
				items, err := api.Approvals(cmd.Context(), approvals.View(state))
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), items)
				}
				return printItems(cmd.OutOrStdout(), items, approvals.View(state))
			}
			if cmd.Flags().Changed("state") {
				return fmt.Errorf("--state needs %s: without it the list shows pending steps", EnvAPI)
			}
			if err := checkTenant(tenant); err != nil {
				return err
			}
			rc, err := conn.client(cmd.Context(), true)
			if err != nil {
				return err
			}
			list, err := rc.Pending(cmd.Context(), tenant)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(out, list)
			}
			unresolved, err := rc.Unresolved(cmd.Context(), tenant)
			if err != nil {
				return err
			}
			if len(list) == 0 {
				fmt.Fprintln(out, "no step is waiting for approval")
			} else {
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TENANT\tRUN\tSTEP\tTOOL\tARGS\tREQUESTED\tDEADLINE")
				for _, p := range list {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", p.Tenant, p.RunID, p.Step, p.Tool,
						oneLine(string(p.Args)), when(p.RequestedAt), when(p.Deadline))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			if len(unresolved) == 0 {
				return nil
			}
			fmt.Fprintln(out, "\nsteps whose outcome is unknown (oncerun resolve):")
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TENANT\tRUN\tSTEP\tTOOL\tFIRST SENT\tDEADLINE\tKNOWN")
			for _, u := range unresolved {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", u.Tenant, u.RunID, u.Step, u.Tool,
					when(u.FirstSentAt), when(u.Deadline), oneLine(u.Known))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "list only this tenant's steps")
	cmd.Flags().StringVar(&state, "state", string(approvals.ViewPending), "with ONCERUN_API: pending, decided or needs_resolution")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}

func newDecideCmd(conn *connections, verb string) *cobra.Command {
	d := runs.Decision{Decision: workflows.DecisionApprove}
	past := "approved"
	if verb == "reject" {
		d.Decision, past = workflows.DecisionReject, "rejected"
	}
	cmd := &cobra.Command{
		Use:   verb + " [--tenant T] --run-id R --step N",
		Short: fmt.Sprintf("%s a step waiting for approval", map[string]string{"approve": "Approve", "reject": "Reject"}[verb]),
		Long: fmt.Sprintf(`Send the %s decision to a step waiting for approval. The decision is bound
to the step's arguments hash (or to --args-hash, the hash you reviewed): if
the step's arguments differ, the run does not apply it.

With ONCERUN_API set, the decision goes through the approvals service: your
token names you and your tenant, and the service records the decision.`, verb),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if d.Step < 1 {
				return fmt.Errorf("--step %d: steps are numbered from 1", d.Step)
			}
			api, err := conn.api()
			if err != nil {
				return err
			}
			if api != nil {
				if err := refuseInAPIMode(map[string]bool{"tenant": cmd.Flags().Changed("tenant"), "as": cmd.Flags().Changed("as")}); err != nil {
					return err
				}
				return decideViaAPI(cmd.Context(), cmd.OutOrStdout(), api, decisionFlags{
					runID: d.RunID, step: d.Step, decision: d.Decision, argsHash: d.ArgsHash, comment: d.Comment})
			}
			if d.Tenant == "" {
				return errors.New("give --tenant T (or set ONCERUN_API to decide through the approvals service)")
			}
			if d.Approver == "" {
				d.Approver = conn.env.User
			}
			if d.Approver == "" {
				return errors.New("give --as NAME: the decision needs an approver's name")
			}
			rc, err := conn.client(cmd.Context(), false)
			if err != nil {
				return err
			}
			step, err := rc.Decide(cmd.Context(), d, 10*time.Second)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if step.State == workflows.StepPendingApproval {
				fmt.Fprintf(out, "sent: %s step %d of run %s; the run has not applied it yet (is a worker running?)\n",
					past, d.Step, d.RunID)
				return nil
			}
			fmt.Fprintf(out, "%s step %d (%s) of run %s as %s; the step is now %s\n",
				past, d.Step, step.Tool, d.RunID, d.Approver, step.State)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&d.Tenant, "tenant", "", "tenant of the run (required without ONCERUN_API)")
	f.StringVar(&d.RunID, "run-id", "", "the run's id (required)")
	f.Int64Var(&d.Step, "step", 0, "the step's number (required)")
	f.StringVar(&d.Approver, "as", "", "your name, recorded with the decision (default $USER)")
	f.StringVar(&d.Comment, "comment", "", "a comment recorded with the decision")
	f.StringVar(&d.ArgsHash, "args-hash", "", "the arguments hash you reviewed (default: the step's)")
	for _, name := range []string{"run-id", "step"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
