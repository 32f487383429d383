package chaos

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/oncerun/oncerun/internal/payments"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
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
	// startAt is when the run is started, as a share of the fault window.
	startAt float64
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
// for an approval.
func plans(prefix string, n int, rng *rand.Rand) []runPlan {
	ps := make([]runPlan, n)
	for i := range ps {
		order := fmt.Sprintf("%s-%03d", prefix, i)
		ps[i] = runPlan{
			runID: "r-" + order, orderID: order, paymentID: "pay_" + order,
			email:       order + "@customers.example",
			creditCents: smallCreditCents, refundCents: smallRefundCents,
			startAt: 0.6 * rng.Float64(),
		}
		if i%2 == 0 {
			ps[i].creditCents = largeCreditCents
		}
		if i%3 == 0 {
			ps[i].refundCents = largeRefundCents
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
	return []planner.Call{
		{Tool: shop.ToolAddOrderNote, Args: args(map[string]any{"order_id": p.orderID, "text": "chaos run " + p.runID})},
		{Tool: shop.ToolIssueCredit, Args: args(map[string]any{"order_id": p.orderID, "reason": creditReason,
			"amount_cents": p.creditCents, "currency": planCurrency})},
		{Tool: payments.RefundPayment, Args: args(map[string]any{"order_id": p.orderID, "payment_id": p.paymentID,
			"amount_cents": p.refundCents, "currency": planCurrency, "reason": creditReason})},
	}
}

// planned is what the runs propose to spend with each capped tool, in
// minor units of planCurrency: what they would spend if every step ran.
func planned(ps []runPlan) map[string]int64 {
	out := map[string]int64{}
	for _, p := range ps {
		out[shop.ToolIssueCredit] += p.creditCents
		out[payments.RefundPayment] += p.refundCents
	}
	return out
}
