package shop

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Note is a note on an order. Nothing in it identifies it, so only the
// idempotency key committed with it keeps a retried call from adding it twice.
type Note struct {
	ID             int64     `db:"id" json:"id"`
	Tenant         string    `db:"tenant" json:"tenant"`
	OrderID        string    `db:"order_id" json:"order_id"`
	Body           string    `db:"body" json:"body"`
	IdempotencyKey string    `db:"idempotency_key" json:"idempotency_key"`
	CreatedAt      time.Time `db:"created_at" json:"created_at"`
}

// AddNote inserts n (its ID and CreatedAt are ignored) and returns the row.
func AddNote(ctx context.Context, tx pgx.Tx, n Note) (Note, error) {
	rows, err := tx.Query(ctx, `
INSERT INTO order_notes (tenant, order_id, body, idempotency_key)
VALUES ($1, $2, $3, $4)
RETURNING id, tenant, order_id, body, idempotency_key, created_at`,
		n.Tenant, n.OrderID, n.Body, n.IdempotencyKey)
	if err != nil {
		return Note{}, fmt.Errorf("add note to order %s: %w", n.OrderID, err)
	}
	got, err := pgx.CollectOneRow(rows, pgx.RowToStructByName[Note])
	if err != nil {
		return Note{}, fmt.Errorf("add note to order %s: %w", n.OrderID, err)
	}
	return got, nil
}
