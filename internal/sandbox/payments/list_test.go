package payments

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestList_Filters(t *testing.T) {
	t.Parallel()
	e := setup(t)
	require.NoError(t, e.run.SeedPayment(Payment{ID: "pi_2", Amount: 1000, Currency: "usd"}))
	a := e.okRefund("ka", body(100, "usd"))
	e.clock.Advance(time.Minute)
	b := e.okRefund("kb", `{"payment_id":"pi_2","amount":200,"currency":"usd"}`)
	e.clock.Advance(time.Minute)
	c := e.okRefund("kc", body(300, "usd"))

	cases := map[string][]Refund{
		"":                   {a, b, c},
		"payment_id=pi_1":    {a, c},
		"idempotency_key=kb": {b},
		"created_gte=" + strconv.FormatInt(b.Created, 10):                 {b, c},
		"payment_id=pi_1&created_gte=" + strconv.FormatInt(b.Created, 10): {c},
		"payment_id=pi_nope": {},
	}
	for query, want := range cases {
		t.Run(query, func(t *testing.T) {
			require.Equal(t, want, e.list(query))
		})
	}
}

func TestList_OrdersByCreatedThenID(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.clock.Advance(time.Minute)
	late := e.okRefund("k1", body(100, "usd"))
	e.clock.Advance(-time.Minute)
	early := e.okRefund("k2", body(100, "usd"))
	same := e.okRefund("k3", body(100, "usd"))
	first, second := early, same
	if same.ID < early.ID {
		first, second = same, early
	}

	require.Equal(t, []Refund{first, second, late}, e.list(""))
	require.Equal(t, []Refund{first, second, late}, e.run.Refunds())
}

func TestList_BadQueryIs400(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for query, param := range map[string]string{
		"status=succeeded":          "status",
		"created_gte=yesterday":     "created_gte",
		"payment_id=a&payment_id=b": "payment_id",
	} {
		t.Run(query, func(t *testing.T) {
			got := apiError(t, e.do(http.MethodGet, "/v1/refunds?"+query, ""), http.StatusBadRequest)
			require.Equal(t, TypeInvalidRequest, got.Type)
			require.Equal(t, param, got.Param)
			require.Contains(t, got.Message, param)
		})
	}
}
