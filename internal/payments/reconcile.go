package payments

import (
	"context"
	"encoding/json"
	"time"

	"github.com/oncerun/oncerun/internal/reconcile"
)

// ReconcileSource compares refund_payment's records with the provider's
// ledger of refunds.
func ReconcileSource(c *Client) reconcile.Source {
	return reconcile.Source{
		Tool: RefundPayment,
		List: func(ctx context.Context, since time.Time) ([]reconcile.Entry, error) {
			refunds, err := c.Since(ctx, since)
			if err != nil {
				return nil, err
			}
			entries := make([]reconcile.Entry, 0, len(refunds))
			for _, r := range refunds {
				entries = append(entries, entryOf(r))
			}
			return entries, nil
		},
		Record: func(result json.RawMessage) (reconcile.Entry, error) {
			r, err := RecordOf(result)
			if err != nil {
				return reconcile.Entry{}, err
			}
			return entryOf(r), nil
		},
	}
}

func entryOf(r Refund) reconcile.Entry {
	raw, _ := json.Marshal(r)
	return reconcile.Entry{Key: r.IdempotencyKey, ProviderID: r.ID, Amount: r.Amount, Currency: r.Currency,
		Created: time.Unix(r.Created, 0).UTC(), Raw: raw}
}
