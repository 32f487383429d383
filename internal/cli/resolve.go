package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/workflows"
)

// resolveFlags are the resolve command's flags.
type resolveFlags struct {
	tenant, runID, as string
	step              int64
	round             int
	outcome, result   string
	note              string
	asJSON            bool
}

func newResolveCmd(conn *connections) *cobra.Command {
	var f resolveFlags
	cmd := &cobra.Command{
		Use:   "resolve [--tenant T] --run-id R --step N --outcome applied|not_applied",
		Short: "Say whether the effect of a step whose outcome is unknown happened",
		Long: `Answer a step in needs_resolution: an external effect (a refund, say) whose
outcome nobody could tell. Check with the provider, then say:

  applied      the effect happened; the step completes with --result (any
               JSON, the provider's answer if you have it; default null)
  not_applied  it did not happen; the run sends it again under the same key

The answer is recorded in the audit table (who, when, how, what) before it
is sent to the run, by the same code whichever way it comes. The first answer about a round is the answer of record:
the same answer again is harmless, another one is refused.

With ONCERUN_API set, the answer goes through the approvals service: your
token names you and your tenant. Without it, the command asks the run
whether the step needs resolution, records the answer with DATABASE_URL
(via cli, role local) and signals the run through Temporal.

--json prints the answer of record: run_id, step, round, outcome, result,
resolver, role, note, decided_at and via, with repeated.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := f.request()
			if err != nil {
				return err
			}
			api, err := conn.api()
			if err != nil {
				return err
			}
			var res approvals.ResolveResponse
			if api != nil {
				if err := refuseInAPIMode(map[string]bool{"tenant": cmd.Flags().Changed("tenant"), "as": cmd.Flags().Changed("as")}); err != nil {
					return err
				}
				if res, err = api.Resolve(cmd.Context(), f.runID, f.step, req); err != nil {
					return err
				}
			} else if res, err = resolveDirect(cmd, conn, f, req); err != nil {
				return err
			}
			return printResolution(cmd.OutOrStdout(), res, f.asJSON)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.tenant, "tenant", "", "tenant of the run (required without ONCERUN_API)")
	fl.StringVar(&f.runID, "run-id", "", "the run's id (required)")
	fl.Int64Var(&f.step, "step", 0, "the step's number (required)")
	fl.StringVar(&f.outcome, "outcome", "", "applied or not_applied (required)")
	fl.StringVar(&f.result, "result", "", "with applied: the effect's result as JSON (default null)")
	fl.StringVar(&f.note, "note", "", "a note recorded with the answer")
	fl.IntVar(&f.round, "round", 0, "the round you answer about (default: the step's current round)")
	fl.StringVar(&f.as, "as", "", "your name, recorded with the answer (default $USER)")
	fl.BoolVar(&f.asJSON, "json", false, "print the answer of record as JSON")
	for _, name := range []string{"run-id", "step", "outcome"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// request checks the flags that need no connection and makes the request,
// naming the flag that is wrong.
func (f resolveFlags) request() (approvals.ResolveRequest, error) {
	if f.step < 1 {
		return approvals.ResolveRequest{}, fmt.Errorf("--step %d: steps are numbered from 1", f.step)
	}
	if f.round < 0 {
		return approvals.ResolveRequest{}, fmt.Errorf("--round %d: rounds are numbered from 1 (leave it out for the current one)", f.round)
	}
	o := workflows.Outcome(f.outcome)
	if o != workflows.OutcomeApplied && o != workflows.OutcomeNotApplied {
		return approvals.ResolveRequest{}, fmt.Errorf("--outcome %q: give applied or not_applied", f.outcome)
	}
	req := approvals.ResolveRequest{Outcome: f.outcome, Note: f.note, Round: f.round}
	if f.result != "" {
		if o != workflows.OutcomeApplied {
			return approvals.ResolveRequest{}, errors.New("--result is given only with --outcome applied")
		}
		// Checked as the service checks it, so that the error names the
		// flag: JSON whose strings are text and whose numbers read back.
		if err := untrusted.Value("--result", []byte(f.result), workflows.MaxResultBytes); err != nil {
			return approvals.ResolveRequest{}, err
		}
		req.Result = json.RawMessage(f.result)
	}
	// The resolver is checked where it is known; a placeholder stands in.
	r := workflows.Resolution{Step: f.step, Round: f.round, Outcome: o, Result: req.Result, Resolver: "x", Note: f.note}
	if err := r.Validate(); err != nil {
		return approvals.ResolveRequest{}, fmt.Errorf("--%s", err)
	}
	return req, nil
}

// resolveDirect answers without the approvals service: it asks the run
// whether the step needs resolution (otherwise it stops and records
// nothing), then records and sends the answer through the path every
// answer takes (runs.Client.Resolve), via cli.
func resolveDirect(cmd *cobra.Command, conn *connections, f resolveFlags, req approvals.ResolveRequest) (approvals.ResolveResponse, error) {
	if f.tenant == "" {
		return approvals.ResolveResponse{}, errors.New("give --tenant T (or set ONCERUN_API to resolve through the approvals service)")
	}
	resolver := f.as
	if resolver == "" {
		resolver = conn.env.User
	}
	if resolver == "" {
		return approvals.ResolveResponse{}, errors.New("give --as NAME: the answer needs a resolver's name")
	}
	check := workflows.Resolution{Step: f.step, Outcome: workflows.Outcome(req.Outcome), Resolver: resolver}
	if err := check.Validate(); err != nil {
		return approvals.ResolveResponse{}, fmt.Errorf("--as: %w", err)
	}
	rc, err := conn.client(cmd.Context(), true)
	if err != nil {
		return approvals.ResolveResponse{}, err
	}
	st, err := rc.Status(cmd.Context(), f.tenant, f.runID)
	if err != nil {
		return approvals.ResolveResponse{}, err
	}
	if f.step > int64(len(st.Steps)) {
		return approvals.ResolveResponse{}, fmt.Errorf("run %s has no step %d", f.runID, f.step)
	}
	step := st.Steps[f.step-1]
	if step.State != workflows.StepNeedsResolution {
		msg := fmt.Sprintf("step %d (%s) of run %s is %s, not needs_resolution", f.step, step.Tool, f.runID, step.State)
		if r := step.Resolution; r != nil && r.Outcome != "" {
			msg += fmt.Sprintf(": it was resolved as %s by %s at %s", r.Outcome, r.Resolver, when(r.DecidedAt))
		}
		return approvals.ResolveResponse{}, errors.New(msg)
	}
	if req.Round == 0 && step.Resolution != nil {
		// The answer is about the round the run waits on.
		req.Round = step.Resolution.Round
	}
	res, err := rc.Resolve(cmd.Context(), rc.Pool, approvalstore.ResolveRequest{StepRequest: local(f.tenant, f.runID, f.step, req.Round, resolver),
		Outcome: req.Outcome, Result: req.Result, Note: req.Note})
	if errors.Is(err, approvalstore.ErrNotFound) {
		return approvals.ResolveResponse{}, notInDatabase(conn.env, f.runID, f.step, "needs resolution")
	}
	if err != nil {
		return approvals.ResolveResponse{}, err
	}
	return approvals.ResolveResponse{Resolution: resolutionJSON(res.Decision), Repeated: res.Repeated}, nil
}

// resolutionJSON is an answer of record as the approvals API shows it.
func resolutionJSON(rec approvalstore.ResolutionRecord) approvals.ResolutionRecord {
	return approvals.ResolutionRecord{RunID: rec.RunID, Step: rec.Step, Round: rec.Round, Outcome: workflows.Outcome(rec.Decision),
		Result: rec.Result, Resolver: rec.Resolver, Role: approvals.Role(rec.Role), Note: rec.Note, DecidedAt: rec.DecidedAt,
		Via: rec.Via}
}

func printResolution(out io.Writer, res approvals.ResolveResponse, asJSON bool) error {
	if asJSON {
		return writeJSON(out, res)
	}
	r := res.Resolution
	result := ""
	if len(r.Result) > 0 {
		result = " with result " + oneLine(untrusted.Compact(r.Result))
	}
	if res.Repeated {
		fmt.Fprintf(out, "round %d of step %d of run %s was already answered %s%s by %s at %s\n",
			r.Round, r.Step, r.RunID, r.Outcome, result, r.Resolver, when(r.DecidedAt))
		return nil
	}
	fmt.Fprintf(out, "answered %s%s for round %d of step %d of run %s as %s; the run applies the answer\n",
		r.Outcome, result, r.Round, r.Step, r.RunID, r.Resolver)
	return nil
}

// local is a request of the CLI's, by who, about a round of step of run
// runID of tenant.
func local(tenant, runID string, step int64, round int, who string) approvalstore.StepRequest {
	r := approvalstore.Local(tenant, runID, step, who)
	r.Round, r.UserAgent = round, cliUserAgent
	return r
}
