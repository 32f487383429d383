package cli

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/internal/money"
	"github.com/oncerun/oncerun/internal/questions"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

func newStatusCmd(conn *connections) *cobra.Command {
	var (
		tenant, runID string
		asJSON        bool
	)
	cmd := &cobra.Command{
		Use:   "status --tenant T --run-id R",
		Short: "Show a run and its steps",
		Long: `Show a run's state and each step: tool, state, arguments hash and result.

A paused run says who paused it and why; a cancelled run prints its
receipt: who cancelled it, every step and how it ended, the steps still
running and those waiting for a person's answer.

--json prints the run's status object: tenant, run_id, goal, planner, state,
message, started_at, updated_at, paused, cancel, receipt, messages, budget,
spend (per currency: spent, held and budget) and steps,
each step with step, turn, call_id, tool, class, key, args, args_hash, state,
result, summary, error, replayed, approval and its timestamps.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := runStatus(cmd, conn, tenant, runID)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(out, st)
			}
			fmt.Fprintf(out, "run %s of tenant %s: %s\n", st.RunID, st.Tenant, st.State)
			if st.Goal != "" {
				fmt.Fprintf(out, "goal: %s\n", inline(st.Goal))
			}
			if st.Message != "" {
				fmt.Fprintf(out, "message: %s\n", inline(st.Message))
			}
			if st.Error != "" {
				fmt.Fprintf(out, "error: %s\n", inline(st.Error))
			}
			if st.Paused != nil {
				fmt.Fprintln(out, pausedLine(st.Paused))
			}
			for _, t := range st.Spend {
				fmt.Fprintln(out, spendLine(t))
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "STEP\tTOOL\tSTATE\tARGS HASH\tRESULT")
			for _, s := range st.Steps {
				result := s.Summary
				if s.Error != "" {
					result = s.Error
				}
				state := string(s.State)
				if s.Replayed {
					state += " (replayed)"
				}
				if s.Guarantee == tools.GuaranteeAtLeastOnce {
					state += " (at-least-once)"
				}
				if r := s.Resolution; r != nil && s.State == workflows.StepNeedsResolution {
					result = fmt.Sprintf("outcome unknown since %s: %s", r.FirstSentAt.UTC().Format(time.RFC3339), r.Known)
				}
				if n := len(s.Questions); n > 0 && s.State == workflows.StepWaitingForInput {
					q := s.Questions[n-1]
					result = fmt.Sprintf("its server asks a person (round %d, until %s): %s", q.Round, q.Deadline.UTC().Format(time.RFC3339),
						(questions.Asked{Items: q.Items}).Summary())
				}
				if s.State == workflows.StepDuplicate {
					result = fmt.Sprintf("repeats step %d, not executed again: %s", s.DuplicateOf, s.Summary)
				}
				if ap := s.Approval; ap != nil && s.State == workflows.StepPendingApproval {
					result = fmt.Sprintf("waits for a decision until %s (then %s)", ap.Deadline.UTC().Format(time.RFC3339),
						cmp.Or(ap.OnExpiry, workflows.ExpiryExpire))
					if ap.EditRefused != "" {
						result += "; an edit was refused: " + ap.EditRefused
					}
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", s.Step, s.Tool, state, s.ArgsHash[:12], oneLine(result))
				if e := s.Edit; e != nil {
					fmt.Fprintf(tw, "\t  edited by %s at %s\tproposed\t%s\t%s\n", e.EditedBy, e.EditedAt.UTC().Format(time.RFC3339),
						e.OriginalArgsHash[:12], oneLine(untrusted.Compact(e.OriginalArgs)))
					fmt.Fprintf(tw, "\t  %s\tran\t%s\t%s\n", oneLine(cmp.Or(e.Comment, "(no comment)")), e.ArgsHash[:12],
						oneLine(untrusted.Compact(e.Args)))
				}
				for _, fu := range s.FollowUps {
					fmt.Fprintf(tw, "\t  follow-up %d\t%s\t%s\t%s\n", fu.Seq, fu.Tool, fu.State, oneLine(fu.Error))
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if st.Receipt != nil {
				fmt.Fprintln(out, "\nreceipt:")
				if err := printReceipt(out, st.Tenant, st.RunID, st.Receipt); err != nil {
					return err
				}
				return nil
			}
			for _, s := range st.Steps {
				if s.State == workflows.StepNeedsResolution {
					fmt.Fprintf(out, "step %d needs resolution: find out whether its effect happened, then\n  oncerun resolve --tenant %s --run-id %s --step %d --outcome applied|not_applied\n",
						s.Step, st.Tenant, st.RunID, s.Step)
				}
				if s.State == workflows.StepWaitingForInput {
					fmt.Fprintf(out, "step %d waits for an answer to its server's questions:\n  oncerun answer --tenant %s --run-id %s --step %d --content '{...}' (or --action decline)\n",
						s.Step, st.Tenant, st.RunID, s.Step)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tenant, "tenant", "", "tenant of the run (required without ONCERUN_API)")
	f.StringVar(&runID, "run-id", "", "the run's id (required)")
	f.BoolVar(&asJSON, "json", false, "print the status as JSON")
	_ = cmd.MarkFlagRequired("run-id")
	return cmd
}

// runStatus reads a run's status through the API when ONCERUN_API is set,
// from Temporal otherwise.
func runStatus(cmd *cobra.Command, conn *connections, tenant, runID string) (workflows.Status, error) {
	api, err := conn.api()
	if err != nil {
		return workflows.Status{}, err
	}
	if api != nil {
		if err := refuseInAPIMode(map[string]bool{"tenant": cmd.Flags().Changed("tenant")}); err != nil {
			return workflows.Status{}, err
		}
		return api.Status(cmd.Context(), runID)
	}
	if tenant == "" {
		return workflows.Status{}, errors.New("give --tenant T (or set ONCERUN_API to ask the approvals service)")
	}
	// With the database: what the run's steps spent is there.
	rc, err := conn.client(cmd.Context(), true)
	if err != nil {
		return workflows.Status{}, err
	}
	return rc.Status(cmd.Context(), tenant, runID)
}

// spendLine says what a run spent in one currency, against its budget:
// "spend: 259.00 EUR spent, 0.00 EUR held, of a budget of 500.00 EUR
// (51.8% used)".
func spendLine(t workflows.SpendTotal) string {
	line := fmt.Sprintf("spend: %s spent, %s held", money.Format(t.Spent, t.Currency), money.Format(t.Held, t.Currency))
	if t.Budget == nil {
		return line + ", no budget in " + t.Currency
	}
	used := 0.0
	switch {
	case *t.Budget > 0:
		used = float64(t.Spent+t.Held) / float64(*t.Budget) * 100
	case t.Spent+t.Held > 0:
		// A budget of 0 is used up by anything.
		used = 100
	}
	return fmt.Sprintf("%s, of a budget of %s (%s%% used)", line, money.Format(*t.Budget, t.Currency),
		strconv.FormatFloat(used, 'f', 1, 64))
}

// inline keeps s on one line: a newline or a tab in it is shown as \n or
// \t, so that a run's text cannot pass for lines of the output. Other
// control characters are escaped by the terminal writer (see Execute).
func inline(s string) string {
	return strings.NewReplacer("\n", `\n`, "\t", `\t`).Replace(s)
}

// cell is s for a table's cell: on one line, and cut to 80 bytes unless
// wide.
func cell(s string, wide bool) string {
	if wide {
		return inline(strings.Join(strings.Fields(s), " "))
	}
	return oneLine(s)
}

// oneLine keeps the first 80 bytes of s on one line.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 80 {
		cut := 80
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
