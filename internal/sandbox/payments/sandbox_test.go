package payments

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestSeed_ObjectOrArray(t *testing.T) {
	t.Parallel()
	e := setup(t)

	one := e.do(http.MethodPost, "/v1/sandbox/payments", `{"id":"pi_2","amount":500,"currency":"EUR"}`)
	many := e.do(http.MethodPost, "/v1/sandbox/payments",
		`[{"id":"pi_3","amount":1,"currency":"gbp"},{"id":"pi_1","amount":1000,"currency":"usd"}]`)

	require.Equal(t, http.StatusOK, one.status, string(one.body))
	require.Equal(t, []Payment{{ID: "pi_2", Amount: 500, Currency: "eur"}}, decodeAs[struct{ Data []Payment }](t, one.body).Data)
	require.Equal(t, http.StatusOK, many.status, string(many.body))
	require.Len(t, decodeAs[struct{ Data []Payment }](t, many.body).Data, 2)
	require.Len(t, e.run.Payments(), 3)
	e.okRefund("k1", `{"payment_id":"pi_2","amount":500,"currency":"eur"}`)
}

func TestSeed_ConflictingPaymentIs409AndStoresNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)

	resp := e.do(http.MethodPost, "/v1/sandbox/payments",
		`[{"id":"pi_4","amount":1,"currency":"usd"},{"id":"pi_1","amount":999,"currency":"usd"}]`)

	require.Equal(t, CodeResourceAlreadyExists, apiError(t, resp, http.StatusConflict).Code)
	require.Equal(t, []Payment{{ID: "pi_1", Amount: 1000, Currency: "usd"}}, e.run.Payments())
	require.ErrorIs(t, e.run.SeedPayment(Payment{ID: "pi_1", Amount: 1000, Currency: "eur"}), ErrPaymentConflict)
	require.NoError(t, e.run.SeedPayment(Payment{ID: "pi_1", Amount: 1000, Currency: "USD"}))
}

func TestSeed_InvalidPaymentIs400(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for name, b := range map[string]string{
		"no id":       `{"amount":1,"currency":"usd"}`,
		"zero amount": `{"id":"pi_5","amount":0,"currency":"usd"}`,
		"currency":    `{"id":"pi_5","amount":1,"currency":"dollars"}`,
		"empty array": `[]`,
		"extra field": `{"id":"pi_5","amount":1,"currency":"usd","email":"x"}`,
	} {
		t.Run(name, func(t *testing.T) {
			apiError(t, e.do(http.MethodPost, "/v1/sandbox/payments", b), http.StatusBadRequest)
		})
	}
	require.Len(t, e.run.Payments(), 1)
	require.ErrorIs(t, e.run.SeedPayment(Payment{ID: "pi_5", Amount: -1, Currency: "usd"}), ErrInvalidPayment)
}

func TestLog_OneLinePerRequest(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.InfoLevel)
	e := setup(t, func(c *Config) { c.Log = zap.New(core) })

	e.okRefund("k1", body(100, "usd"))
	e.refund("k2", body(100, "usd"), HeaderFault, FaultErrorBeforeApply)
	e.list("")

	entries := logs.All()
	require.Len(t, entries, 3)
	first := entries[0].ContextMap()
	require.Equal(t, "/v1/refunds", first["path"])
	require.Equal(t, int64(http.StatusOK), first["status"])
	require.Equal(t, "k1", first["idempotency_key"])
	require.Equal(t, FaultErrorBeforeApply, entries[1].ContextMap()["fault"])
	require.Equal(t, int64(http.StatusInternalServerError), entries[1].ContextMap()["status"])
}
