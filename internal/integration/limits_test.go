package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/payments"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// creditOf is an issue_credit call of cents EUR on order 1001 for reason:
// each reason is a credit of its own.
func creditOf(reason string, cents int64) planner.Call {
	return call(shop.ToolIssueCredit, fmt.Sprintf(`{"order_id":"1001","reason":%q,"amount_cents":%d,"currency":"EUR"}`, reason, cents))
}

// setLimit sets, as the operator ops, a daily cap of amount EUR cents
// named name on tools, and returns it as the API answered.
func (a *approvalsEnv) setLimit(name string, amount int64, tools ...string) approvals.Limit {
	a.t.Helper()
	r := a.do(http.MethodPut, "/v1/limits/"+name, "ops", approvals.LimitRequest{Tools: tools, Currency: "EUR", Amount: amount})
	require.Equal(a.t, http.StatusOK, r.status, "body: %s", r.body)
	var l approvals.Limit
	r.json(a.t, &l)
	return l
}

// limit reads the cap name of tenant acme, where it stands now.
func (a *approvalsEnv) limit(name string) approvals.Limit {
	a.t.Helper()
	r := a.do(http.MethodGet, "/v1/limits/"+name, "vic", nil)
	require.Equal(a.t, http.StatusOK, r.status, "body: %s", r.body)
	var l approvals.Limit
	r.json(a.t, &l)
	return l
}

// startRun starts a run of tenant acme through the API as ops, with the
// limits (nil for none) and the plan.
func (a *approvalsEnv) startRun(run string, limits map[string]any, plan ...planner.Call) {
	a.t.Helper()
	body := map[string]any{"run_id": run, "goal": "make it right for the customer", "plan": plan}
	if limits != nil {
		body["limits"] = limits
	}
	r := a.do(http.MethodPost, "/v1/runs", "ops", body)
	require.Equal(a.t, http.StatusCreated, r.status, "body: %s", r.body)
}

// eventually polls cond until it holds, or fails the test after a minute.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("never: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pendingItem waits until step of run is listed as pending in round and
// returns its item.
func (a *approvalsEnv) pendingItem(run string, step int64, round int) approvals.Item {
	a.t.Helper()
	var found approvals.Item
	a.eventually(fmt.Sprintf("step %d of run %s pending in round %d", step, run, round), func() bool {
		var list approvals.ApprovalList
		a.do(http.MethodGet, "/v1/approvals?state=pending&limit=500", "dana", nil).json(a.t, &list)
		for _, it := range list.Approvals {
			if it.RunID == run && it.Step == step && it.Round == round {
				found = it
				return true
			}
		}
		return false
	})
	return found
}

// decideAPI posts verb (approve or reject) on step of run as who, for the
// arguments of item, and returns the accepted decision.
func (a *approvalsEnv) decideAPI(who, verb string, it approvals.Item, comment string) approvals.DecisionRecord {
	a.t.Helper()
	r := a.do(http.MethodPost, stepPath(it.RunID, it.Step, verb), who, approvals.DecideRequest{ArgsHash: it.ArgsHash, Comment: comment, Round: it.Round})
	require.Equal(a.t, http.StatusAccepted, r.status, "body: %s", r.body)
	var res approvals.DecideResponse
	r.json(a.t, &res)
	require.False(a.t, res.Repeated)
	return res.Decision
}

// limitWait returns the approval of a step that waits at a money limit,
// or nil.
func limitWait(s workflows.Step) *workflows.StepApproval {
	if s.State != workflows.StepPendingApproval || s.Approval == nil || s.Approval.Kind != workflows.ApprovalKindLimit {
		return nil
	}
	return s.Approval
}

// race starts n one-step runs of tenant acme at once, run i with the call
// of plan(i), while no worker serves the test's queue; then it starts one
// with many pollers, so that the runs' steps reach it together, and waits
// until each run has applied its step or waits for a decision. It
// returns the statuses by run id.
func (e *env) race(prefix string, n int, plan func(i int) planner.Call) map[string]workflows.Status {
	e.t.Helper()
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		ids[i] = e.id(fmt.Sprintf("%s-%02d", prefix, i))
		wg.Go(func() {
			<-start
			_, errs[i] = e.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: ids[i],
				Goal: "goodwill", Plan: []planner.Call{plan(i)}})
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(e.t, err, "start %s", ids[i])
	}
	e.startWorker("racer", worker.Options{MaxConcurrentWorkflowTaskPollers: 16, MaxConcurrentActivityTaskPollers: n})
	out := make(map[string]workflows.Status, n)
	for _, id := range ids {
		out[id] = e.waitFor("acme", id, "its step applied or waiting", func(s workflows.Status) bool {
			switch s.State {
			case workflows.RunCompleted, workflows.RunFailed:
				return true
			case workflows.RunWaitingForApproval:
				return len(s.Steps) == 1 && s.Steps[0].Approval != nil
			}
			return false
		})
	}
	return out
}

// raceOutcome splits the statuses of race into the runs whose one step
// was applied and those waiting at a limit, requiring every run to be one
// or the other, and checks what each waiting step says.
func raceOutcome(t *testing.T, sts map[string]workflows.Status, wantReason, capName string) (applied, parked []string) {
	t.Helper()
	for id, st := range sts {
		require.Len(t, st.Steps, 1, id)
		s := st.Steps[0]
		switch {
		case st.State == workflows.RunCompleted && s.State == workflows.StepDone:
			applied = append(applied, id)
		case limitWait(s) != nil:
			parked = append(parked, id)
			assert.Equal(t, wantReason, s.Approval.Reason, id)
			assert.Equal(t, 1, s.Approval.Round, id)
			require.NotNil(t, s.Limit, id)
			assert.Equal(t, capName, s.Limit.Level.Cap, id)
			assert.True(t, s.Limit.Level.Over, id)
			assert.False(t, s.Limit.Exception, id)
		default:
			t.Fatalf("run %s is neither applied nor waiting at the limit: %+v", id, st)
		}
	}
	return applied, parked
}

// quietLogs keeps the logs of a test of many runs to warnings and errors.
func quietLogs(t *testing.T) *zap.Logger { return zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)) }

// TestDailyCapHoldsWhenSixtyFourCreditsRaceForItsLastHundredEuros: a
// daily cap of 2,000.00 EUR on issue_credit, 1,900.00 of it spent by an
// earlier run, and 64 runs started at once, each crediting 30.00 (below
// the approval threshold: only the cap can stop them). In the credits
// table, exactly 3 are credited (1,990.00 in all, never past the cap);
// the other 61 wait at the limit, each saying why.
func TestDailyCapHoldsWhenSixtyFourCreditsRaceForItsLastHundredEuros(t *testing.T) {
	// Not parallel: 64 runs at once load the shared Temporal server, and
	// would slow the other tests past their API deadlines. Run alone, before
	// the parallel tests, the race is the only load.
	e := setup(t)
	e.log = quietLogs(t)
	w1 := e.startWorker("w1", worker.Options{})
	a := e.serveApprovals(nil)
	l := a.setLimit(shop.ToolIssueCredit, 200000, shop.ToolIssueCredit)
	require.Equal(t, []any{"utc_day", "ops", int64(0)}, []any{l.Period, l.UpdatedBy, l.Spent})

	earlier := e.id("earlier")
	a.startRun(earlier, nil, creditOf("earlier", 190000))
	a.decideAPI("dana", "approve", a.pendingItem(earlier, 1, 1), "")
	require.Equal(t, workflows.StepDone, e.result("acme", earlier).Steps[0].State)
	require.EqualValues(t, 190000, a.limit(shop.ToolIssueCredit).Spent)
	w1.Stop()

	sts := e.race("credit", 64, func(i int) planner.Call { return creditOf(fmt.Sprintf("race-%02d", i), 3000) })

	want := "over the daily cap for issue_credit: 1,990.00 of 2,000.00 EUR spent, this call 30.00"
	applied, parked := raceOutcome(t, sts, want, shop.ToolIssueCredit)
	assert.Len(t, applied, 3, "100.00 left holds three credits of 30.00")
	assert.Len(t, parked, 61)

	// At the destination.
	var sum int64
	require.NoError(t, e.pool.QueryRow(context.Background(),
		`SELECT coalesce(sum(amount_cents), 0) FROM credits WHERE tenant = 'acme'`).Scan(&sum))
	assert.EqualValues(t, 199000, sum, "the credits stay within the cap of 2,000.00")
	assert.Equal(t, 3, e.count("credits", "tenant = 'acme' AND reason LIKE 'race-%' AND amount_cents = 3000"))
	for _, id := range applied {
		assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND idempotency_key = $1", stepKey(t, id, 1, shop.ToolIssueCredit)))
	}
	// What was counted agrees with the credits, and nothing is held.
	assert.Equal(t, 4, e.count("spend_entries", "tenant = 'acme' AND state = 'applied'"))
	assert.Zero(t, e.count("spend_entries", "state <> 'applied'"))
	u := a.limit(shop.ToolIssueCredit)
	assert.Equal(t, []int64{200000, 199000, 0}, []int64{u.Amount, u.Spent, u.Held})

	// Each waiting step is in the inbox, as waiting at the limit.
	e.eventually("61 approvals at the limit recorded", func() bool {
		return e.count("approvals", "kind = 'limit' AND state = 'pending'") == 61
	})
	assert.Equal(t, 61, e.count("approvals", "kind = 'limit' AND state = 'pending' AND round = 1 AND reason = $1", want))
	var list approvals.ApprovalList
	a.do(http.MethodGet, "/v1/approvals?state=pending", "vic", nil).json(t, &list)
	require.Len(t, list.Approvals, 61)
	for _, it := range list.Approvals {
		assert.Equal(t, []any{"limit", 1, want}, []any{it.ApprovalKind, it.Round, it.Reason}, it.RunID)
		assert.Contains(t, parked, it.RunID)
	}
}

// TestDailyCapHoldsWhenSixtyFourRefundsRaceForItsLastHundredEuros: the
// same race for refund_payment, an external tool whose amounts are
// reserved before the request is sent, counted at the payment provider's
// own ledger.
func TestDailyCapHoldsWhenSixtyFourRefundsRaceForItsLastHundredEuros(t *testing.T) {
	// Not parallel: 64 runs at once load the shared Temporal server, and
	// would slow the other tests past their API deadlines. Run alone, before
	// the parallel tests, the race is the only load.
	w := setupExternal(t, 0)
	w.log = quietLogs(t)
	w1 := w.startWorker("w1", worker.Options{})
	a := w.serveApprovals(nil)
	a.setLimit(payments.RefundPayment, 200000, payments.RefundPayment)
	payment := w.pay("pay_"+w.id("race"), 1000000)

	earlier := w.id("earlier")
	a.startRun(earlier, nil, call(payments.RefundPayment, refundOf(payment, 190000)))
	a.decideAPI("dana", "approve", a.pendingItem(earlier, 1, 1), "")
	require.Equal(t, workflows.StepDone, w.result("acme", earlier).Steps[0].State)
	require.Len(t, w.refunds(payment), 1)
	w1.Stop()

	sts := w.race("refund", 64, func(int) planner.Call { return call(payments.RefundPayment, refundOf(payment, 3000)) })

	want := "over the daily cap for refund_payment: 1,990.00 of 2,000.00 EUR spent, this call 30.00"
	applied, parked := raceOutcome(t, sts, want, payments.RefundPayment)
	assert.Len(t, applied, 3, "100.00 left holds three refunds of 30.00")
	assert.Len(t, parked, 61)

	// At the provider.
	ledger := w.refunds(payment)
	var sum int64
	keys := map[string]bool{}
	for _, r := range ledger {
		sum += r.Amount
		keys[r.IdempotencyKey] = true
	}
	assert.Len(t, ledger, 4, "the earlier refund and three of the race")
	assert.EqualValues(t, 199000, sum, "the refunds stay within the cap of 2,000.00")
	for _, id := range applied {
		assert.True(t, keys[stepKey(t, id, 1, payments.RefundPayment)], "the provider holds the refund of %s", id)
	}
	for _, id := range parked {
		assert.False(t, keys[stepKey(t, id, 1, payments.RefundPayment)], "nothing was sent for %s", id)
	}
	// Every reservation was settled as applied; none is held.
	assert.Equal(t, 4, w.count("spend_entries", "tenant = 'acme' AND state = 'applied'"))
	assert.Zero(t, w.count("spend_entries", "state <> 'applied'"))
	u := a.limit(payments.RefundPayment)
	assert.Equal(t, []int64{200000, 199000, 0}, []int64{u.Amount, u.Spent, u.Held})

	w.eventually("61 approvals at the limit recorded", func() bool {
		return w.count("approvals", "kind = 'limit' AND state = 'pending'") == 61
	})
	assert.Equal(t, 61, w.count("approvals", "kind = 'limit' AND state = 'pending' AND tool = 'refund_payment' AND reason = $1", want))
	assert.Zero(t, w.reconcile().DriftCount, "reconciliation agrees with the provider")
}

// TestRunBudgetParksTheStepThatWouldCrossItAndARejectEndsIt: a run with a
// budget of 500.00 EUR and three credits of 200.00 (the approval threshold
// raised above them): two apply, the third waits at the budget, and the
// run's status shows its spend against the budget. Rejected, the run ends
// without the third credit.
func TestRunBudgetParksTheStepThatWouldCrossItAndARejectEndsIt(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.tools = shop.Tools(shop.Config{CreditApprovalThresholdCents: 100000})
	e.startWorker("w1", worker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("budget")
	a.startRun(run, map[string]any{"spend": map[string]int64{"EUR": 50000}},
		creditOf("budget-1", 20000), creditOf("budget-2", 20000), creditOf("budget-3", 20000))

	want := "over the run's budget: 400.00 of 500.00 EUR spent, this call 200.00"
	// The run waits once the step's request is recorded.
	e.waitFor("acme", run, "step 3 at the budget", func(s workflows.Status) bool {
		return s.State == workflows.RunWaitingForApproval && len(s.Steps) == 3 && limitWait(s.Steps[2]) != nil
	})
	var st workflows.Status
	r := a.do(http.MethodGet, "/v1/runs/"+run, "vic", nil)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	r.json(t, &st)
	assert.Equal(t, workflows.RunWaitingForApproval, st.State)
	assert.Equal(t, []workflows.StepState{workflows.StepDone, workflows.StepDone, workflows.StepPendingApproval},
		[]workflows.StepState{st.Steps[0].State, st.Steps[1].State, st.Steps[2].State})
	ap := st.Steps[2].Approval
	require.NotNil(t, ap)
	assert.Equal(t, []any{workflows.ApprovalKindLimit, want, 1}, []any{ap.Kind, ap.Reason, ap.Round})
	require.NotNil(t, st.Steps[2].Limit)
	assert.Equal(t, "run", st.Steps[2].Limit.Level.Period)
	assert.Equal(t, map[string]int64{"EUR": 50000}, st.Budget)
	require.Len(t, st.Spend, 1)
	sp := st.Spend[0]
	require.NotNil(t, sp.Budget)
	assert.Equal(t, []any{"EUR", int64(40000), int64(0), int64(50000)}, []any{sp.Currency, sp.Spent, sp.Held, *sp.Budget})
	assert.Equal(t, 2, e.count("credits", "tenant = 'acme'"))
	out, err := e.oncerun("status", "--tenant", "acme", "--run-id", run)
	require.NoError(t, err, out)
	assert.Contains(t, out, "spend: 400.00 EUR spent, 0.00 EUR held, of a budget of 500.00 EUR (80.0% used)")

	it := a.pendingItem(run, 3, 1)
	assert.Equal(t, []any{"limit", want}, []any{it.ApprovalKind, it.Reason})
	d := a.decideAPI("dana", "reject", it, "the budget stands")
	assert.False(t, d.Exception, "a rejection lets nothing past")

	final := e.result("acme", run)
	assert.Equal(t, workflows.RunCompleted, final.State)
	require.Len(t, final.Steps, 3)
	assert.Equal(t, workflows.StepRejected, final.Steps[2].State)
	// At the destination: the first two credits, not the third.
	assert.Equal(t, 2, e.count("credits", "tenant = 'acme'"))
	assert.Equal(t, 2, e.count("credits", "tenant = 'acme' AND reason IN ('budget-1', 'budget-2') AND amount_cents = 20000"))
	assert.Zero(t, e.count("credits", "reason = 'budget-3'"))
	assert.Zero(t, e.count("spend_entries", "step = 3"), "the rejected step counted nothing")
	assert.Equal(t, 1, e.count("approvals", "run_id = $1 AND step = 3 AND kind = 'limit' AND state = 'rejected'", run))
	assert.Equal(t, 1, e.count("approval_decisions",
		"run_id = $1 AND step = 3 AND outcome = 'accepted' AND decision = 'reject' AND NOT exception", run))
	var after workflows.Status
	a.do(http.MethodGet, "/v1/runs/"+run, "vic", nil).json(t, &after)
	require.Len(t, after.Spend, 1)
	assert.EqualValues(t, 40000, after.Spend[0].Spent)
}

// TestLimitExceptionAppliesOnceAndCountsPastTheCap: a credit of 80.00
// parked at a daily cap of 50.00 and approved through the API applies
// once, as an exception: the decision says so in the API and the audit,
// and the cap's usage shows its spend above the cap.
func TestLimitExceptionAppliesOnceAndCountsPastTheCap(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", worker.Options{})
	a := e.serveApprovals(nil)
	a.setLimit(shop.ToolIssueCredit, 5000, shop.ToolIssueCredit)
	run := e.id("exception")
	a.startRun(run, nil, creditOf("exception", 8000))

	it := a.pendingItem(run, 1, 1)
	assert.Equal(t, "limit", it.ApprovalKind)
	assert.Equal(t, "over the daily cap for issue_credit: 0.00 of 50.00 EUR spent, this call 80.00", it.Reason)
	assert.Zero(t, e.count("credits", "tenant = 'acme'"), "nothing ran before the decision")
	assert.Zero(t, e.count("spend_entries", "true"), "and nothing counted")

	d := a.decideAPI("dana", "approve", it, "loyal customer")
	assert.True(t, d.Exception, "an approve at a limit is an exception")
	assert.Equal(t, workflows.DecisionApprove, d.Decision)

	st := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
	s := st.Steps[0]
	require.Equal(t, workflows.StepDone, s.State, s.Error)
	require.NotNil(t, s.Limit)
	assert.True(t, s.Limit.Exception)
	assert.Equal(t, "dana", s.Approval.Approver)
	assert.Equal(t, workflows.ApprovalKindLimit, s.Approval.Kind)

	// Once, at the destination, and counted as an exception.
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme'"))
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND amount_cents = 8000 AND idempotency_key = $1",
		stepKey(t, run, 1, shop.ToolIssueCredit)))
	assert.Equal(t, 1, e.count("spend_entries", "run_id = $1 AND amount = 8000 AND state = 'applied' AND exception", run))
	assert.Equal(t, 1, e.count("approval_decisions", "run_id = $1 AND outcome = 'accepted'", run))
	assert.Equal(t, 1, e.count("approval_decisions",
		"run_id = $1 AND step = 1 AND round = 1 AND outcome = 'accepted' AND decision = 'approve' AND approver = 'dana' AND exception", run))
	assert.Equal(t, 1, e.count("approvals", "run_id = $1 AND kind = 'limit' AND state = 'approved'", run))

	var list approvals.ApprovalList
	a.do(http.MethodGet, "/v1/approvals?state=decided", "vic", nil).json(t, &list)
	require.Len(t, list.Approvals, 1)
	item := list.Approvals[0]
	assert.Equal(t, []any{run, "limit", "approved"}, []any{item.RunID, item.ApprovalKind, item.State})
	require.NotNil(t, item.Decision)
	assert.True(t, item.Decision.Exception)

	u := a.limit(shop.ToolIssueCredit)
	assert.EqualValues(t, 5000, u.Amount)
	assert.EqualValues(t, 8000, u.Spent, "the exception counts, past the cap")
	assert.Greater(t, u.Ratio, 1.0)
	out, err := e.oncerun("limits", "--tenant", "acme", "--json")
	require.NoError(t, err, out)
	var cli approvals.LimitList
	require.NoError(t, json.Unmarshal([]byte(out), &cli), out)
	require.Len(t, cli.Limits, 1)
	assert.Equal(t, []int64{5000, 8000}, []int64{cli.Limits[0].Amount, cli.Limits[0].Spent}, "the CLI reads the same")

	// The same approve again is a repeat: nothing more is credited.
	r := a.do(http.MethodPost, stepPath(run, 1, "approve"), "ops", approvals.DecideRequest{ArgsHash: it.ArgsHash})
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme'"))
}

// TestLimitEditIsCheckedAgainstTheCap: a credit of 80.00 parked at a cap
// of 50.00 and edited to 60.00 waits again, in round 2; edited to 40.00,
// which fits, it applies at the edited amount, no exception.
func TestLimitEditIsCheckedAgainstTheCap(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", worker.Options{})
	a := e.serveApprovals(nil)
	a.setLimit(shop.ToolIssueCredit, 5000, shop.ToolIssueCredit)
	run := e.id("edit-down")
	a.startRun(run, nil, creditOf("edit-down", 8000))
	edit := func(it approvals.Item, cents int64) {
		t.Helper()
		args := fmt.Sprintf(`{"order_id":"1001","reason":"edit-down","amount_cents":%d,"currency":"EUR"}`, cents)
		r := a.do(http.MethodPost, stepPath(run, 1, "edit"), "dana",
			approvals.EditRequest{ArgsHash: it.ArgsHash, Args: json.RawMessage(args), Comment: "what the cap allows", Round: it.Round})
		require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
		var res approvals.DecideResponse
		r.json(t, &res)
		assert.False(t, res.Decision.Exception, "an edit is no exception")
	}

	first := a.pendingItem(run, 1, 1)
	require.Equal(t, "limit", first.ApprovalKind)
	edit(first, 6000)
	second := a.pendingItem(run, 1, 2)
	assert.Equal(t, "limit", second.ApprovalKind)
	assert.Equal(t, "over the daily cap for issue_credit: 0.00 of 50.00 EUR spent, this call 60.00", second.Reason,
		"the edited call was checked again")
	assert.Zero(t, e.count("credits", "tenant = 'acme'"))
	edit(second, 4000)

	st := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
	s := st.Steps[0]
	require.Equal(t, workflows.StepDone, s.State, s.Error)
	require.NotNil(t, s.Edit)
	assert.JSONEq(t, `{"order_id":"1001","reason":"edit-down","amount_cents":8000,"currency":"EUR"}`, string(s.Edit.OriginalArgs),
		"the lineage starts at what was proposed")
	require.NotNil(t, s.Limit)
	assert.False(t, s.Limit.Exception)

	assert.Equal(t, 1, e.count("credits", "tenant = 'acme'"))
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND amount_cents = 4000"), "the edited amount")
	assert.Equal(t, 1, e.count("spend_entries", "run_id = $1 AND amount = 4000 AND NOT exception", run))
	assert.Equal(t, 2, e.count("approval_decisions", "run_id = $1 AND outcome = 'accepted' AND decision = 'edit' AND NOT exception", run))
	u := a.limit(shop.ToolIssueCredit)
	assert.Equal(t, []int64{5000, 4000}, []int64{u.Amount, u.Spent})
}

// TestRuleApprovedCreditThatCrossesACapWaitsAgainInRoundTwo: a credit of
// 259.00, above the approval threshold, approved under its rule, meets a
// cap of 100.00 when it runs: it waits again in round 2, at the limit,
// listed so in the API and the inbox; approved there as an exception it
// applies once, and each round has its decision.
func TestRuleApprovedCreditThatCrossesACapWaitsAgainInRoundTwo(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", worker.Options{})
	a := e.serveApprovals(nil)
	a.setLimit(shop.ToolIssueCredit, 10000, shop.ToolIssueCredit)
	run := e.id("round-two")
	a.startRun(run, nil, creditOf("round-two", 25900))

	rule := a.pendingItem(run, 1, 1)
	assert.Equal(t, []any{"rule", "amount_cents above 10000"}, []any{rule.ApprovalKind, rule.Reason})
	d := a.decideAPI("dana", "approve", rule, "the photos show it")
	assert.False(t, d.Exception, "an approve under the tool's rule is no exception")

	limit := a.pendingItem(run, 1, 2)
	want := "over the daily cap for issue_credit: 0.00 of 100.00 EUR spent, this call 259.00"
	assert.Equal(t, []any{"limit", want, rule.ArgsHash}, []any{limit.ApprovalKind, limit.Reason, limit.ArgsHash})
	assert.Zero(t, e.count("credits", "tenant = 'acme'"), "the rule's approval did not take it past the cap")
	st := e.status("acme", run)
	ap := limitWait(st.Steps[0])
	require.NotNil(t, ap, "%+v", st.Steps[0])
	assert.Equal(t, 2, ap.Round)
	require.NotNil(t, st.Steps[0].Limit)
	require.NotNil(t, st.Steps[0].Limit.Prior)
	assert.Equal(t, "dana", st.Steps[0].Limit.Prior.Approver, "the rule's decision is kept")

	// The inbox shows the step as waiting at the limit.
	page, _ := a.browser().signIn("ops")
	assert.Regexp(t, `<article [^>]*data-run="`+run+`" data-step="1" class="limit" data-kind="limit">`, page)
	assert.Contains(t, page, want)
	assert.Contains(t, page, "Approve as an exception")

	// dana's approve of the rule, sent again (a retry, a second click),
	// names no round: it is no exception to the cap.
	r := a.do(http.MethodPost, stepPath(run, 1, "approve"), "dana", approvals.DecideRequest{ArgsHash: rule.ArgsHash, Comment: "the photos show it"})
	a.expectError(r, http.StatusConflict, "round_changed", "round 2")
	assert.Zero(t, e.count("credits", "tenant = 'acme'"))

	d = a.decideAPI("ops", "approve", limit, "once")
	assert.True(t, d.Exception)

	final := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, final.State, "%+v", final)
	s := final.Steps[0]
	require.Equal(t, workflows.StepDone, s.State, s.Error)
	assert.Equal(t, []any{"ops", 2, true}, []any{s.Approval.Approver, s.Approval.Round, s.Limit.Exception})
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND amount_cents = 25900"))
	assert.Equal(t, 1, e.count("approval_decisions",
		"run_id = $1 AND round = 1 AND outcome = 'accepted' AND approver = 'dana' AND NOT exception", run))
	assert.Equal(t, 1, e.count("approval_decisions",
		"run_id = $1 AND round = 2 AND outcome = 'accepted' AND approver = 'ops' AND exception", run))
	assert.Equal(t, 1, e.count("approvals", "run_id = $1 AND kind = 'limit' AND round = 2 AND state = 'approved' AND decided_by = 'ops'", run))
	assert.EqualValues(t, 25900, a.limit(shop.ToolIssueCredit).Spent)
}

// TestLimitsAPIRefusesBadInputOverHTTP: a limit that is no limit is 400
// naming the field; a viewer and an approver may not set or delete one
// (403); another tenant's limit is no limit of the token's (404); a start
// whose limits.spend is no budget is 400. Nothing refused is written.
func TestLimitsAPIRefusesBadInputOverHTTP(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.serveApprovals(nil)
	a.setLimit("credits", 200000, shop.ToolIssueCredit)

	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"unknown currency", `{"tools":["issue_credit"],"currency":"ZZZ","amount":100}`, []string{"currency:", `"ZZZ" is not an ISO 4217 currency code`}},
		{"negative amount", `{"tools":["issue_credit"],"currency":"EUR","amount":-100}`, []string{"amount: -100"}},
		{"non-integer amount", `{"tools":["issue_credit"],"currency":"EUR","amount":12.5}`, []string{"amount", "want a whole number"}},
		{"amount as a string", `{"tools":["issue_credit"],"currency":"EUR","amount":"100"}`, []string{"amount is a string"}},
		{"a tool without an amount", `{"tools":["send_email"],"currency":"EUR","amount":100}`, []string{"tools:", "send_email declares no amount"}},
		{"an unknown tool", `{"tools":["issue_bonus"],"currency":"EUR","amount":100}`, []string{"tools:", `"issue_bonus" is not a registered tool`}},
		{"an unknown period", `{"tools":["issue_credit"],"currency":"EUR","amount":100,"period":"weekly"}`, []string{"period:"}},
	} {
		t.Log(tc.name)
		a.expectError(a.do(http.MethodPut, "/v1/limits/credits", "ops", tc.body), http.StatusBadRequest, "invalid_request", tc.want...)
	}
	a.expectError(a.do(http.MethodPut, "/v1/limits/Credits!", "ops", `{"tools":["issue_credit"],"currency":"EUR","amount":100}`),
		http.StatusBadRequest, "invalid_request", "name:")

	for _, who := range []string{"vic", "dana"} {
		a.expectError(a.do(http.MethodPut, "/v1/limits/credits", who, `{"tools":["issue_credit"],"currency":"EUR","amount":1}`),
			http.StatusForbidden, "forbidden", "setting limits takes an operator token")
		a.expectError(a.do(http.MethodDelete, "/v1/limits/credits", who, nil),
			http.StatusForbidden, "forbidden", "deleting limits takes an operator token")
	}
	l := a.limit("credits")
	assert.Equal(t, []any{int64(200000), "EUR", "ops"}, []any{l.Amount, l.Currency, l.UpdatedBy}, "nothing refused was written")
	assert.Equal(t, 1, e.count("spend_caps", "true"))

	// Another tenant's limit is none of acme's, by any method.
	r := a.do(http.MethodPut, "/v1/limits/globex-credits", "gops", `{"tools":["issue_credit"],"currency":"USD","amount":500}`)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	a.expectError(a.do(http.MethodGet, "/v1/limits/globex-credits", "ops", nil), http.StatusNotFound, "not_found", `no limit "globex-credits"`)
	a.expectError(a.do(http.MethodDelete, "/v1/limits/globex-credits", "ops", nil), http.StatusNotFound, "not_found")
	a.expectError(a.do(http.MethodGet, "/v1/limits/credits", "gus", nil), http.StatusNotFound, "not_found")
	var list approvals.LimitList
	a.do(http.MethodGet, "/v1/limits", "ops", nil).json(t, &list)
	require.Len(t, list.Limits, 1)
	assert.Equal(t, "credits", list.Limits[0].Name)
	assert.Equal(t, 1, e.count("spend_caps", "tenant = 'globex' AND name = 'globex-credits' AND amount = 500"))

	// A start whose budget is not one.
	for _, spend := range []string{`{"eur":50000}`, `{"ZZZ":50000}`, `{"EUR":-1}`, `{"EUR":1.5}`} {
		r := a.do(http.MethodPost, "/v1/runs", "ops", `{"run_id":"`+e.id("bad-budget")+`","plan":[{"tool":"lookup_order","args":{"order_id":"1001"}}],"limits":{"spend":`+spend+`}}`)
		a.expectError(r, http.StatusBadRequest, "invalid_request", "limits.spend")
	}
	a.expectError(a.do(http.MethodGet, "/v1/runs/"+e.id("bad-budget"), "ops", nil), http.StatusNotFound, "not_found")
}

// TestACancelledRunsStepThatParksAtACapEndsAtOnce: a run cancelled while
// an external step's attempt runs, whose next attempt then parks at a cap
// lowered meanwhile, ends cancelled at once: nobody is asked for an
// exception the step could never use, and nothing is charged.
func TestACancelledRunsStepThatParksAtACapEndsAtOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	release := make(chan struct{})
	var attempts, charged atomic.Int32
	e.tools = append(e.tools, tools.Tool{
		Name: "charge_fee", Description: "Charge the customer a fee at the provider.", Class: tools.ClassExternal,
		Schema: json.RawMessage(`{"type":"object","properties":{"amount_cents":{"type":"integer"},"currency":{"type":"string"}},` +
			`"required":["amount_cents","currency"]}`),
		Amounts: []tools.Amount{{Field: "amount_cents", Currency: "currency"}},
		Run: func(ctx context.Context, _ tools.Call) (any, error) {
			if attempts.Add(1) > 1 {
				charged.Add(1)
				return map[string]any{"charged": true}, nil
			}
			select {
			case <-release:
				return nil, tools.NotApplied(errors.New("the provider refused the connection"))
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	})
	e.startWorker("w1", worker.Options{})
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, e.tools...)
	require.NoError(t, err)
	a := e.serveApprovals(func(c *approvals.Config) { c.Tools = reg })
	a.setLimit("fees", 10000, "charge_fee")
	run := e.id("cancel-at-cap")
	a.startRun(run, nil, call("charge_fee", `{"amount_cents":8000,"currency":"EUR"}`))
	e.eventually("the fee's first attempt", func() bool { return attempts.Load() == 1 })

	r := a.do(http.MethodPost, "/v1/runs/"+run+"/cancel", "ops", map[string]any{"reason": "the customer withdrew"})
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	a.setLimit("fees", 5000, "charge_fee")
	close(release)

	st := e.result("acme", run)
	assert.Equal(t, workflows.RunCancelled, st.State)
	require.Len(t, st.Steps, 1)
	s := st.Steps[0]
	assert.Equal(t, workflows.StepCancelled, s.State)
	assert.Contains(t, s.Error, "stopped at a money limit: the run was cancelled by ops")
	require.NotNil(t, s.Limit)
	assert.Contains(t, s.Limit.Reason, "over the daily cap for charge_fee (fees)")
	assert.EqualValues(t, 1, attempts.Load(), "the attempt that parked never reached the provider")
	assert.Zero(t, charged.Load())
	assert.Zero(t, e.count("approvals", "run_id = $1", run), "nobody was asked")
}

// TestACurrencySpelledAnyWayNeverGoesRoundALimit: a run with a budget of
// 500.00 EUR whose plan credits in a currency no limit can count (ZZZ,
// XXX, XTS, 978, €, EURO, "") is refused at its start, 400 naming the
// step and the field, and nothing of it runs. A run that credits in USD,
// which its budget does not name, and in EUR: the USD credit waits at the
// budget until an approver lets it past as an exception; the EUR credit
// counts against the budget.
func TestACurrencySpelledAnyWayNeverGoesRoundALimit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.tools = shop.Tools(shop.Config{CreditApprovalThresholdCents: 100000})
	e.startWorker("w1", worker.Options{})
	a := e.serveApprovals(nil)
	credit := func(reason, currency string, cents int64) planner.Call {
		return call(shop.ToolIssueCredit, fmt.Sprintf(`{"order_id":"1001","reason":%q,"amount_cents":%d,"currency":%q}`, reason, cents, currency))
	}
	for _, code := range []string{"ZZZ", "XXX", "XTS", "978", "€", "EURO", ""} {
		run := e.id("odd")
		r := a.do(http.MethodPost, "/v1/runs", "ops", map[string]any{"run_id": run, "limits": map[string]any{"spend": map[string]int64{"EUR": 50000}},
			"plan": []planner.Call{credit("odd-eur", "EUR", 100), credit("odd", code, 9000)}})
		require.Equal(t, http.StatusBadRequest, r.status, "currency %q: %s", code, r.body)
		var body struct{ Error approvals.ErrorDetail }
		r.json(t, &body)
		assert.Equal(t, "invalid_request", body.Error.Code, code)
		assert.Contains(t, body.Error.Message, "plan[1]: arguments of issue_credit", code)
		assert.Contains(t, body.Error.Message, "currency", code)
	}
	assert.Zero(t, e.count("credits", "tenant = 'acme'"), "no refused run credited anything")

	run := e.id("odd-currency")
	a.startRun(run, map[string]any{"spend": map[string]int64{"EUR": 50000}}, credit("odd-usd", "USD", 5000), credit("odd-eur", "EUR", 10000))
	want := "outside the run's budget: it counts EUR only, and this call spends 50.00 USD"
	it := a.pendingItem(run, 1, 1)
	assert.Equal(t, []any{"limit", want}, []any{it.ApprovalKind, it.Reason})
	assert.Zero(t, e.count("credits", "tenant = 'acme'"), "nothing was credited before the USD credit's decision")
	d := a.decideAPI("dana", "approve", it, "a USD order")
	assert.True(t, d.Exception, "an approve at a limit is an exception")

	final := e.result("acme", run)
	assert.Equal(t, workflows.RunCompleted, final.State)
	require.Len(t, final.Steps, 2)
	assert.Equal(t, []workflows.StepState{workflows.StepDone, workflows.StepDone}, []workflows.StepState{final.Steps[0].State, final.Steps[1].State})
	// At the destination: the USD and the EUR credit, nothing else.
	assert.Equal(t, 2, e.count("credits", "tenant = 'acme'"))
	assert.Equal(t, 1, e.count("credits", "reason = 'odd-usd' AND currency = 'USD' AND amount_cents = 5000"))
	assert.Equal(t, 1, e.count("credits", "reason = 'odd-eur' AND currency = 'EUR' AND amount_cents = 10000"))
	assert.Equal(t, 1, e.count("spend_entries", "run_id = $1 AND step = 1 AND currency = 'USD' AND amount = 5000 AND exception", run))
	assert.Equal(t, 1, e.count("spend_entries", "run_id = $1 AND step = 2 AND currency = 'EUR' AND amount = 10000 AND NOT exception", run))
	assert.Equal(t, 2, e.count("spend_entries", "run_id = $1", run))
}
