package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/workflows"
)

func newApprovalsCmd(conn *connections) *cobra.Command {
	var (
		tenant string
		state  string
		asJSON bool
		wide   bool
	)
	cmd := &cobra.Command{
		Use:   "approvals [--tenant T]",
		Short: "List the steps waiting for approval",
		Long: `List the steps waiting for a decision, nearest deadline first, then the steps
whose tool's server asked a person a question, waiting for oncerun answer,
then the steps whose external effect's outcome is unknown, waiting for
oncerun resolve.

KIND is rule when the tool's approval rule asked, limit when the step would
take a spend limit past its cap (approving it is an exception). AMOUNT is
the amounts the tool declares, as money (259.00 EUR). ARGS, and
PROBLEM (what the service found wrong with a decided step), are cut to 80
bytes; --wide prints them whole.

--json prints an array of objects with tenant, run_id, step, tool, args,
args_hash, goal, reason, kind, requested_by, requested_at and deadline (the
steps waiting for a decision only).

With ONCERUN_API set, the list comes from the approvals service for your
token's tenant, and --state picks pending, decided or needs_resolution
(decisions the runs did not apply, and steps whose outcome is unknown, each
item with its kind; pending lists questions too, kind question); --json
then prints the API's items.`,
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
				return printItems(cmd.OutOrStdout(), items, approvals.View(state), wide)
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
				// The amounts are read as the deployment's tools declare
				// them; without its registry the column shows none.
				reg, _ := conn.env.Registry()
				fmt.Fprintln(tw, "TENANT\tRUN\tSTEP\tTOOL\tKIND\tAMOUNT\tARGS\tREQUESTED\tDEADLINE\tLEFT")
				now := time.Now()
				for _, p := range list {
					var amounts []approvals.Money
					if reg != nil {
						if t, ok := reg.Lookup(p.Tool); ok {
							amounts = approvals.DeclaredAmounts(t, p.Args)
						}
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Tenant, p.RunID, p.Step, p.Tool, p.Kind,
						amountCell(amounts), cell(string(p.Args), wide), when(p.RequestedAt), when(p.Deadline), left(now, p.Deadline))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			asked, err := rc.Questions(cmd.Context(), tenant)
			if err != nil {
				return err
			}
			if len(asked) > 0 {
				fmt.Fprintln(out, "\nsteps whose server asks a person (oncerun answer):")
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TENANT\tRUN\tSTEP\tTOOL\tROUND\tLIVE\tMAY ANSWER\tDEADLINE\tLEFT\tQUESTION")
				now := time.Now()
				for _, q := range asked {
					may := strings.Join(q.AnswerBy, ", ")
					if may == "" {
						may = "approvers, operators"
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%t\t%s\t%s\t%s\t%s\n", q.Tenant, q.RunID, q.Step, q.Tool, q.Round, q.Live, may,
						when(q.Deadline), left(now, q.Deadline), cell(q.Asked().Summary(), wide))
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
					when(u.FirstSentAt), when(u.Deadline), cell(u.Known, wide))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "list only this tenant's steps")
	cmd.Flags().StringVar(&state, "state", string(approvals.ViewPending), "with ONCERUN_API: pending, decided or needs_resolution")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	cmd.Flags().BoolVar(&wide, "wide", false, "print whole arguments and problems; without it each is cut to 80 bytes")
	return cmd
}

func newDecideCmd(conn *connections, verb string) *cobra.Command {
	f := decisionFlags{decision: workflows.DecisionApprove}
	if verb == "reject" {
		f.decision = workflows.DecisionReject
	}
	cmd := &cobra.Command{
		Use:   verb + " [--tenant T] --run-id R --step N",
		Short: fmt.Sprintf("%s a step waiting for approval", map[string]string{"approve": "Approve", "reject": "Reject"}[verb]),
		Long: fmt.Sprintf(`Send the %s decision to a step waiting for approval. The decision is bound
to the step's arguments hash (or to --args-hash, the hash you reviewed): if
the step's arguments differ, it is refused.

Every decision is recorded in the audit table (who, when, how, what)
before it is sent to the run, by the same code whichever way it comes. The
first decision of a step is its decision of record: the same decision again
is harmless, another one is refused.

With ONCERUN_API set, the decision goes through the approvals service: your
token names you and your tenant. Without it, the command asks the run
whether the step waits for approval (otherwise it stops and records
nothing), records the decision with DATABASE_URL (via cli, role local, as
--as) and signals the run through Temporal.

--json prints the decision of record: run_id, step, decision, approver,
role, comment, args_hash, decided_at and via, with repeated.%s`, verb, editHelp(verb)),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.step < 1 {
				return fmt.Errorf("--step %d: steps are numbered from 1", f.step)
			}
			if f.argsFile != "" {
				raw, err := readEditArgs(f.argsFile)
				if err != nil {
					return err
				}
				f.decision, f.args = workflows.DecisionEdit, raw
			}
			api, err := conn.api()
			if err != nil {
				return err
			}
			if api != nil {
				if err := refuseInAPIMode(map[string]bool{"tenant": cmd.Flags().Changed("tenant"), "as": cmd.Flags().Changed("as")}); err != nil {
					return err
				}
				return decideViaAPI(cmd.Context(), cmd.OutOrStdout(), api, f)
			}
			return decideDirect(cmd, conn, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.tenant, "tenant", "", "tenant of the run (required without ONCERUN_API)")
	fl.StringVar(&f.runID, "run-id", "", "the run's id (required)")
	fl.Int64Var(&f.step, "step", 0, "the step's number (required)")
	fl.StringVar(&f.as, "as", "", "your name, recorded with the decision (default $USER)")
	fl.StringVar(&f.comment, "comment", "", "a comment recorded with the decision")
	fl.StringVar(&f.argsHash, "args-hash", "", "the arguments hash you reviewed (default: the step's)")
	fl.IntVar(&f.round, "round", 0, "the round of the step's approval you reviewed, as approvals lists it: a step that waits in another round by then (approved under its rule, then parked at a spend limit) is refused (default: the round read with the step's hash; 1 with --args-hash)")
	fl.BoolVar(&f.asJSON, "json", false, "print the decision of record as JSON")
	if verb == "approve" {
		fl.StringVar(&f.argsFile, "args", "", "approve with these arguments instead (a JSON object in FILE, - for standard input): an edit")
	}
	for _, name := range []string{"run-id", "step"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// decisionFlags are a decision command's flags.
type decisionFlags struct {
	tenant, runID, as string
	step              int64
	decision          workflows.Decision
	argsHash          string
	// round is the round of the step's approval reviewed (0: the one it
	// waits in when the command reads it).
	round   int
	comment string
	asJSON  bool
	// argsFile names an edit's arguments, args holds them.
	argsFile string
	args     json.RawMessage
}

// editHelp is what approve says of --args.
func editHelp(verb string) string {
	if verb != "approve" {
		return ""
	}
	return `

--args FILE approves the step with other arguments (an edit): FILE holds a
JSON object for the step's tool (- reads standard input). The arguments are
checked against the tool's schema and its edit rule (some tools allow no
edits, or no increase of an amount) before the edit is recorded; the run
then runs the step with them, and its status keeps both the proposed and
the edited arguments. --args-hash is still the hash of the arguments you
reviewed.`
}

// readEditArgs reads an edit's arguments from path (- for standard input):
// a JSON object.
func readEditArgs(path string) (json.RawMessage, error) {
	var (
		raw []byte
		err error
	)
	if path == "-" {
		raw, err = io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
	} else {
		raw, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("--args: %w", err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("--args %s: not a JSON object of arguments: %v", path, cmp.Or[error](err, errors.New("null")))
	}
	return raw, nil
}

// decideViaAPI sends a decision through the API and says what became of it.
func decideViaAPI(ctx context.Context, out io.Writer, api *approvals.Client, f decisionFlags) error {
	// Without --args-hash, the step's hash and round are read now: the
	// decision is bound to what waits at this moment.
	hash, round := f.argsHash, f.round
	if hash == "" {
		it, err := api.Step(ctx, f.runID, f.step)
		if err != nil {
			if errors.Is(err, approvals.ErrNoSuchStep) {
				return fmt.Errorf("run %s has no step %d waiting for approval", f.runID, f.step)
			}
			return err
		}
		hash, round = it.ArgsHash, cmp.Or(round, it.Round)
	}
	var (
		res    approvals.DecideResponse
		status int
		err    error
	)
	if f.decision == workflows.DecisionEdit {
		res, status, err = api.Edit(ctx, f.runID, f.step, approvals.EditRequest{ArgsHash: hash, Args: f.args, Comment: f.comment, Round: round})
	} else {
		res, status, err = api.Decide(ctx, f.runID, f.step, f.decision, approvals.DecideRequest{ArgsHash: hash, Comment: f.comment, Round: round})
	}
	if err != nil {
		return err
	}
	if f.asJSON {
		return writeJSON(out, res)
	}
	rec := res.Decision
	if status == 200 {
		fmt.Fprintf(out, "step %d of run %s was already %s by %s at %s\n", f.step, f.runID, rec.Decision.PastTense(), rec.Approver, when(rec.DecidedAt))
		return nil
	}
	fmt.Fprintf(out, "%s step %d of run %s as %s; the run applies the decision\n", rec.Decision.PastTense(), f.step, f.runID, rec.Approver)
	return nil
}

// decideDirect decides without the approvals service: it asks the run
// whether the step waits for approval, then records the decision through
// the path every decision takes (runs.Client.Decide: the checks, the row
// lock and the audit row, via cli, then the signal), and waits a little
// for the run to apply it.
func decideDirect(cmd *cobra.Command, conn *connections, f decisionFlags) error {
	if f.tenant == "" {
		return errors.New("give --tenant T (or set ONCERUN_API to decide through the approvals service)")
	}
	approver := cmp.Or(f.as, conn.env.User)
	if approver == "" {
		return errors.New("give --as NAME: the decision needs an approver's name")
	}
	if err := (workflows.Approval{Decision: f.decision, Approver: approver, Args: f.args}).Validate(); err != nil {
		return fmt.Errorf("--as: %w", err)
	}
	if err := untrusted.Text("comment", f.comment, workflows.MaxCommentBytes); err != nil {
		return fmt.Errorf("--%w", err)
	}
	ctx := cmd.Context()
	rc, err := conn.client(ctx, true)
	if err != nil {
		return err
	}
	if f.decision == workflows.DecisionEdit {
		// Edits are checked against the deployment's tools.
		reg, err := conn.env.Registry()
		if err != nil {
			return err
		}
		rc.Tools = reg
	}
	st, err := rc.Status(ctx, f.tenant, f.runID)
	if err != nil {
		return err
	}
	if f.step > int64(len(st.Steps)) {
		return fmt.Errorf("run %s has no step %d: %w", f.runID, f.step, runs.ErrNotFound)
	}
	step := st.Steps[f.step-1]
	if step.State != workflows.StepPendingApproval {
		// Nothing is recorded for a step the run does not wait on.
		decided := ""
		if ap := step.Approval; ap != nil && ap.Decision != "" {
			decided = fmt.Sprintf("; it was %s by %s at %s", ap.Decision.PastTense(), ap.Approver, when(ap.DecidedAt))
		}
		return fmt.Errorf("run %s step %d (%s) is %s: %w%s", f.runID, f.step, step.Tool, step.State, runs.ErrNotPending, decided)
	}
	d, err := rc.Decide(ctx, rc.Pool, approvalstore.DecisionRequest{StepRequest: local(f.tenant, f.runID, f.step, cmp.Or(f.round, waitRound(step.Approval)), approver),
		Decision: string(f.decision), ArgsHash: cmp.Or(f.argsHash, step.ArgsHash), EditedArgs: f.args, Comment: f.comment})
	if errors.Is(err, approvalstore.ErrNotFound) {
		return notInDatabase(conn.env, f.runID, f.step, "waits for approval")
	}
	if err != nil {
		return err
	}
	rec := d.Decision
	if !d.Repeated {
		if step, err = rc.AwaitDecision(ctx, rec, 10*time.Second); err != nil {
			return err
		}
	}
	out := cmd.OutOrStdout()
	switch {
	case f.asJSON:
		return writeJSON(out, approvals.DecideResponse{Decision: decisionJSON(rec), Repeated: d.Repeated})
	case d.Repeated:
		fmt.Fprintf(out, "step %d of run %s was already %s by %s at %s\n", f.step, f.runID, f.decision.PastTense(), rec.Approver, when(rec.DecidedAt))
	case step.State == workflows.StepPendingApproval:
		fmt.Fprintf(out, "%s step %d of run %s as %s; the run has not applied it yet (is a worker running?)\n",
			f.decision.PastTense(), f.step, f.runID, approver)
	default:
		fmt.Fprintf(out, "%s step %d (%s) of run %s as %s; the step is now %s\n",
			f.decision.PastTense(), f.step, step.Tool, f.runID, approver, step.State)
	}
	return nil
}

// cliUserAgent is the user agent the audit tables record for the CLI
// without ONCERUN_API.
const cliUserAgent = "oncerun-cli"

// decisionJSON is a decision of record as the approvals API shows it.
func decisionJSON(rec approvalstore.DecisionRecord) approvals.DecisionRecord {
	return approvals.DecisionRecord{RunID: rec.RunID, Step: rec.Step, Decision: workflows.Decision(rec.Decision), Approver: rec.Approver,
		Role: approvals.Role(rec.Role), Comment: rec.Comment, ArgsHash: rec.ArgsHash, EditedArgs: rec.EditedArgs,
		EditedArgsHash: rec.EditedArgsHash, DecidedAt: rec.DecidedAt, Via: rec.Via}
}

// left is the time from now to deadline as the inbox says it, or "passed".
func left(now, deadline time.Time) string {
	return cmp.Or(approvals.TimeLeft(int64(deadline.Sub(now)/time.Second)), "passed")
}

// waitRound is the round a step's approval waits in, as the run reports
// it (1 for a run from before rounds).
func waitRound(ap *workflows.StepApproval) int {
	if ap == nil {
		return 0
	}
	return max(ap.Round, 1)
}

// notInDatabase is the error of a step the run, asked through Temporal,
// says waits (doing, in words), while the database the CLI reached has no
// row for it: most often DATABASE_URL names another database than the
// run's workers use.
func notInDatabase(env Env, runID string, step int64, doing string) error {
	return fmt.Errorf("run %s exists in Temporal, and its step %d %s, but the database at %s does not hold the run: "+
		"set DATABASE_URL to the database its workers use", runID, step, doing, untrusted.Redact(env.databaseURL()))
}
