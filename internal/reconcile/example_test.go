package reconcile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/reconcile"
)

// A provider's ledger lists a refund made under one of our keys that our
// dedup store has no record of: the pass records it as under-recorded, and
// once acknowledged it leaves the report.
func ExamplePass() {
	ctx := context.Background()
	db, drop, err := pgtest.Create(ctx, true)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop(ctx) //nolint:errcheck // a test database
	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	refunds := reconcile.Source{
		Tool: "refund_payment",
		List: func(context.Context, time.Time) ([]reconcile.Entry, error) {
			return []reconcile.Entry{{
				Key: "v1/acme/r1/3/refund_payment", ProviderID: "re_1", Amount: 2500, Currency: "eur",
				Created: time.Now().Add(-time.Hour),
			}}, nil
		},
		Record: func(result json.RawMessage) (reconcile.Entry, error) {
			var e struct {
				ID       string `json:"id"`
				Amount   int64  `json:"amount"`
				Currency string `json:"currency"`
			}
			err := json.Unmarshal(result, &e)
			return reconcile.Entry{ProviderID: e.ID, Amount: e.Amount, Currency: e.Currency}, err
		},
	}
	cfg := reconcile.Config{Pool: pool, Sources: []reconcile.Source{refunds}}
	rep, err := reconcile.Pass(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range rep.Findings {
		fmt.Println(f.Kind, f.Tenant, f.RunID, f.Step, f.Amount, f.Currency)
	}
	fmt.Println("drift:", rep.DriftCount, rep.DriftAmount)

	if _, err := reconcile.Ack(ctx, pool, rep.Findings[0].ID, "alice", "a refund made by hand; recorded in the books"); err != nil {
		fmt.Println(err)
		return
	}
	rep, err = reconcile.Pass(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("drift after the acknowledgement:", rep.DriftCount)
	// Output:
	// under_recorded acme r1 3 2500 eur
	// drift: 1 map[eur:2500]
	// drift after the acknowledgement: 0
}
