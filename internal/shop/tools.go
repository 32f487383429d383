package shop

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	"github.com/oncerun/oncerun/tools"
)

// Names of the shop's tools.
const (
	ToolLookupOrder  = "lookup_order"
	ToolGetCredit    = "get_credit"
	ToolIssueCredit  = "issue_credit"
	ToolAddOrderNote = "add_order_note"
)

// DefaultCreditApprovalThreshold is the amount, in cents, above which a
// credit needs approval.
const DefaultCreditApprovalThreshold = 10000

// Config configures the shop's tools.
type Config struct {
	// CreditApprovalThresholdCents: issue_credit calls with amount_cents
	// above it wait for approval. Default DefaultCreditApprovalThreshold;
	// negative means every credit needs approval.
	CreditApprovalThresholdCents int64
	// NotifyTool, when set, names the external tool (send_email) through
	// which issue_credit tells the customer of a new credit: the message is
	// a follow-on of the credit, in the outbox, committed with it.
	NotifyTool string
}

// Tools returns the tools of the demo domain, a support agent for an online
// shop: lookup_order, get_credit, issue_credit and add_order_note. They are
// written against the public tools API, as a deployment's own tools are.
func Tools(cfg Config) []tools.Tool {
	threshold := cmp.Or(cfg.CreditApprovalThresholdCents, DefaultCreditApprovalThreshold)
	return []tools.Tool{
		{
			Name:        ToolLookupOrder,
			Description: "Look up an order: customer, status, total and currency. Returns found=false for an unknown order.",
			Schema:      json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string","minLength":1,"maxLength":64}},"required":["order_id"],"additionalProperties":false}`),
			Class:       tools.ClassRead,
			InDatabase:  true,
			Run:         lookupOrder,
		},
		{
			Name:        ToolGetCredit,
			Description: "Get the store credit granted on an order for a reason, if any. Returns found=false when there is none.",
			Schema:      json.RawMessage(creditKeySchema),
			Class:       tools.ClassRead,
			InDatabase:  true,
			Run:         getCredit,
		},
		{
			Name: ToolIssueCredit,
			Description: fmt.Sprintf("Grant store credit on an order. At most one credit per order and reason, ever. "+
				"Credits above %d cents wait for a human approval.", threshold),
			Schema:     json.RawMessage(issueCreditSchema),
			Class:      tools.ClassNatural,
			Approval:   creditApproval(threshold),
			PairedRead: ToolGetCredit,
			// An approver may grant less than the agent proposed, never more.
			Edits:   tools.EditNoIncrease,
			Amounts: []tools.Amount{{Field: "amount_cents", Currency: "currency"}},
			Run:     issueCredit(cfg.NotifyTool),
		},
		{
			Name:        ToolAddOrderNote,
			Description: "Add a note to an order, visible to the support team.",
			Schema:      json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string","minLength":1,"maxLength":64},"text":{"type":"string","minLength":1,"maxLength":2000}},"required":["order_id","text"],"additionalProperties":false}`),
			Class:       tools.ClassKeyed,
			Run:         addOrderNote,
		},
	}
}

const creditKeySchema = `{"type":"object","properties":{
	"order_id":{"type":"string","minLength":1,"maxLength":64},
	"reason":{"type":"string","minLength":1,"maxLength":64}},
	"required":["order_id","reason"],"additionalProperties":false}`

const issueCreditSchema = `{"type":"object","properties":{
	"order_id":{"type":"string","minLength":1,"maxLength":64},
	"reason":{"type":"string","minLength":1,"maxLength":64},
	"amount_cents":{"type":"integer","minimum":1,"maximum":100000000},
	"currency":{"type":"string","pattern":"^[A-Z]{3}$"}},
	"required":["order_id","reason","amount_cents","currency"],"additionalProperties":false}`

type creditArgs struct {
	OrderID     string `json:"order_id"`
	Reason      string `json:"reason"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

func creditApproval(threshold int64) tools.ApprovalRule {
	return tools.When(fmt.Sprintf("amount_cents above %d", threshold), func(args json.RawMessage) (bool, error) {
		var a creditArgs
		if err := json.Unmarshal(args, &a); err != nil {
			return false, fmt.Errorf("decode credit arguments: %w", err)
		}
		return a.AmountCents > threshold, nil
	})
}

func lookupOrder(ctx context.Context, call tools.Call) (any, error) {
	var a struct {
		OrderID string `json:"order_id"`
	}
	if err := call.Decode(&a); err != nil {
		return nil, err
	}
	o, found, err := LookupOrder(ctx, call.DB, call.Key.Tenant, a.OrderID)
	if err != nil {
		return nil, err
	}
	if !found {
		return map[string]any{"found": false, "order_id": a.OrderID}, nil
	}
	return struct {
		Found bool `json:"found"`
		Order
	}{true, o}, nil
}

func getCredit(ctx context.Context, call tools.Call) (any, error) {
	var a creditArgs
	if err := call.Decode(&a); err != nil {
		return nil, err
	}
	c, found, err := GetCredit(ctx, call.DB, call.Key.Tenant, a.OrderID, a.Reason)
	if err != nil {
		return nil, err
	}
	if !found {
		return map[string]any{"found": false, "order_id": a.OrderID, "reason": a.Reason}, nil
	}
	return struct {
		Found bool `json:"found"`
		Credit
	}{true, c}, nil
}

// issueCredit grants the credit and, when notify names a tool and the
// credit is new, queues an e-mail to the customer in the same transaction.
func issueCredit(notify string) func(ctx context.Context, call tools.Call) (any, error) {
	return func(ctx context.Context, call tools.Call) (any, error) {
		var a creditArgs
		if err := call.Decode(&a); err != nil {
			return nil, err
		}
		issued, err := IssueCredit(ctx, call.Tx, Credit{
			Tenant:         call.Key.Tenant,
			OrderID:        a.OrderID,
			Reason:         a.Reason,
			AmountCents:    a.AmountCents,
			Currency:       a.Currency,
			IdempotencyKey: call.Key.String(),
		})
		if err != nil || !issued.Created || notify == "" || call.Outbox == nil {
			return issued, err
		}
		o, found, err := LookupOrder(ctx, call.Tx, call.Key.Tenant, a.OrderID)
		if err != nil || !found || o.CustomerEmail == "" {
			return issued, err
		}
		err = call.Outbox.Add(ctx, notify, map[string]string{
			"to":      o.CustomerEmail,
			"subject": fmt.Sprintf("Store credit for order %s", a.OrderID),
			"body": fmt.Sprintf("Dear %s,\n\nwe have granted you a store credit of %s %s on order %s (%s).\n",
				o.Customer, formatCents(a.AmountCents), a.Currency, a.OrderID, a.Reason),
		})
		return issued, err
	}
}

// formatCents writes an amount in cents with two decimals.
func formatCents(c int64) string {
	sign := ""
	if c < 0 {
		sign, c = "-", -c
	}
	return fmt.Sprintf("%s%d.%02d", sign, c/100, c%100)
}

func addOrderNote(ctx context.Context, call tools.Call) (any, error) {
	var a struct {
		OrderID string `json:"order_id"`
		Text    string `json:"text"`
	}
	if err := call.Decode(&a); err != nil {
		return nil, err
	}
	return AddNote(ctx, call.Tx, Note{
		Tenant:         call.Key.Tenant,
		OrderID:        a.OrderID,
		Body:           a.Text,
		IdempotencyKey: call.Key.String(),
	})
}
