package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/internal/cli"
	"github.com/oncerun/oncerun/internal/payments"
	"github.com/oncerun/oncerun/internal/planner"
	sandbox "github.com/oncerun/oncerun/internal/sandbox/payments"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/workflows"
)

// The pages whose blocks are run, named from this package's folder.
var (
	readmePath    = filepath.Join("..", "..", "README.md")
	limitsDocPath = filepath.Join("..", "..", "docs", "limits.md")
)

// readersCLI runs the CLI as the README's reader does: in a shell where
// the dev stack's banner line `export PAYMENTS_BASE_URL=…
// PAYMENTS_API_KEY=…` was run, so that reconcile reads the sandbox
// provider's ledger, and USER is dana.
func (w *externalWorld) readersCLI() func(args ...string) (string, error) {
	vars := map[string]string{
		settings.EnvDatabaseURL:     w.pool.Config().ConnString(),
		settings.EnvTaskQueue:       w.queue,
		settings.EnvPaymentsBaseURL: w.provider.URL(),
		settings.EnvPaymentsAPIKey:  sandbox.DefaultAPIKey,
		"USER":                      "dana",
	}
	env := cli.EnvFrom(func(name string) string { return vars[name] }, nil)
	env.Temporal = w.tc
	return func(args ...string) (string, error) { return runCLI(env, args...) }
}

// stepStates returns the STATE column of each step row `status` printed,
// by step number.
func stepStates(out string) map[string]string {
	states := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^(\d+)\s+\S+\s+(\S+)`).FindAllStringSubmatch(out, -1) {
		states[m[1]] = m[2]
	}
	return states
}

// TestTheREADMEWalkthroughRunsAsWritten runs the README's CLI walkthrough
// (the sh block starting `./oncerun start --tenant acme --run-id r1`),
// line by line as written, against a worker, Temporal, PostgreSQL and the
// sandbox payment provider, and checks what each line's comment says.
//
// The README's run ids r1, r2 and r3 are the test's own (w.id): the
// shared Temporal server keeps the runs of other tests and of -count.
// The world is put into the state each line assumes, as a reader's
// would be: the run has reached its approval before `status`, the refund
// of run r2 lost its answer before the `approvals` that lists it, a drift
// is older than the settlement window before `reconcile`. The two lines
// building and running oncerun-dev are out of scope (and only those):
// the dev tests build and run that binary, and the sandbox provider here
// runs in-process.
func TestTheREADMEWalkthroughRunsAsWritten(t *testing.T) {
	t.Parallel()
	w := setupExternal(t, 0)
	ctx := context.Background()
	// Run r3 (--goal) asks the openai planner, here a fake model that
	// proposes one credit of 50.00 EUR, then is done.
	w.serveModel(func(n int, _ modelRequest) []modelCall {
		if n == 1 {
			return []modelCall{{ID: "c1", Tool: shop.ToolIssueCredit, Args: map[string]any{
				"order_id": "1002", "reason": "goodwill", "amount_cents": 5000, "currency": "EUR"}}}
		}
		return nil
	})
	w.startWorker("w", worker.Options{})
	oncerun := w.readersCLI()
	r1, r2, r3 := w.id("r1"), w.id("r2"), w.id("r3")
	lines, first := readBlock(t, readmePath, "sh", "./oncerun start --tenant acme --run-id r1")
	cmds := parseCommands(t, readmePath, lines, first, "./oncerun", func(l string) bool {
		return l == "go build -o oncerun-dev ./cmd/oncerun-dev" || strings.HasPrefix(l, "./oncerun-dev ")
	})

	payment := w.pay("pay_"+w.id("r2"), 10000)
	// What one line learns and a later one checks: r1's Temporal run, and
	// the key of the drift reconcile finds.
	var firstRunID, phantom string
	steps := []docStep{{
		words: "start",
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Contains(t, out, "started run "+r1+" of tenant acme")
			d, err := w.tc.DescribeWorkflowExecution(ctx, workflows.WorkflowID("acme", r1), "")
			require.NoError(t, err)
			firstRunID = d.WorkflowExecutionInfo.Execution.RunId
		},
	}, {
		words: "status", claim: "steps 1-2 done, step 3 pending_approval",
		before: func() {
			w.waitFor("acme", r1, "the credit's approval", func(s workflows.Status) bool { return s.State == workflows.RunWaitingForApproval })
		},
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Equal(t, map[string]string{"1": "done", "2": "done", "3": "pending_approval"}, stepStates(out))
		},
	}, {
		words: "approvals", claim: "lists step 3, issue_credit, AMOUNT 259.00 EUR (arguments cut to 80 bytes)",
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Regexp(t, `(?m)^TENANT\s+RUN\s+STEP\s+TOOL\s+KIND\s+AMOUNT\s+ARGS\s`, out)
			m := regexp.MustCompile(`(?m)^acme\s+` + r1 + `\s+3\s+issue_credit\s+rule\s+259\.00 EUR\s+(\{.*…)\s`).FindStringSubmatch(out)
			require.NotNil(t, m, "a row for step 3 with its amount and its arguments cut")
			assert.Len(t, strings.TrimSuffix(m[1], "…"), 80, "the arguments cut to 80 bytes")
		},
	}, {
		words: "approvals", claim: `the whole arguments: "amount_cents": 25900`,
		check: func(out string, err error) {
			require.NoError(t, err, out)
			m := regexp.MustCompile(`(?m)^acme\s+` + r1 + `\s+3\s+issue_credit\s.*\s(\{.*\})\s`).FindStringSubmatch(out)
			require.NotNil(t, m, "a row for step 3 with its arguments whole")
			var args map[string]any
			require.NoError(t, json.Unmarshal([]byte(m[1]), &args), "the arguments whole are their JSON")
			assert.Contains(t, m[1], `"amount_cents": 25900`)
			assert.Equal(t, map[string]any{"order_id": "1001", "reason": "damaged_in_transit", "amount_cents": 25900.0, "currency": "EUR"}, args)
		},
	}, {
		words: "approve",
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Contains(t, out, "approved step 3 (issue_credit) of run "+r1+" as dana")
		},
	}, {
		words: "watch", claim: "the run's story, each event once, to run.completed; exits 0",
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Contains(t, out, "approval.approved")
			assert.Contains(t, out, "step.applied")
			lines := strings.Split(strings.TrimSpace(out), "\n")
			assert.Contains(t, lines[len(lines)-1], "run.completed", "the story ends with the run")
			assert.Equal(t, 1, strings.Count(out, "run.started"), "each event once")
		},
	}, {
		words: "status", claim: "completed, every step done",
		before: func() { w.result("acme", r1) },
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Contains(t, out, "run "+r1+" of tenant acme: completed")
			assert.Equal(t, map[string]string{"1": "done", "2": "done", "3": "done", "4": "done"}, stepStates(out))
		},
	}, {
		words: "start", claim: `"already started with this input": the same run`,
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Contains(t, out, "run "+r1+" of tenant acme was already started with this input")
			d, err := w.tc.DescribeWorkflowExecution(ctx, workflows.WorkflowID("acme", r1), "")
			require.NoError(t, err)
			assert.Equal(t, firstRunID, d.WorkflowExecutionInfo.Execution.RunId, "the same run, not a new one")
			assert.Equal(t, 1, w.count("credits", "tenant = 'acme' AND order_id = '1001'"), "credited once")
		},
	}, {
		words: "approvals", claim: "also lists steps whose external effect's outcome is unknown",
		before: func() {
			// Run r2 refunds at step 4; the provider applies the refund and
			// the answer is lost, and its ledger cannot be read: nobody can
			// tell. The ledger is readable again by the time the reader
			// answers.
			require.NoError(t, w.provider.SetFault(sandbox.FaultDropAfterApply, 1))
			require.NoError(t, w.provider.SetFault(sandbox.FaultReadUnavailable, 3))
			refund := fmt.Sprintf(`{"order_id":"1001","payment_id":%q,"amount_cents":2500,"currency":"EUR","reason":"damaged"}`, payment)
			_, err := w.runs.Start(ctx, workflows.RunInput{Tenant: "acme", RunID: r2, Plan: []planner.Call{
				call(shop.ToolLookupOrder, `{"order_id":"1001"}`),
				call(shop.ToolLookupOrder, `{"order_id":"1002"}`),
				call(shop.ToolAddOrderNote, `{"order_id":"1001","text":"refunding the payment"}`),
				call(payments.RefundPayment, refund),
			}})
			require.NoError(t, err)
			w.waitFor("acme", r2, "needs_resolution", func(s workflows.Status) bool { return s.State == workflows.RunNeedsResolution })
			require.NoError(t, w.provider.SetFault(sandbox.FaultReadUnavailable, 0))
		},
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Contains(t, out, "steps whose outcome is unknown (oncerun resolve):")
			assert.Regexp(t, `(?m)^acme\s+`+r2+`\s+4\s+refund_payment\s`, out)
		},
	}, {
		words: "resolve", claim: "the refund's paired read runs again: the provider's record, with its amount, is the result",
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Contains(t, out, `answered applied with result {"id":"re_123"} for round 1 of step 4 of run `+r2+" as dana")
			st := w.result("acme", r2)
			require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
			ledger := w.refunds(payment)
			require.Len(t, ledger, 1, "one refund at the provider")
			rec, err := payments.RecordOf(st.Steps[3].Result)
			require.NoError(t, err)
			assert.Equal(t, []any{ledger[0].ID, int64(2500), "eur"}, []any{rec.ID, rec.Amount, rec.Currency},
				"the provider's record, not the re_123 typed")
		},
	}, {
		words: "reconcile", claim: "compare refunds over 5m old (--settlement) with the provider's ledger now; each drift has an ID",
		before: func() {
			// oncerun's record holds a refund, an hour old, that the
			// provider never made.
			phantom = stepKey(t, w.id("by-hand"), 1, payments.RefundPayment)
			_, err := w.pool.Exec(ctx, `
INSERT INTO idempotency_keys (tenant, key, run_id, step, tool, state, args_hash, result, completed_at, expires_at, created_at)
VALUES ('acme', $1, $2, 1, 'refund_payment', 'completed', repeat('a', 64),
        '{"id":"re_lost","payment_id":"pay_lost","amount":900,"currency":"eur","status":"succeeded"}',
        now() - interval '1 hour', now() + interval '30 days', now() - interval '1 hour')`, phantom, w.id("by-hand"))
			require.NoError(t, err)
		},
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Contains(t, out, "open findings: 1; drift: 900 eur")
			assert.Regexp(t, `(?m)^ID\s+KIND\s+TENANT\s+TOOL\s+AMOUNT`, out)
			assert.Regexp(t, `(?m)^1\s+over_recorded\s+acme\s+refund_payment\s+-900 eur\s.*`+regexp.QuoteMeta(phantom), out)
		},
	}, {
		words: "reconcile", claim: "acknowledge the drift reconcile listed as ID 1",
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Contains(t, out, "acknowledged finding 1 (over_recorded, tenant acme, refund_payment, key "+phantom+") as dana")
			assert.Equal(t, 1, w.count("reconciliation_findings", "id = 1 AND acked_by = 'dana' AND ack_note = 'refunded by hand on 2 Dec'"))
		},
	}, {
		words: "limits set credits", claim: "credits may total 2,000.00 EUR a UTC day (--period rolling_24h)",
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Contains(t, out, "limit credits: 2,000.00 EUR per UTC day for issue_credit")
		},
	}, {
		words: "limits", claim: "NAME TOOLS PERIOD CAP SPENT HELD USED%; limits delete NAME",
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Regexp(t, `(?m)^NAME\s+TOOLS\s+PERIOD\s+CAP\s+SPENT\s+HELD\s+USED%$`, out)
			assert.Regexp(t, `(?m)^credits\s+issue_credit\s+utc_day\s+2,000\.00 EUR\s+\S+ EUR\s+\S+ EUR\s+\S+%$`, out)
		},
	}, {
		words: "start", claim: `a budget of 500.00 EUR for the run (or --spend '{"EUR":50000}')`,
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Contains(t, out, "started run "+r3+" of tenant acme")
			again, err := oncerun("start", "--tenant", "acme", "--run-id", r3, "--goal", "refund order 1002", "--spend", `{"EUR":50000}`)
			require.NoError(t, err, again)
			assert.Contains(t, again, "already started with this input", "the other form is the same budget")
			st := w.result("acme", r3)
			require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
			status, err := oncerun("status", "--tenant", "acme", "--run-id", r3)
			require.NoError(t, err, status)
			assert.Contains(t, status, "spend: 50.00 EUR spent, 0.00 EUR held, of a budget of 500.00 EUR (10.0% used)")
		},
	}}
	runPage(t, readmePath, cmds, steps, fromTheRoot(t, map[string]string{"r1": r1, "r2": r2, "r3": r3}), noVars(t, oncerun))
}

// TestTheREADMELimitsDocRunsAsWritten runs the commands of docs/limits.md
// (which the README's walkthrough links) as written: set two caps, list
// them, delete one.
func TestTheREADMELimitsDocRunsAsWritten(t *testing.T) {
	t.Parallel()
	e := setup(t)
	lines, first := readBlock(t, limitsDocPath, "sh", "./oncerun limits set credits")
	cmds := parseCommands(t, limitsDocPath, lines, first, "./oncerun", func(string) bool { return false })
	steps := []docStep{{
		words: "limits set credits",
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Contains(t, out, "limit credits: 2,000.00 EUR per UTC day for issue_credit")
		},
	}, {
		words: "limits set money",
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Contains(t, out, "limit money: 5,000.00 EUR per rolling 24 hours for issue_credit, refund_payment")
		},
	}, {
		words: "limits set usd-credits",
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Contains(t, out, "limit usd-credits: 1,000.00 USD per UTC day for issue_credit")
			js, err := e.oncerun("limits", "--tenant", "acme", "--json")
			require.NoError(t, err, js)
			assert.Contains(t, js, `"other_currencies": "allow"`, "--other-currencies allow is the cap's rule")
		},
	}, {
		words: "limits",
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Regexp(t, `(?m)^credits\s+issue_credit\s+utc_day\s+2,000\.00 EUR\s+0\.00 EUR\s+0\.00 EUR\s+0\.0%$`, out)
			assert.Regexp(t, `(?m)^money\s+issue_credit,refund_payment\s+rolling_24h\s+5,000\.00 EUR\s+0\.00 EUR\s+0\.00 EUR\s+0\.0%$`, out)
			assert.Regexp(t, `(?m)^usd-credits\s+issue_credit\s+utc_day\s+1,000\.00 USD\s+0\.00 USD\s+0\.00 USD\s+0\.0%$`, out)
		},
	}, {
		words: "limits delete money",
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Contains(t, out, "deleted limit money of tenant acme")
			left, err := e.oncerun("limits", "--tenant", "acme")
			require.NoError(t, err, left)
			assert.NotRegexp(t, `(?m)^money\s`, left)
			assert.Regexp(t, `(?m)^credits\s`, left)
		},
	}}
	runPage(t, limitsDocPath, cmds, steps, fromTheRoot(t, nil), noVars(t, e.oncerun))
}
