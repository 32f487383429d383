package idempotency_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/shop"
)

// roundTrips counts the round trips pgx makes to PostgreSQL: a statement
// sent on its own, a prepared statement's description, and a pipelined
// batch (one, however many statements it carries).
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (*roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (*roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
func (r *roundTrips) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (*roundTrips) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// count returns how many round trips f makes.
func (r *roundTrips) count(t *testing.T, f func() error) int64 {
	t.Helper()
	before := r.n.Load()
	require.NoError(t, f())
	return r.n.Load() - before
}

// TestRoundTripsOfAToolCall holds the number of round trips of a keyed
// tool call, beside the bare transaction that makes the same effect, so
// that a change cannot add one silently: Do makes as many as the bare
// transaction.
func TestRoundTripsOfAToolCall(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 1 // one connection: its statement cache is warm after the first call
	tracer := &roundTrips{}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store := newStore(t, pool, "worker-a")
	ctx := context.Background()

	credit := func(key, order string) shop.Credit {
		return shop.Credit{Tenant: "acme", OrderID: order, Reason: "late", AmountCents: 1500, Currency: "EUR", IdempotencyKey: key}
	}
	bare := func(order string) func() error {
		return func() error {
			return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
				_, err := shop.IssueCredit(ctx, tx, credit("bare", order))
				return err
			})
		}
	}
	do := func(run string) func() error {
		return func() error {
			c := claim(t, "acme", run, 1, "issue_credit", `{"order_id":"`+run+`"}`)
			_, err := store.Do(ctx, c, func(ctx context.Context, tx pgx.Tx) (json.RawMessage, error) {
				got, err := shop.IssueCredit(ctx, tx, credit(c.Key.String(), run))
				if err != nil {
					return nil, err
				}
				return json.Marshal(got)
			})
			return err
		}
	}
	// Warm the connection's statement cache on every path.
	tracer.count(t, bare("warm-bare"))
	tracer.count(t, do("warm-do"))
	tracer.count(t, do("warm-do"))

	bareTrips := tracer.count(t, bare("o-bare"))
	doTrips := tracer.count(t, do("o-do"))
	replayTrips := tracer.count(t, do("o-do"))

	assert.EqualValues(t, 3, bareTrips, "BEGIN, the credit's INSERT, COMMIT")
	assert.EqualValues(t, bareTrips, doTrips, "BEGIN with the claim, the credit's INSERT, the key's row pipelined with COMMIT")
	assert.EqualValues(t, 3, replayTrips, "BEGIN with the claim that meets the key, ROLLBACK, the key's row")
}
