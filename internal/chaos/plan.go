package chaos

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/oncerun/oncerun/internal/agents"
	"github.com/oncerun/oncerun/internal/payments"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/workflows"
)

// The steps of every run, in order: a keyed note, a natural-key credit (its
// e-mail to the customer goes through the outbox) and an external refund.
const (
	stepNote   = 1
	stepCredit = 2
	stepRefund = 3
)

// The amounts, in minor units of planCurrency: the orders', the payments'
// at the provider, and the credits' and refunds' the runs propose. Credits
// and refunds above shop.DefaultCreditApprovalThreshold wait for an
// approval.
const (
	planCurrency     = "EUR"
	paymentCents     = 20000
	smallCreditCents = 3000
	largeCreditCents = 12000
	smallRefundCents = 2500
	largeRefundCents = 15000
	creditReason     = "chaos"
)

// runPlan is one run and what the harness expects of it.
type runPlan struct {
	runID, orderID, paymentID, email string
	creditCents, refundCents         int64
	// creditCurrency and refundCurrency are the currencies the steps
	// name, as the planner spells them: planCurrency unless
	// spellCurrencies changed them.
	creditCurrency, refundCurrency string
	// startAt is when the run is started, as a share of the fault window.
	startAt float64
	// delegate says the run delegates its credit and its refund, each to a
	// child run of a sub-agent (agentCredits, agentRefunds) whose one step
	// makes it and waits for an approval.
	delegate bool
	// desk says the run also opens a ticket and issues a voucher at the
	// sandbox desk, an MCP server (deploy mode: steps stepTicket and
	// stepVoucher).
	desk bool
}

// The sub-agents of the delegating runs, each granted the one tool its
// child run uses.
const (
	agentCredits = "credits"
	agentRefunds = "refunds"
)

// agentsConfig is the processes' ONCERUN_AGENTS_CONFIG.
const agentsConfig = `# The chaos harness's sub-agents: a delegating run hands its credit to
# one and its refund to the other, each a child run of one step.
agents:
  - name: ` + agentCredits + `
    description: Credits an order.
    tools: [` + shop.ToolIssueCredit + `]
    planner: script
  - name: ` + agentRefunds + `
    description: Refunds a payment.
    tools: [` + payments.RefundPayment + `]
    planner: script
`

// effect is where the effect of step of p is made: the run's own step, or
// for a delegated one, step 1 of the child run the step started.
func (p runPlan) effect(step int64) stepRef {
	if p.delegate && step != stepNote {
		return stepRef{workflows.ChildRunID(p.runID, step), 1}
	}
	return stepRef{p.runID, step}
}

// children are the child runs of p, by the step that starts each.
func (p runPlan) children() map[int64]string {
	if !p.delegate {
		return nil
	}
	return map[int64]string{stepCredit: workflows.ChildRunID(p.runID, stepCredit), stepRefund: workflows.ChildRunID(p.runID, stepRefund)}
}

func (p runPlan) needsApproval(step int64) bool {
	switch step {
	case stepCredit:
		return p.creditCents > shop.DefaultCreditApprovalThreshold
	case stepRefund:
		return p.refundCents > shop.DefaultCreditApprovalThreshold
	}
	return false
}

// plans makes the runs: half the credits and a third of the refunds wait
// for an approval. The last delegating of them delegate, and each of their
// children waits for an approval.
func plans(prefix string, n, delegating int, rng *rand.Rand) []runPlan {
	ps := make([]runPlan, n)
	for i := range ps {
		order := fmt.Sprintf("%s-%03d", prefix, i)
		ps[i] = runPlan{
			runID: "r-" + order, orderID: order, paymentID: "pay_" + order,
			email:       order + "@customers.example",
			creditCents: smallCreditCents, refundCents: smallRefundCents,
			creditCurrency: planCurrency, refundCurrency: planCurrency,
			startAt: 0.6 * rng.Float64(),
		}
		if i%2 == 0 {
			ps[i].creditCents = largeCreditCents
		}
		if i%3 == 0 {
			ps[i].refundCents = largeRefundCents
		}
		if i >= n-delegating {
			ps[i].delegate = true
			ps[i].creditCents, ps[i].refundCents = largeCreditCents, largeRefundCents
		}
	}
	return ps
}

// calls is the run's script.
func (p runPlan) calls() []planner.Call {
	args := func(v any) json.RawMessage {
		b, _ := json.Marshal(v)
		return b
	}
	calls := []planner.Call{
		{Tool: shop.ToolAddOrderNote, Args: args(map[string]any{"order_id": p.orderID, "text": "chaos run " + p.runID})},
		{Tool: shop.ToolIssueCredit, Args: args(map[string]any{"order_id": p.orderID, "reason": creditReason,
			"amount_cents": p.creditCents, "currency": p.creditCurrency})},
		{Tool: payments.RefundPayment, Args: args(map[string]any{"order_id": p.orderID, "payment_id": p.paymentID,
			"amount_cents": p.refundCents, "currency": p.refundCurrency, "reason": creditReason})},
	}
	if p.desk {
		calls = append(calls,
			planner.Call{Tool: deskTicket, Args: args(map[string]any{"order_id": p.orderID, "subject": "chaos run " + p.runID,
				"body": "A credit and a refund are on their way."})},
			planner.Call{Tool: deskVoucher, Args: args(map[string]any{"order_id": p.orderID, "amount_cents": 500, "currency": planCurrency})})
	}
	if p.delegate {
		// The step calls the sub-agent, whose child run's plan is the call.
		delegate := func(step int64, agent string) {
			c := calls[step-1]
			calls[step-1] = planner.Call{Tool: agents.ToolPrefix + agent, Args: args(map[string]any{
				"goal": fmt.Sprintf("%s for order %s", c.Tool, p.orderID), "plan": []planner.Call{c}})}
		}
		delegate(stepCredit, agentCredits)
		delegate(stepRefund, agentRefunds)
	}
	return calls
}

// planned is what the runs propose to spend with each capped tool, in
// minor units of planCurrency: what they would spend if every step ran.
// A step in another currency is not counted: the caps park it.
func planned(ps []runPlan) map[string]int64 {
	out := map[string]int64{}
	for _, p := range ps {
		if canonical(p.creditCurrency) == planCurrency {
			out[shop.ToolIssueCredit] += p.creditCents
		}
		if canonical(p.refundCurrency) == planCurrency {
			out[payments.RefundPayment] += p.refundCents
		}
	}
	return out
}

// misspellings are currencies as a planner might spell them that are no
// currency: a call in one is refused, and no limit could count it.
var misspellings = []string{"978", "€", "EURO", "XXX", "XTS", "ZZZ", "", " EUR", "E U"}

// refundSpellings are the ways the runs spell the refunds' currency
// under a cap: one currency, each spelling counted against its cap.
var refundSpellings = []string{"EUR", "eur", "Eur"}

// otherCurrency is the currency of every fourth run's credit under a
// cap: one the caps do not name, so each such credit parks at its cap
// and is rejected there.
const otherCurrency = "USD"

// spellCurrencies makes the runs spell their currencies every way a
// planner might (Config.DailyCap): the refunds' in each case, and every
// fourth run's credit in a currency the caps do not name. A limit that
// failed open for either would let money past the caps, which the cap
// check finds at the destination.
func spellCurrencies(ps []runPlan) {
	for i := range ps {
		ps[i].refundCurrency = refundSpellings[i%len(refundSpellings)]
		if i%4 == 3 {
			ps[i].creditCurrency = otherCurrency
		}
	}
}
