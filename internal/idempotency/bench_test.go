package idempotency_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/shop"
)

// benchWorkers is the number of goroutines issuing credits at once.
const benchWorkers = 8

// BenchmarkIssueCredit compares a bare transaction inserting one credit with
// Store.Do wrapping the same insert, at benchWorkers goroutines on one pool of
// benchWorkers connections. The ratio do/bare of their ops/s is the cost of
// the dedup row.
func BenchmarkIssueCredit(b *testing.B) {
	pool := pgtest.NewPool(b, benchWorkers)
	store, err := idempotency.New(pool, idempotency.Config{})
	if err != nil {
		b.Fatal(err)
	}
	hash, err := keys.ArgsHash([]byte(`{"amount_cents":1500,"currency":"EUR","reason":"late delivery"}`))
	if err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	credit := func(key string) shop.Credit {
		return shop.Credit{
			Tenant: "acme", OrderID: fmt.Sprintf("o-%d", seq.Add(1)), Reason: "late delivery",
			AmountCents: 1500, Currency: "EUR", IdempotencyKey: key,
		}
	}
	// run spreads b.N calls of op over exactly benchWorkers goroutines.
	run := func(b *testing.B, op func(ctx context.Context) error) {
		var next atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		for range benchWorkers {
			wg.Go(func() {
				ctx := context.Background()
				for next.Add(1) <= int64(b.N) {
					if err := op(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	}

	b.Run("bare", func(b *testing.B) {
		run(b, func(ctx context.Context) error {
			return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
				_, err := shop.IssueCredit(ctx, tx, credit("bare"))
				return err
			})
		})
	})
	b.Run("do", func(b *testing.B) {
		run(b, func(ctx context.Context) error {
			k, err := keys.New("acme", "bench", seq.Add(1), "issue_credit")
			if err != nil {
				return err
			}
			c := idempotency.Claim{Key: k, ArgsHash: hash}
			_, err = store.Do(ctx, c, func(ctx context.Context, tx pgx.Tx) (json.RawMessage, error) {
				got, err := shop.IssueCredit(ctx, tx, credit(c.Key.String()))
				if err != nil {
					return nil, err
				}
				return json.Marshal(got)
			})
			return err
		})
	})
}
