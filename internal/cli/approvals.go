package cli

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/workflows"
)

func newApprovalsCmd(conn *connections) *cobra.Command {
	var (
		tenant string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "approvals [--tenant T]",
		Short: "List the steps waiting for approval",
		Long: `List the steps waiting for a decision, oldest first.

--json prints an array of objects with tenant, run_id, step, tool, args,
args_hash, goal, reason, requested_at and deadline.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			if len(list) == 0 {
				fmt.Fprintln(out, "no step is waiting for approval")
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TENANT\tRUN\tSTEP\tTOOL\tARGS\tREQUESTED\tDEADLINE")
			for _, p := range list {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", p.Tenant, p.RunID, p.Step, p.Tool,
					oneLine(string(p.Args)), when(p.RequestedAt), when(p.Deadline))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "list only this tenant's steps")
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
		Use:   verb + " --tenant T --run-id R --step N",
		Short: fmt.Sprintf("%s a step waiting for approval", map[string]string{"approve": "Approve", "reject": "Reject"}[verb]),
		Long: fmt.Sprintf(`Send the %s decision to a step waiting for approval. The decision is bound
to the step's arguments hash (or to --args-hash, the hash you reviewed): if
the step's arguments differ, the run does not apply it.`, verb),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if d.Approver == "" {
				d.Approver = conn.env.User
			}
			if d.Approver == "" {
				return errors.New("give --as NAME: the decision needs an approver's name")
			}
			if d.Step < 1 {
				return fmt.Errorf("--step %d: steps are numbered from 1", d.Step)
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
	f.StringVar(&d.Tenant, "tenant", "", "tenant of the run (required)")
	f.StringVar(&d.RunID, "run-id", "", "the run's id (required)")
	f.Int64Var(&d.Step, "step", 0, "the step's number (required)")
	f.StringVar(&d.Approver, "as", "", "your name, recorded with the decision (default $USER)")
	f.StringVar(&d.Comment, "comment", "", "a comment recorded with the decision")
	f.StringVar(&d.ArgsHash, "args-hash", "", "the arguments hash you reviewed (default: the step's)")
	for _, name := range []string{"tenant", "run-id", "step"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
