package payments

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRefund_BadInputIs400NamingTheProblem(t *testing.T) {
	t.Parallel()
	e := setup(t)
	long := strings.Repeat("k", 256)
	cases := []struct {
		name, key, body      string
		param, code, mention string
	}{
		{"missing key", "", body(1, "usd"), "Idempotency-Key", CodeParameterMissing, "Idempotency-Key header is required"},
		{"key too long", long, body(1, "usd"), "Idempotency-Key", CodeParameterInvalid, "at most 255 characters"},
		{"bad json", "k1", `{"payment_id":`, "", "", "JSON"},
		{"not an object", "k1", `[1]`, "", "", "JSON object"},
		{"two values", "k1", body(1, "usd") + body(1, "usd"), "", "", "single JSON value"},
		{"unknown field", "k1", `{"payment_id":"pi_1","amount":1,"currency":"usd","reason":"x"}`, "reason", CodeParameterUnknown, `"reason"`},
		{"fractional amount", "k1", `{"payment_id":"pi_1","amount":1.5,"currency":"usd"}`, "amount", CodeParameterInvalid, "amount must be an integer"},
		{"string amount", "k1", `{"payment_id":"pi_1","amount":"1","currency":"usd"}`, "amount", CodeParameterInvalid, "amount must be an integer"},
		{"zero amount", "k1", body(0, "usd"), "amount", CodeParameterInvalid, "positive"},
		{"missing amount", "k1", `{"payment_id":"pi_1","currency":"usd"}`, "amount", CodeParameterMissing, "amount is required"},
		{"missing payment", "k1", `{"amount":1,"currency":"usd"}`, "payment_id", CodeParameterMissing, "payment_id is required"},
		{"short currency", "k1", body(1, "us"), "currency", CodeParameterInvalid, "three letters"},
		{"digit currency", "k1", body(1, "us1"), "currency", CodeParameterInvalid, "three letters"},
		{"missing currency", "k1", `{"payment_id":"pi_1","amount":1}`, "currency", CodeParameterMissing, "currency is required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			headers := []string{}
			if tc.key != "" {
				headers = append(headers, "Idempotency-Key", tc.key)
			}
			resp := e.do(http.MethodPost, "/v1/refunds", tc.body, headers...)

			got := apiError(t, resp, http.StatusBadRequest)
			require.Equal(t, TypeInvalidRequest, got.Type)
			require.Equal(t, tc.param, got.Param)
			require.Equal(t, tc.code, got.Code)
			require.Contains(t, got.Message, tc.mention)
		})
	}
	require.Empty(t, e.run.Refunds())
}

func TestRefund_KeyOf255CharactersIsAccepted(t *testing.T) {
	t.Parallel()
	e := setup(t)

	r := e.okRefund(strings.Repeat("é", 255), body(1, "usd"))

	require.Equal(t, strings.Repeat("é", 255), r.IdempotencyKey)
}

func TestRoutes_UnknownPathAndMethod(t *testing.T) {
	t.Parallel()
	e := setup(t)

	require.Equal(t, TypeInvalidRequest, apiError(t, e.do(http.MethodGet, "/v1/charges", ""), http.StatusNotFound).Type)
	require.Equal(t, TypeInvalidRequest, apiError(t, e.do(http.MethodDelete, "/v1/refunds", ""), http.StatusMethodNotAllowed).Type)
}
