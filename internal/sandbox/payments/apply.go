package payments

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"
)

// refundRequest is the canonical form of a refund request: what two
// requests with one idempotency key must agree on.
type refundRequest struct {
	PaymentID string
	Amount    int64
	Currency  string // lower case
	// Traceparent is the request's W3C trace context, as it came.
	Traceparent string
}

// applyRefund answers a refund request made with key at now. A key still
// retained for the same request returns its refund (replayed is true); for a
// different request it is a 422. Otherwise the refund is checked against the
// payment, stored durably and bound to key. Failed requests bind nothing.
func (l *ledger) applyRefund(key string, req refundRequest, now time.Time, retention time.Duration) (refund Refund, replayed bool, err error) {
	if rec, ok := l.keys[key]; ok && now.Before(rec.FirstSeen.Add(retention)) {
		if rec.PaymentID != req.PaymentID || rec.Amount != req.Amount || rec.Currency != req.Currency {
			return Refund{}, false, failf(http.StatusUnprocessableEntity, TypeIdempotency, "", headerIdempotencyKey,
				"Idempotency-Key %q was first used for a refund of %d %s on %s; it cannot be reused with different parameters",
				key, rec.Amount, rec.Currency, rec.PaymentID)
		}
		return l.refunds[l.refundIdx[rec.RefundID]], true, nil
	}
	p, ok := l.payments[req.PaymentID]
	if !ok {
		return Refund{}, false, failf(http.StatusNotFound, TypeInvalidRequest, CodeResourceMissing, "payment_id",
			"no such payment: %q", req.PaymentID)
	}
	if p.Currency != req.Currency {
		return Refund{}, false, failf(http.StatusBadRequest, TypeInvalidRequest, CodeCurrencyMismatch, "currency",
			"currency %s does not match payment %s's currency %s", req.Currency, p.ID, p.Currency)
	}
	if left := p.Amount - l.refunded[p.ID]; req.Amount > left {
		return Refund{}, false, failf(http.StatusBadRequest, TypeInvalidRequest, CodeAmountTooLarge, "amount",
			"refund amount %d is greater than the %d %s left to refund on payment %s", req.Amount, left, p.Currency, p.ID)
	}
	id, err := newRefundID()
	if err != nil {
		return Refund{}, false, err
	}
	refund = Refund{
		ID: id, PaymentID: p.ID, Amount: req.Amount, Currency: p.Currency,
		Status: RefundStatusSucceeded, IdempotencyKey: key, Created: now.Unix(), Traceparent: req.Traceparent,
	}
	l.pruneKeys(now, retention)
	prev, hadPrev := l.keys[key]
	l.refundIdx[id] = len(l.refunds)
	l.refunds = append(l.refunds, refund)
	l.refunded[p.ID] += refund.Amount
	l.keys[key] = keyRecord{
		Key: key, PaymentID: req.PaymentID, Amount: req.Amount, Currency: req.Currency,
		RefundID: id, FirstSeen: now,
	}
	if err := l.save(); err != nil {
		l.refunds = l.refunds[:len(l.refunds)-1]
		delete(l.refundIdx, id)
		l.refunded[p.ID] -= refund.Amount
		delete(l.keys, key)
		if hadPrev {
			l.keys[key] = prev
		}
		return Refund{}, false, err
	}
	return refund, false, nil
}

// pruneKeys forgets the keys whose retention has ended; their refunds stay.
func (l *ledger) pruneKeys(now time.Time, retention time.Duration) {
	for k, rec := range l.keys {
		if !now.Before(rec.FirstSeen.Add(retention)) {
			delete(l.keys, k)
		}
	}
}

// newRefundID returns "re_" and 24 random hex digits.
func newRefundID() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("refund id: %w", err)
	}
	return "re_" + hex.EncodeToString(b[:]), nil
}
