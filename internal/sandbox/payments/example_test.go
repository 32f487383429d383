package payments_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/oncerun/oncerun/internal/sandbox/payments"
)

// Start a sandbox on a free port, seed a payment and refund part of it
// twice with one idempotency key: the second request returns the first
// refund.
func ExampleStart() {
	dir, err := os.MkdirTemp("", "sandbox-payments")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	run, err := payments.Start(context.Background(), payments.Config{Addr: "127.0.0.1:0", DataDir: dir})
	if err != nil {
		panic(err)
	}
	defer run.Close()
	if err := run.SeedPayment(payments.Payment{ID: "pi_123", Amount: 5000, Currency: "usd"}); err != nil {
		panic(err)
	}

	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, run.URL()+"/v1/refunds",
			strings.NewReader(`{"payment_id":"pi_123","amount":1500,"currency":"usd"}`))
		req.Header.Set("Authorization", "Bearer "+payments.DefaultAPIKey)
		req.Header.Set("Idempotency-Key", "refund-order-42")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		var r payments.Refund
		_ = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		fmt.Printf("%d %d %s %s replayed=%t\n", resp.StatusCode, r.Amount, r.Currency, r.Status,
			resp.Header.Get("Idempotent-Replayed") == "true")
	}
	fmt.Println(len(run.Refunds()), "refund in the ledger")
	// Output:
	// 200 1500 usd succeeded replayed=false
	// 200 1500 usd succeeded replayed=true
	// 1 refund in the ledger
}
