package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/spend"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// PlanFile is the format of a plan file: the calls of a scripted run, in
// order.
type PlanFile struct {
	Steps []planner.Call `json:"steps"`
}

// MaxPlanFileBytes bounds a plan file: its calls travel in the run's input,
// which is at most workflows.MaxRunInputBytes.
const MaxPlanFileBytes = workflows.MaxRunInputBytes

// ReadPlan reads and checks a plan file against reg, the deployment's tool
// registry (see [Env.Registry]): the file must be a JSON object with a non-empty "steps" array, read strictly
// (field names exactly as documented, none twice, none unknown), and each
// step must name a known tool with arguments that match its schema.
func ReadPlan(path string, reg *tools.Registry) ([]planner.Call, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, MaxPlanFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	if len(raw) > MaxPlanFileBytes {
		return nil, fmt.Errorf("plan %s is larger than %d bytes, the limit of a plan file (a run's whole input is at most that)", path, MaxPlanFileBytes)
	}
	return parsePlan(path, raw, reg)
}

// parsePlan checks the content raw of the plan file named name.
func parsePlan(name string, raw []byte, reg *tools.Registry) ([]planner.Call, error) {
	var pf PlanFile
	if err := untrusted.Decode(raw, &pf); err != nil {
		return nil, fmt.Errorf("plan %s is not a valid plan file: %w", name, err)
	}
	if len(pf.Steps) == 0 {
		return nil, fmt.Errorf(`plan %s has no steps: want {"steps": [{"tool": "...", "args": {...}}, ...]}`, name)
	}
	if len(pf.Steps) > workflows.MaxPlanCalls {
		return nil, fmt.Errorf("plan %s has %d steps; a plan has at most %d", name, len(pf.Steps), workflows.MaxPlanCalls)
	}
	for i, c := range pf.Steps {
		if c.Malformed != "" {
			return nil, fmt.Errorf(`plan %s step %d: "malformed" is for planners; give "args"`, name, i+1)
		}
		if _, err := reg.Prepare(c); err != nil {
			return nil, fmt.Errorf("plan %s step %d: %w", name, i+1, err)
		}
	}
	return pf.Steps, nil
}

func newStartCmd(conn *connections) *cobra.Command {
	var (
		in       workflows.RunInput
		planPath string
		budget   string
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "start --tenant T --run-id R (--plan FILE | --goal TEXT)",
		Short: "Start an agent run, or find it started",
		Long: `Start an agent run. The run id is yours: starting the same run again returns
the run started first, and starting it with other input is an error.

A plan file lists the calls of a scripted run:
  {"steps": [{"tool": "lookup_order", "args": {"order_id": "1001"}}, ...]}
Without a plan, the openai planner works towards --goal.

--spend is the run's budget per currency, in minor units ('{"EUR":50000}'
or EUR=50000,USD=100): a step that would take the run past it waits for
approval, and so does a step that spends a currency the budget does not
name, unless --spend-other-currencies allow.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if planPath == "" && in.Goal == "" {
				return errors.New("give --plan FILE or --goal TEXT")
			}
			if e := in.OnApprovalExpiry; e != "" && e != workflows.ExpiryExpire && e != workflows.ExpiryReject {
				return fmt.Errorf("--on-approval-expiry %q: want %s or %s", e, workflows.ExpiryExpire, workflows.ExpiryReject)
			}
			if budget != "" {
				amounts, err := parseSpend(budget)
				if err != nil {
					return err
				}
				in.Limits.Spend = amounts
			}
			switch in.Limits.OtherCurrencies {
			case spend.OtherPark:
				in.Limits.OtherCurrencies = "" // the default, the same input as none
			case "", spend.OtherAllow:
			default:
				return fmt.Errorf("--spend-other-currencies %q: want %s or %s", in.Limits.OtherCurrencies, spend.OtherPark, spend.OtherAllow)
			}
			if planPath != "" {
				reg, err := conn.env.Registry()
				if err != nil {
					return err
				}
				plan, err := ReadPlan(planPath, reg)
				if err != nil {
					return err
				}
				in.Plan = plan
			}
			api, err := conn.api()
			if err != nil {
				return err
			}
			if api != nil {
				return startViaAPI(cmd, api, in, asJSON)
			}
			if in.Tenant == "" {
				return errors.New("give --tenant T (or set ONCERUN_API to start through the approvals service)")
			}
			if err := in.Validate(); err != nil {
				return err
			}
			in.StartedBy = conn.env.User
			rc, err := conn.client(cmd.Context(), false)
			if err != nil {
				return err
			}
			started, err := rc.Start(cmd.Context(), in)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(out, started)
			}
			if started.Existing {
				fmt.Fprintf(out, "run %s of tenant %s was already started with this input (workflow %s)\n",
					in.RunID, in.Tenant, started.WorkflowID)
				return nil
			}
			fmt.Fprintf(out, "started run %s of tenant %s (workflow %s)\n", in.RunID, in.Tenant, started.WorkflowID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&in.Tenant, "tenant", "", "tenant the run belongs to (required without ONCERUN_API)")
	f.StringVar(&in.RunID, "run-id", "", "your id for the run (required)")
	f.StringVar(&planPath, "plan", "", "plan file of a scripted run")
	f.StringVar(&in.Goal, "goal", "", "what the agent should achieve")
	f.StringVar(&in.Planner, "planner", "", "planner: script (default with --plan) or openai (default with --goal)")
	f.IntVar(&in.Limits.MaxSteps, "max-steps", 0, fmt.Sprintf("most tool calls the run makes (default %d)", workflows.DefaultMaxSteps))
	f.IntVar(&in.Limits.Parallel, "parallel", 0, fmt.Sprintf("how many steps of one planning turn run at once (default %d, at most %d)",
		workflows.DefaultParallel, workflows.MaxParallel))
	f.DurationVar(&in.Limits.ApprovalDeadline, "approval-deadline", 0,
		fmt.Sprintf("how long a step waits for a decision (default %s, at most %s)", workflows.DefaultApprovalDeadline, workflows.MaxApprovalDeadline))
	f.StringVar(&budget, "spend", "", `the run's budget per currency, in minor units: '{"EUR":50000}' or EUR=50000,USD=100`)
	f.StringVar(&in.Limits.OtherCurrencies, "spend-other-currencies", "",
		"what the budget does with an amount in a currency it does not name: park (default) or allow")
	f.StringVar(&in.OnApprovalExpiry, "on-approval-expiry", "",
		"what a step's deadline does when nobody decided: expire (default) or reject")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	_ = cmd.MarkFlagRequired("run-id")
	return cmd
}

// startViaAPI starts a run through the approvals service; the tenant is
// the token's.
func startViaAPI(cmd *cobra.Command, api *approvals.Client, in workflows.RunInput, asJSON bool) error {
	if err := refuseInAPIMode(map[string]bool{"tenant": cmd.Flags().Changed("tenant")}); err != nil {
		return err
	}
	req := approvals.StartRequest{RunID: in.RunID, Goal: in.Goal, Planner: in.Planner, Plan: in.Plan, OnApprovalExpiry: in.OnApprovalExpiry}
	if in.Limits.MaxSteps != 0 || in.Limits.ApprovalDeadline != 0 || in.Limits.Parallel != 0 || in.Limits.Spend != nil ||
		in.Limits.OtherCurrencies != "" {
		req.Limits = &approvals.StartLimits{MaxSteps: in.Limits.MaxSteps, Parallel: in.Limits.Parallel, Spend: in.Limits.Spend,
			OtherCurrencies: in.Limits.OtherCurrencies}
		if in.Limits.ApprovalDeadline != 0 {
			req.Limits.ApprovalDeadline = in.Limits.ApprovalDeadline.String()
		}
	}
	res, _, err := api.Start(cmd.Context(), req)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if asJSON {
		return writeJSON(out, res)
	}
	if res.Existing {
		fmt.Fprintf(out, "run %s of tenant %s was already started with this input (workflow %s)\n", res.RunID, res.Tenant, res.WorkflowID)
		return nil
	}
	fmt.Fprintf(out, "started run %s of tenant %s (workflow %s)\n", res.RunID, res.Tenant, res.WorkflowID)
	return nil
}

// parseSpend reads --spend: a JSON object of minor units by currency
// ({"EUR":50000}), or CODE=MINOR pairs separated by commas
// (EUR=50000,USD=100). The codes and amounts are checked where the run
// input is (workflows.RunInput.Validate, as limits.spend).
func parseSpend(v string) (map[string]int64, error) {
	v = strings.TrimSpace(v)
	out := map[string]int64{}
	if strings.HasPrefix(v, "{") {
		if err := untrusted.Decode([]byte(v), &out); err != nil {
			return nil, fmt.Errorf("--spend: %w", err)
		}
		return out, nil
	}
	for pair := range strings.SplitSeq(v, ",") {
		code, amount, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			return nil, fmt.Errorf(`--spend %q: want CODE=MINOR pairs such as EUR=50000,USD=100, or a JSON object such as {"EUR":50000}`, v)
		}
		code = strings.TrimSpace(code)
		n, err := strconv.ParseInt(strings.TrimSpace(amount), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--spend: %s=%s is not a whole number of minor units", code, amount)
		}
		if _, twice := out[code]; twice {
			return nil, fmt.Errorf("--spend: %s is given twice", code)
		}
		out[code] = n
	}
	return out, nil
}

// writeJSON prints v as indented JSON.
func writeJSON(w interface{ Write([]byte) (int, error) }, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// when formats a time for people.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}
