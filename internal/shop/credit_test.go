package shop_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/shop"
)

func credit(key string, cents int64) shop.Credit {
	return shop.Credit{Tenant: "acme", OrderID: "o-1", Reason: "late delivery", AmountCents: cents, Currency: "EUR", IdempotencyKey: key}
}

func TestIssueCreditConcurrentGrantWaitsAndReturnsExisting(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 4)
	ctx := context.Background()

	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer first.Rollback(ctx) //nolint:errcheck
	created, err := shop.IssueCredit(ctx, first, credit("k1", 1500))
	require.NoError(t, err)
	require.True(t, created.Created)

	type result struct {
		got shop.IssuedCredit
		err error
	}
	second := make(chan result, 1)
	go func() {
		var r result
		r.err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			r.got, err = shop.IssueCredit(ctx, tx, credit("k2", 9900))
			return err
		})
		second <- r
	}()

	// The second grant must block on the natural key until the first commits.
	require.Eventually(t, func() bool {
		var waiting int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return err == nil && waiting == 1
	}, 10*time.Second, 10*time.Millisecond, "the second grant waits on the first's row")
	select {
	case r := <-second:
		t.Fatalf("the second grant returned before the first committed: %+v", r)
	default:
	}
	require.NoError(t, first.Commit(ctx))
	r := <-second
	require.NoError(t, r.err)
	assert.False(t, r.got.Created)
	assert.Equal(t, created.ID, r.got.ID)
	assert.EqualValues(t, 1500, r.got.AmountCents, "the existing credit stands, not the second amount")
	assert.Equal(t, "k1", r.got.IdempotencyKey)
}

func TestIssueCreditRejectsBadRows(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 2)
	ctx := context.Background()
	for _, c := range []shop.Credit{credit("k", 0), {Tenant: "acme", OrderID: "o", Reason: "r", AmountCents: 1, Currency: "eur", IdempotencyKey: "k"}} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := shop.IssueCredit(ctx, tx, c)
			return err
		})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "insert credit for order "+c.OrderID)
	}
}

func TestAddNote(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 2)
	ctx := context.Background()
	var n shop.Note
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		n, err = shop.AddNote(ctx, tx, shop.Note{Tenant: "acme", OrderID: "o-1", Body: "called the customer", IdempotencyKey: "k"})
		return err
	}))
	assert.NotZero(t, n.ID)
	assert.Equal(t, "called the customer", n.Body)
	assert.False(t, n.CreatedAt.IsZero())

	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := shop.AddNote(ctx, tx, shop.Note{Tenant: "acme", OrderID: "o-1", IdempotencyKey: "k"})
		return err
	})
	require.ErrorContains(t, err, "order_notes_body_check")
}
