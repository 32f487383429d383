package payments

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
)

// MaxKeyLen is the longest idempotency key the provider takes (Stripe's
// limit). A step whose key is longer is refused before anything is sent.
const MaxKeyLen = 255

// Names of the payment tools.
const (
	RefundPayment = "refund_payment"
	GetRefund     = "get_refund"
)

// ToolsConfig configures the payment tools.
type ToolsConfig struct {
	// ApprovalThresholdCents: refunds above it wait for approval. Default
	// shop.DefaultCreditApprovalThreshold, the credits' threshold;
	// negative means every refund needs approval.
	ApprovalThresholdCents int64
	// KeyLifetime is how long the provider keeps idempotency keys. Default
	// DefaultKeyLifetime.
	KeyLifetime time.Duration
}

const refundSchema = `{"type":"object","properties":{
"order_id":{"type":"string","minLength":1,"maxLength":64},
"payment_id":{"type":"string","minLength":1,"maxLength":128},
"amount_cents":{"type":"integer","minimum":1,"maximum":100000000000},
"currency":{"type":"string","pattern":"^[A-Za-z]{3}$"},
"reason":{"type":"string","minLength":1,"maxLength":200}},
"required":["order_id","payment_id","amount_cents","currency","reason"],"additionalProperties":false}`

// refundArgs are refund_payment's (and get_refund's) arguments.
type refundArgs struct {
	OrderID     string `json:"order_id"`
	PaymentID   string `json:"payment_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
	Reason      string `json:"reason"`
}

// Tools returns refund_payment, an external tool that refunds a payment at
// the provider under the step's key as the provider's idempotency key, and
// its paired read get_refund, which asks the provider for the refund made
// under that key. A nil c makes tools that refuse every call (nothing is
// sent), for plan checks where no provider is configured.
func Tools(c *Client, cfg ToolsConfig) []tools.Tool {
	threshold := cmp.Or(cfg.ApprovalThresholdCents, shop.DefaultCreditApprovalThreshold)
	return []tools.Tool{
		{
			Name: RefundPayment,
			Description: fmt.Sprintf("Refund (part of) a customer's payment at the payment provider. "+
				"Refunds above %d cents wait for a human approval.", threshold),
			Schema:      json.RawMessage(refundSchema),
			Class:       tools.ClassExternal,
			Approval:    refundApproval(threshold),
			PairedRead:  GetRefund,
			KeyLifetime: cmp.Or(cfg.KeyLifetime, DefaultKeyLifetime),
			// An approver may refund less than the agent proposed, never more.
			Edits:   tools.EditNoIncrease,
			Amounts: []tools.Amount{{Field: "amount_cents", Currency: "currency"}},
			// Room for the paired read's three tries of DefaultTimeout each
			// when an earlier attempt's outcome is unknown.
			Timeout: 90 * time.Second,
			Run: func(ctx context.Context, call tools.Call) (any, error) {
				if c == nil {
					return nil, tools.Permanent(tools.NotApplied(errNotConfigured))
				}
				var a refundArgs
				if err := call.Decode(&a); err != nil {
					return nil, tools.Permanent(tools.NotApplied(err))
				}
				if k := call.Key.String(); len(k) > MaxKeyLen {
					return nil, tools.Permanent(tools.NotApplied(fmt.Errorf(
						"the step's key is %d bytes and the provider takes idempotency keys of at most %d: use a shorter run id", len(k), MaxKeyLen)))
				}
				return c.Refund(ctx, call.Key.String(), RefundRequest{
					PaymentID: a.PaymentID, Amount: a.AmountCents, Currency: strings.ToLower(a.Currency)})
			},
		},
		{
			Name: GetRefund,
			Description: "Ask the payment provider whether this run's refund step was made. " +
				"Returns found and the refund.",
			Schema: json.RawMessage(refundSchema),
			Class:  tools.ClassRead,
			Run: func(ctx context.Context, call tools.Call) (any, error) {
				if c == nil {
					return nil, errNotConfigured
				}
				refunds, err := c.FindByKey(ctx, call.Key.String())
				if err != nil {
					return nil, err
				}
				if len(refunds) == 0 {
					return Found{Found: false}, nil
				}
				return Found{Found: true, Refund: &refunds[0], Count: len(refunds)}, nil
			},
		},
	}
}

// errNotConfigured is the payment tools' answer on a worker with no
// provider.
var errNotConfigured = errors.New("no payment provider is configured (PAYMENTS_BASE_URL)")

// Found is get_refund's result.
type Found struct {
	Found  bool    `json:"found"`
	Refund *Refund `json:"refund,omitempty"`
	// Count is the number of refunds under the key; more than one is drift
	// reconciliation reports.
	Count int `json:"count,omitempty"`
}

func refundApproval(threshold int64) tools.ApprovalRule {
	if threshold < 0 {
		return tools.Always()
	}
	return tools.When(fmt.Sprintf("refunds above %d cents need approval", threshold), func(args json.RawMessage) (bool, error) {
		var a refundArgs
		if err := json.Unmarshal(args, &a); err != nil {
			return false, err
		}
		return a.AmountCents > threshold, nil
	})
}

// RecordOf reads a refund_payment result as it was stored (the refund, or
// the paired read's {"found", "refund"} when the read resolved the step).
func RecordOf(result json.RawMessage) (Refund, error) {
	var r Refund
	var f Found
	if err := json.Unmarshal(result, &f); err == nil && f.Refund != nil {
		return *f.Refund, nil
	}
	if err := json.Unmarshal(result, &r); err != nil {
		return Refund{}, fmt.Errorf("read refund result: %w", err)
	}
	if r.ID == "" {
		return Refund{}, fmt.Errorf("read refund result: no refund id in %s", result)
	}
	return r, nil
}
