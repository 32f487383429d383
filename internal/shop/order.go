package shop

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Order is an order of the shop.
type Order struct {
	Tenant   string `db:"tenant" json:"tenant"`
	OrderID  string `db:"order_id" json:"order_id"`
	Customer string `db:"customer" json:"customer"`
	// CustomerEmail is where the customer is told of credits.
	CustomerEmail string `db:"customer_email" json:"customer_email,omitempty"`
	// PaymentID is the payment refunds go back to.
	PaymentID  string    `db:"payment_id" json:"payment_id,omitempty"`
	Status     string    `db:"status" json:"status"`
	TotalCents int64     `db:"total_cents" json:"total_cents"`
	Currency   string    `db:"currency" json:"currency"`
	PlacedAt   time.Time `db:"placed_at" json:"placed_at"`
}

// LookupOrder returns the tenant's order, and false when there is none.
func LookupOrder(ctx context.Context, q Querier, tenant, orderID string) (Order, bool, error) {
	rows, err := q.Query(ctx, `
SELECT tenant, order_id, customer, customer_email, payment_id, status, total_cents, currency, placed_at
FROM orders WHERE tenant = $1 AND order_id = $2`, tenant, orderID)
	if err != nil {
		return Order{}, false, fmt.Errorf("look up order %s: %w", orderID, err)
	}
	o, err := pgx.CollectOneRow(rows, pgx.RowToStructByName[Order])
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, false, nil
	}
	if err != nil {
		return Order{}, false, fmt.Errorf("look up order %s: %w", orderID, err)
	}
	return o, true, nil
}

// GetCredit returns the tenant's credit for an order and reason, and false
// when there is none.
func GetCredit(ctx context.Context, q Querier, tenant, orderID, reason string) (Credit, bool, error) {
	rows, err := q.Query(ctx, selectCreditSQL, tenant, orderID, reason)
	if err != nil {
		return Credit{}, false, fmt.Errorf("get credit for order %s: %w", orderID, err)
	}
	c, err := pgx.CollectOneRow(rows, pgx.RowToStructByName[Credit])
	if errors.Is(err, pgx.ErrNoRows) {
		return Credit{}, false, nil
	}
	if err != nil {
		return Credit{}, false, fmt.Errorf("get credit for order %s: %w", orderID, err)
	}
	return c, true, nil
}
