package shop

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Credit is a store credit granted on an order. A tenant grants at most one
// credit per order and reason, ever: that is its natural key.
type Credit struct {
	ID             int64     `db:"id" json:"id"`
	Tenant         string    `db:"tenant" json:"tenant"`
	OrderID        string    `db:"order_id" json:"order_id"`
	Reason         string    `db:"reason" json:"reason"`
	AmountCents    int64     `db:"amount_cents" json:"amount_cents"`
	Currency       string    `db:"currency" json:"currency"`
	IdempotencyKey string    `db:"idempotency_key" json:"idempotency_key"`
	CreatedAt      time.Time `db:"created_at" json:"created_at"`
}

// IssuedCredit is the result of [IssueCredit].
type IssuedCredit struct {
	Credit
	// Created is false when a credit for the same order and reason existed
	// already; Credit is then that existing credit, whose amount may differ.
	Created bool `json:"created"`
}

const (
	insertCreditSQL = `
INSERT INTO credits (tenant, order_id, reason, amount_cents, currency, idempotency_key)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (tenant, order_id, reason) DO NOTHING
RETURNING id, tenant, order_id, reason, amount_cents, currency, idempotency_key, created_at`

	selectCreditSQL = `
SELECT id, tenant, order_id, reason, amount_cents, currency, idempotency_key, created_at
FROM credits
WHERE tenant = $1 AND order_id = $2 AND reason = $3`
)

// IssueCredit grants c (its ID and CreatedAt are ignored) unless a credit for
// the same tenant, order and reason exists, in which case it returns that one.
// A concurrent grant of the same credit waits for the other transaction and
// then returns its row.
func IssueCredit(ctx context.Context, tx pgx.Tx, c Credit) (IssuedCredit, error) {
	rows, err := tx.Query(ctx, insertCreditSQL, c.Tenant, c.OrderID, c.Reason, c.AmountCents, c.Currency, c.IdempotencyKey)
	if err != nil {
		return IssuedCredit{}, fmt.Errorf("insert credit for order %s: %w", c.OrderID, err)
	}
	got, err := pgx.CollectOneRow(rows, pgx.RowToStructByName[Credit])
	if err == nil {
		return IssuedCredit{Credit: got, Created: true}, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return IssuedCredit{}, fmt.Errorf("insert credit for order %s: %w", c.OrderID, err)
	}
	// The natural key exists. This is a new statement, so it sees the row even
	// if its transaction committed while the insert above waited for it.
	rows, err = tx.Query(ctx, selectCreditSQL, c.Tenant, c.OrderID, c.Reason)
	if err != nil {
		return IssuedCredit{}, fmt.Errorf("read existing credit for order %s: %w", c.OrderID, err)
	}
	got, err = pgx.CollectOneRow(rows, pgx.RowToStructByName[Credit])
	if err != nil {
		return IssuedCredit{}, fmt.Errorf("read existing credit for order %s: %w", c.OrderID, err)
	}
	return IssuedCredit{Credit: got}, nil
}
