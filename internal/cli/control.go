package cli

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/workflows"
)

// controlFlags are the flags of cancel, pause, resume and message.
type controlFlags struct {
	tenant, runID, as string
	reason            string
	messageID, text   string
	asJSON            bool
}

// controlHelp says what each of the operator's commands does.
var controlHelp = map[string]struct{ short, long string }{
	approvalstore.ActionCancel: {"Cancel a run", `Cancel a run: it starts no further step and asks its planner nothing more,
and every approval it waits for is withdrawn (a decision sent after is
refused). Steps already running end on their own terms; a step whose outcome
is unknown still waits for a person's answer (oncerun resolve). The command
prints the run's receipt: every step and how it ended. Cancelling a cancelled
run prints its receipt again; a run that ended otherwise is refused.

--json prints tenant, run_id, state (cancelling while a step still runs,
cancelled once none does), receipt and status_url, as the approvals API
answers.`},
	approvalstore.ActionPause: {"Pause a run", `Pause a run: it starts no step and asks its planner nothing until it is
resumed; steps already running finish. Pausing a paused run changes nothing.

--json prints tenant, run_id, state and paused (by, reason, at).`},
	approvalstore.ActionResume: {"Resume a paused run", `Resume a paused run. Resuming a run that is not paused changes nothing.

--json prints tenant, run_id, state and paused (null once resumed).`},
	approvalstore.ActionMessage: {"Send a run a message for its planner", `Send a run words for its planner's next turn. --id is your id for the
message: the same id with the same text is accepted once, and sending it
again answers the first receipt; the same id with another text is refused.
A scripted run reads no messages and refuses them.

--json prints tenant, run_id, message_id, position, accepted_at and
duplicate.`},
}

// newControlCmd builds cancel, pause, resume or message.
func newControlCmd(conn *connections, action string) *cobra.Command {
	var f controlFlags
	use := action + " [--tenant T] (RUN-ID | --run-id R)"
	switch action {
	case approvalstore.ActionCancel:
		use += " --reason TEXT"
	case approvalstore.ActionMessage:
		use += " --id MESSAGE-ID --text TEXT"
	default:
		use += " [--reason TEXT]"
	}
	help := controlHelp[action]
	cmd := &cobra.Command{
		Use:   use,
		Short: help.short,
		Long: help.long + `

With ONCERUN_API set, the request goes through the approvals service (an
operator's token; your token names you and your tenant). Without it, the
command sends it to the run through Temporal, as --as (default $USER), and
records it in the operators' audit table with DATABASE_URL, as the service
does.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			runID, err := runIDOf(cmd, args, f.runID)
			if err != nil {
				return err
			}
			f.runID = runID
			api, err := conn.api()
			if err != nil {
				return err
			}
			if api != nil {
				if err := refuseInAPIMode(map[string]bool{"tenant": cmd.Flags().Changed("tenant"), "as": cmd.Flags().Changed("as")}); err != nil {
					return err
				}
				// What the service would refuse is refused here, before
				// anything is sent.
				if err := checkControl(action, f, "you"); err != nil {
					return err
				}
				return controlViaAPI(cmd, api, action, f)
			}
			return controlDirect(cmd, conn, action, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.tenant, "tenant", "", "tenant of the run (required without ONCERUN_API)")
	fl.StringVar(&f.runID, "run-id", "", "the run's id (or give it as the argument)")
	fl.StringVar(&f.as, "as", "", "your name, recorded with the request (default $USER)")
	fl.BoolVar(&f.asJSON, "json", false, "print the answer as JSON")
	switch action {
	case approvalstore.ActionMessage:
		fl.StringVar(&f.messageID, "id", "", "your id for the message (required): the same id is accepted once")
		fl.StringVar(&f.text, "text", "", "the message for the run's planner (required)")
		_ = cmd.MarkFlagRequired("id")
		_ = cmd.MarkFlagRequired("text")
	case approvalstore.ActionCancel:
		fl.StringVar(&f.reason, "reason", "", "why the run is cancelled (required), recorded with it")
		_ = cmd.MarkFlagRequired("reason")
	default:
		fl.StringVar(&f.reason, "reason", "", "why, recorded with the request")
	}
	return cmd
}

// runIDOf is the run id given as the argument or as --run-id.
func runIDOf(cmd *cobra.Command, args []string, flag string) (string, error) {
	switch {
	case len(args) == 1 && flag != "" && args[0] != flag:
		return "", fmt.Errorf("the run id is given twice, as %q and as --run-id %q: give it once", args[0], flag)
	case len(args) == 1:
		return args[0], nil
	case flag != "":
		return flag, nil
	}
	return "", fmt.Errorf("give the run's id: oncerun %s RUN-ID (or --run-id RUN-ID)", cmd.Name())
}

// checkControl checks the request's own values as the run would, naming
// the flag; by is who sends it.
func checkControl(action string, f controlFlags, by string) error {
	var err error
	switch {
	case action == approvalstore.ActionMessage:
		err = workflows.Message{MessageID: f.messageID, Text: f.text, By: by}.Validate()
	case action == approvalstore.ActionCancel:
		err = workflows.Control{By: by, Reason: f.reason}.ValidateCancel()
	default:
		err = workflows.Control{By: by, Reason: f.reason}.Validate()
	}
	if err == nil {
		return nil
	}
	// The run's words name its fields; the flags are named otherwise.
	switch msg := err.Error(); {
	case strings.HasPrefix(msg, "by"):
		return fmt.Errorf("--as: %w", err)
	case strings.HasPrefix(msg, "message_id"):
		return errors.New("--id" + strings.TrimPrefix(msg, "message_id"))
	}
	return fmt.Errorf("--%w", err)
}

// controlDirect sends the request without the approvals service: through
// runs.Client.Operate, the path the service takes (the checks, the
// update, the withdrawal of a cancelled run's approvals, the audit
// row).
func controlDirect(cmd *cobra.Command, conn *connections, action string, f controlFlags) error {
	if f.tenant == "" {
		return fmt.Errorf("give --tenant T (or set ONCERUN_API to %s through the approvals service)", action)
	}
	by := cmp.Or(f.as, conn.env.User)
	if by == "" {
		return errors.New("give --as NAME: the request needs the name of who sends it")
	}
	if err := checkControl(action, f, by); err != nil {
		return err
	}
	ctx := cmd.Context()
	rc, err := conn.client(ctx, true)
	if err != nil {
		return err
	}
	res, err := rc.Operate(ctx, rc.Pool, runs.ControlRequest{Tenant: f.tenant, RunID: f.runID, Action: action, By: by,
		Reason: f.reason, MessageID: f.messageID, Text: f.text})
	if res.Unrecorded != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: the request is not fully recorded in the database: %s\n", inline(res.Unrecorded.Error()))
	}
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	st := res.Status
	switch action {
	case approvalstore.ActionMessage:
		rcpt := approvals.MessageResponse{Tenant: f.tenant, RunID: f.runID, MessageID: res.Receipt.MessageID, Position: res.Receipt.Position,
			AcceptedAt: res.Receipt.AcceptedAt, Duplicate: res.Receipt.Duplicate}
		if f.asJSON {
			return writeJSON(out, rcpt)
		}
		printMessageReceipt(out, rcpt)
	case approvalstore.ActionCancel:
		if f.asJSON {
			return writeJSON(out, approvals.CancelResponse{Tenant: f.tenant, RunID: f.runID, State: st.State, Receipt: st.Receipt})
		}
		fmt.Fprintf(out, "run %s of tenant %s: %s\n", f.runID, f.tenant, st.State)
		if res.Withdrawn > 0 {
			fmt.Fprintln(out, runs.WithdrawnText(res.Withdrawn))
		}
		return printReceipt(out, f.tenant, f.runID, st.Receipt)
	default:
		if f.asJSON {
			return writeJSON(out, approvals.PauseResponse{Tenant: f.tenant, RunID: f.runID, State: st.State, Paused: st.Paused})
		}
		printPaused(out, f.tenant, f.runID, st.State, st.Paused)
	}
	return nil
}

// controlViaAPI sends the request through the approvals service.
func controlViaAPI(cmd *cobra.Command, api *approvals.Client, action string, f controlFlags) error {
	ctx, out := cmd.Context(), cmd.OutOrStdout()
	switch action {
	case approvalstore.ActionMessage:
		res, err := api.Message(ctx, f.runID, approvals.MessageRequest{MessageID: f.messageID, Text: f.text})
		if err != nil {
			return err
		}
		if f.asJSON {
			return writeJSON(out, res)
		}
		printMessageReceipt(out, res)
	case approvalstore.ActionCancel:
		res, err := api.Cancel(ctx, f.runID, approvals.ControlRequest{Reason: f.reason})
		if err != nil {
			return err
		}
		if f.asJSON {
			return writeJSON(out, res)
		}
		fmt.Fprintf(out, "run %s of tenant %s: %s\n", res.RunID, res.Tenant, res.State)
		return printReceipt(out, res.Tenant, res.RunID, res.Receipt)
	default:
		send := api.Pause
		if action == approvalstore.ActionResume {
			send = api.Resume
		}
		res, err := send(ctx, f.runID, approvals.ControlRequest{Reason: f.reason})
		if err != nil {
			return err
		}
		if f.asJSON {
			return writeJSON(out, res)
		}
		printPaused(out, res.Tenant, res.RunID, res.State, res.Paused)
	}
	return nil
}

func printMessageReceipt(out io.Writer, r approvals.MessageResponse) {
	if r.Duplicate {
		fmt.Fprintf(out, "run %s had accepted message %s already, at position %d at %s; nothing changed\n",
			r.RunID, r.MessageID, r.Position, when(r.AcceptedAt))
		return
	}
	fmt.Fprintf(out, "run %s accepted message %s at position %d at %s; its planner reads it on its next turn\n",
		r.RunID, r.MessageID, r.Position, when(r.AcceptedAt))
}

// printPaused says whether a run is paused, by whom and why.
func printPaused(out io.Writer, tenant, runID string, state workflows.RunState, p *workflows.ControlRecord) {
	fmt.Fprintf(out, "run %s of tenant %s: %s\n", runID, tenant, state)
	if p != nil {
		fmt.Fprintln(out, pausedLine(p))
	}
}

// pausedLine says who paused a run, when and why.
func pausedLine(p *workflows.ControlRecord) string {
	line := fmt.Sprintf("paused by %s at %s", p.By, when(p.At))
	if p.Reason != "" {
		line += ": " + inline(p.Reason)
	}
	return line + " (it starts no step until it is resumed)"
}

// printReceipt prints a cancelled run's receipt: who cancelled it, every
// step and how it ended, the steps still running and those waiting for a
// person's answer.
func printReceipt(out io.Writer, tenant, runID string, rc *workflows.Receipt) error {
	if rc == nil {
		return nil
	}
	line := fmt.Sprintf("cancelled by %s at %s", rc.CancelledBy, when(rc.CancelledAt))
	if rc.Reason != "" {
		line += ": " + inline(rc.Reason)
	}
	fmt.Fprintln(out, line)
	if len(rc.Steps) > 0 {
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "STEP\tTOOL\tSTATE\tHOW IT ENDED")
		for _, s := range rc.Steps {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Step, s.Tool, s.State, inline(s.Ended))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(rc.InFlight) > 0 {
		steps := make([]string, len(rc.InFlight))
		for i, n := range rc.InFlight {
			steps[i] = fmt.Sprint(n)
		}
		fmt.Fprintf(out, "still running, ending on their own terms: step %s\n", strings.Join(steps, ", "))
	}
	for _, u := range rc.Unresolved {
		fmt.Fprintf(out, "unresolved: step %d (%s, key %s) waits for a person's answer:\n  oncerun resolve --tenant %s --run-id %s --step %d --outcome applied|not_applied\n",
			u.Step, u.Tool, u.Key, tenant, runID, u.Step)
	}
	return nil
}
