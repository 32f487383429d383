package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncerun/oncerun/migrations"
)

// server is the PostgreSQL server every implementation uses, reached at
// its URL's database to make and drop the others.
type server struct{ url string }

// create makes database name. It never drops one first: a database of
// that name is somebody else's.
func (s server) create(ctx context.Context, name string) error {
	return s.exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
}

// drop drops database name, closing the connections left on it.
func (s server) drop(ctx context.Context, name string) error {
	return s.exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

func (s server) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// poolURL is the URL of database name with a pool of size connections,
// all opened at once and kept for the whole benchmark: a backend that
// ended during a measured half would take its CPU time with it.
func (s server) poolURL(name string, size int) (string, error) {
	u, err := url.Parse(s.url)
	if err != nil {
		return "", fmt.Errorf("-database-url: %w", err)
	}
	u.Path = "/" + name
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(size))
	q.Set("pool_min_conns", strconv.Itoa(size))
	q.Set("pool_max_conn_idle_time", "24h")
	q.Set("pool_max_conn_lifetime", "24h")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// openPool opens a pool on url.
func openPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// migrate applies oncerun's migrations, which make the order_notes table
// every implementation inserts into.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	_, err = migrations.Migrate(ctx, conn.Conn())
	return err
}

// insertNote is the insert of oncerun's add_order_note effect
// (shop.AddNote), which the peers make as it is.
const insertNote = `
INSERT INTO order_notes (tenant, order_id, body, idempotency_key)
VALUES ($1, $2, $3, $4)
RETURNING id, tenant, order_id, body, idempotency_key, created_at`

// noteRow is the row insertNote returns.
type noteRow struct {
	id                         int64
	tenant, orderID, body, key string
	createdAt                  time.Time
}

// scanner is a row of pgx's or of DBOS's.
type scanner interface{ Scan(dest ...any) error }

func scanNote(row scanner) (noteRow, error) {
	var n noteRow
	err := row.Scan(&n.id, &n.tenant, &n.orderID, &n.body, &n.key, &n.createdAt)
	return n, err
}

// noteKey is the idempotency key column of note n of run id made by impl,
// which names the implementation so that the table can be counted.
func noteKey(impl, id string, n int) string { return fmt.Sprintf("%s/%s/%d", impl, id, n) }

// countNotes counts the notes in pool's table whose key starts with
// prefix.
func countNotes(ctx context.Context, pool *pgxpool.Pool, prefix string) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM order_notes WHERE starts_with(idempotency_key, $1)`, prefix).Scan(&n)
	return n, err
}
