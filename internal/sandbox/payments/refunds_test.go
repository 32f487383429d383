package payments

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRefund_CreatesSucceededRefund(t *testing.T) {
	t.Parallel()
	e := setup(t)

	r := e.okRefund("k1", body(300, "USD"))

	require.True(t, strings.HasPrefix(r.ID, "re_"), r.ID)
	require.Equal(t, Refund{
		ID: r.ID, PaymentID: "pi_1", Amount: 300, Currency: "usd", Status: "succeeded",
		IdempotencyKey: "k1", Created: e.clock.Now().Unix(),
	}, r)
	require.Equal(t, []Refund{r}, e.run.Refunds())
}

func TestRefund_ReplayReturnsFirstRefund(t *testing.T) {
	t.Parallel()
	e := setup(t)
	first := e.okRefund("k1", body(300, "usd"))
	e.clock.Advance(time.Hour)

	resp := e.refund("k1", body(300, "USD")) // same canonical request

	require.Equal(t, http.StatusOK, resp.status, string(resp.body))
	require.Equal(t, first, decodeAs[Refund](t, resp.body))
	require.Equal(t, "true", resp.header.Get("Idempotent-Replayed"))
	require.Len(t, e.run.Refunds(), 1)
}

func TestRefund_SameKeyDifferentBodyIs422(t *testing.T) {
	t.Parallel()
	for name, changed := range map[string]string{
		"amount":   body(301, "usd"),
		"currency": body(300, "eur"),
		"payment":  `{"payment_id":"pi_2","amount":300,"currency":"usd"}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			require.NoError(t, e.run.SeedPayment(Payment{ID: "pi_2", Amount: 1000, Currency: "usd"}))
			e.okRefund("k1", body(300, "usd"))

			got := apiError(t, e.refund("k1", changed), http.StatusUnprocessableEntity)

			require.Equal(t, TypeIdempotency, got.Type)
			require.Len(t, e.run.Refunds(), 1)
		})
	}
}

func TestRefund_SameKeyWhileDelayedIs409(t *testing.T) {
	t.Parallel()
	e := setup(t)
	first := make(chan response, 1)
	go func() { first <- e.refund("k1", body(300, "usd"), HeaderFault, "delay=1s") }()
	require.Eventually(t, func() bool {
		e.run.mu.Lock()
		defer e.run.mu.Unlock()
		_, busy := e.run.inFlight["k1"]
		return busy
	}, 5*time.Second, 5*time.Millisecond)

	got := apiError(t, e.refund("k1", body(300, "usd")), http.StatusConflict)

	require.Equal(t, APIError{Type: TypeIdempotency, Code: CodeRequestInProgress}, APIError{Type: got.Type, Code: got.Code})
	require.Empty(t, e.run.Refunds(), "the delayed request has not applied yet")
	resp := <-first
	require.Equal(t, http.StatusOK, resp.status, string(resp.body))
	require.Len(t, e.run.Refunds(), 1)
}

func TestRefund_KeyExpiresAfterRetention(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *Config) { c.KeyRetention = 24 * time.Hour })
	first := e.okRefund("k1", body(300, "usd"))

	e.clock.Advance(24*time.Hour - time.Second)
	require.Equal(t, first.ID, e.okRefund("k1", body(300, "usd")).ID, "still retained")

	e.clock.Advance(time.Second)
	second := e.okRefund("k1", body(200, "usd")) // a different body is no 422 either

	require.NotEqual(t, first.ID, second.ID)
	require.Equal(t, []Refund{first, second}, e.list("idempotency_key=k1"))
	require.Equal(t, second.ID, e.okRefund("k1", body(200, "usd")).ID, "the key now binds the new refund")
}

func TestRefund_AmountTooLargeAppliesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.okRefund("k1", body(600, "usd"))

	got := apiError(t, e.refund("k2", body(401, "usd")), http.StatusBadRequest)

	require.Equal(t, TypeInvalidRequest, got.Type)
	require.Equal(t, CodeAmountTooLarge, got.Code)
	require.Len(t, e.run.Refunds(), 1)
	// A refusal does not bind the key: corrected, the same key succeeds.
	require.Equal(t, int64(400), e.okRefund("k2", body(400, "usd")).Amount)
}

func TestRefund_UnknownPaymentIs404(t *testing.T) {
	t.Parallel()
	e := setup(t)

	got := apiError(t, e.refund("k1", `{"payment_id":"pi_nope","amount":1,"currency":"usd"}`), http.StatusNotFound)

	require.Equal(t, APIError{Type: TypeInvalidRequest, Code: CodeResourceMissing}, APIError{Type: got.Type, Code: got.Code})
	require.Empty(t, e.run.Refunds())
}

func TestRefund_CurrencyMismatchIs400(t *testing.T) {
	t.Parallel()
	e := setup(t)

	got := apiError(t, e.refund("k1", body(100, "eur")), http.StatusBadRequest)

	require.Equal(t, TypeInvalidRequest, got.Type)
	require.Equal(t, "currency", got.Param)
	require.Empty(t, e.run.Refunds())
}
