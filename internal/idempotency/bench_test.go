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

// BenchmarkIssueCredit compares a bare transaction inserting one credit with
// Store.Do wrapping the same insert, at 1, 8 and 32 goroutines, each count
// on its own pool of as many connections. The ratio do/bare of their ops/s
// is the cost of the dedup row; `benchstat -col /impl` prints it. CPU
// (client and server) and WAL per call are reported beside, since they do
// not move with the machine's other work as ops/s does.
func BenchmarkIssueCredit(b *testing.B) {
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
	for _, callers := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			pool := pgtest.NewPool(b, int32(callers))
			store, err := idempotency.New(pool, idempotency.Config{})
			if err != nil {
				b.Fatal(err)
			}
			// run spreads b.N calls of op over exactly callers goroutines.
			run := func(b *testing.B, op func(ctx context.Context) error) {
				var next atomic.Int64
				var wg sync.WaitGroup
				cost := startCost(b, pool, callers)
				b.ResetTimer()
				for range callers {
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
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
				cost.report(b)
			}
			b.Run("impl=bare", func(b *testing.B) {
				run(b, func(ctx context.Context) error {
					return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
						_, err := shop.IssueCredit(ctx, tx, credit("bare"))
						return err
					})
				})
			})
			b.Run("impl=do", func(b *testing.B) {
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
		})
	}
}
