package payments

import (
	"errors"
	"fmt"
	"strings"
)

// RefundStatusSucceeded is the status of every refund the sandbox applies.
const RefundStatusSucceeded = "succeeded"

// ErrInvalidPayment is wrapped by SeedPayment when a payment lacks an id,
// has an amount that is not positive, or a currency that is not three
// letters.
var ErrInvalidPayment = errors.New("invalid payment")

// ErrPaymentConflict is wrapped by SeedPayment when a payment with the same
// id but different amount or currency is already stored.
var ErrPaymentConflict = errors.New("payment already exists with different values")

// Payment is a captured charge that refunds draw on.
type Payment struct {
	// ID names the payment, for example "pi_123".
	ID string `json:"id"`
	// Amount is what was charged, in minor units (cents).
	Amount int64 `json:"amount"`
	// Currency is the ISO code in lower case, for example "usd".
	Currency string `json:"currency"`
}

// Refund is money returned against a payment.
type Refund struct {
	// ID is "re_" followed by random hex.
	ID string `json:"id"`
	// PaymentID is the payment the refund draws on.
	PaymentID string `json:"payment_id"`
	// Amount is in minor units.
	Amount int64 `json:"amount"`
	// Currency is the payment's currency, lower case.
	Currency string `json:"currency"`
	// Status is always RefundStatusSucceeded.
	Status string `json:"status"`
	// IdempotencyKey is the Idempotency-Key of the request that made it.
	IdempotencyKey string `json:"idempotency_key"`
	// Created is when it was made, in unix seconds.
	Created int64 `json:"created"`
	// Traceparent is the W3C trace context the request that made it
	// carried, if any: a test joins the sandbox's side of a trace to the
	// caller's by it.
	Traceparent string `json:"traceparent,omitempty"`
}

// APIError is the object inside every error answer:
// {"error":{"type":...,"code":...,"message":...,"param":...}}.
type APIError struct {
	// Type is authentication_error, invalid_request_error,
	// idempotency_error or api_error.
	Type string `json:"type"`
	// Code narrows Type, for example resource_missing or amount_too_large.
	Code string `json:"code,omitempty"`
	// Message says what is wrong, for people.
	Message string `json:"message,omitempty"`
	// Param names the request field or header at fault, when there is one.
	Param string `json:"param,omitempty"`
}

// Error returns the type, code and message.
func (e *APIError) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("%s (%s): %s", e.Type, e.Code, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Type, e.Message)
}

// normaliseCurrency returns cur in lower case and whether it is three ASCII
// letters.
func normaliseCurrency(cur string) (string, bool) {
	if len(cur) != 3 {
		return "", false
	}
	for _, r := range cur {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') {
			return "", false
		}
	}
	return strings.ToLower(cur), true
}

// normalisePayment checks p and returns it with its currency in lower case.
func normalisePayment(p Payment) (Payment, error) {
	if p.ID == "" {
		return p, fmt.Errorf("%w: id is required", ErrInvalidPayment)
	}
	if p.Amount <= 0 {
		return p, fmt.Errorf("%w %s: amount must be a positive integer, got %d", ErrInvalidPayment, p.ID, p.Amount)
	}
	cur, ok := normaliseCurrency(p.Currency)
	if !ok {
		return p, fmt.Errorf("%w %s: currency must be three letters, got %q", ErrInvalidPayment, p.ID, p.Currency)
	}
	p.Currency = cur
	return p, nil
}
