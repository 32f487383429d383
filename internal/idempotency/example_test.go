package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/shop"
)

// examplePool returns a pool on a new migrated database and a function that
// drops it.
func examplePool() (*pgxpool.Pool, func()) {
	ctx := context.Background()
	db, drop, err := pgtest.Create(ctx, true)
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		log.Fatal(err)
	}
	return pool, func() { pool.Close(); _ = drop(ctx) }
}

// A natural-key tool: issuing a credit twice under the same key runs the
// insert once and replays its result.
func ExampleStore_Do() {
	pool, done := examplePool()
	defer done()
	ctx := context.Background()
	store, err := idempotency.New(pool, idempotency.Config{})
	if err != nil {
		log.Fatal(err)
	}

	args := []byte(`{"order_id":"o-1","reason":"late delivery","amount_cents":1500,"currency":"EUR"}`)
	key, err := keys.New("acme", "run-1", 1, "issue_credit")
	if err != nil {
		log.Fatal(err)
	}
	hash, err := keys.ArgsHash(args)
	if err != nil {
		log.Fatal(err)
	}
	claim := idempotency.Claim{Key: key, ArgsHash: hash}
	issue := func(ctx context.Context, tx pgx.Tx) (json.RawMessage, error) {
		c, err := shop.IssueCredit(ctx, tx, shop.Credit{
			Tenant: "acme", OrderID: "o-1", Reason: "late delivery",
			AmountCents: 1500, Currency: "EUR", IdempotencyKey: key.String(),
		})
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]any{"credit_id": c.ID, "created": c.Created})
	}

	for range 2 {
		out, err := store.Do(ctx, claim, issue)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("replayed=%t result=%s\n", out.Replayed, out.Result)
	}
	// Output:
	// replayed=false result={"created": true, "credit_id": 1}
	// replayed=true result={"created": true, "credit_id": 1}
}

// An external tool: the claim is committed before the provider is called,
// and the provider gets the key as its idempotency key.
func ExampleStore_Begin() {
	pool, done := examplePool()
	defer done()
	ctx := context.Background()
	store, err := idempotency.New(pool, idempotency.Config{})
	if err != nil {
		log.Fatal(err)
	}
	key, _ := keys.New("acme", "run-1", 2, "refund_payment")
	hash, _ := keys.ArgsHash([]byte(`{"payment_id":"pay_1","amount_cents":500}`))

	begun, err := store.Begin(ctx, idempotency.Claim{Key: key, ArgsHash: hash})
	var unknown *idempotency.OutcomeUnknownError
	switch {
	case errors.Is(err, idempotency.ErrInFlight):
		return // another worker is calling the provider; retry later
	case errors.As(err, &unknown):
		return // resolve with the tool's paired read under unknown.Lease
	case err != nil:
		log.Fatal(err)
	case begun.Lease == nil:
		fmt.Printf("replayed %s\n", begun.Outcome.Result)
		return
	}
	// Call the provider with Idempotency-Key: key.String() here.
	out, err := store.Complete(ctx, begun.Lease, json.RawMessage(`{"refund_id":"re_1"}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("completed %s\n", out.Result)
	// Output:
	// completed {"refund_id": "re_1"}
}
