package payments

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAuth_RequiresBearerKey(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for name, authz := range map[string]string{
		"missing":   "",
		"wrong key": "Bearer sk_test_other",
		"basic":     "Basic " + testKey,
		"raw key":   testKey,
	} {
		for _, path := range []string{"/v1/refunds", "/v1/sandbox/payments", "/v1/sandbox/faults"} {
			t.Run(name+" "+path, func(t *testing.T) {
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.run.URL()+path,
					strings.NewReader(`{"payment_id":"pi_9","amount":1,"currency":"usd"}`))
				require.NoError(t, err)
				req.Header.Set("Idempotency-Key", "k1")
				if authz != "" {
					req.Header.Set("Authorization", authz)
				}
				resp, err := client().Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				var got struct{ Error APIError }
				require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))

				require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
				require.Equal(t, TypeAuthentication, got.Error.Type)
			})
		}
	}
	require.Empty(t, e.run.Refunds())
	require.Len(t, e.run.Payments(), 1)
}

func TestAuth_AcceptsConfiguredKey(t *testing.T) {
	t.Parallel()
	e := setup(t)

	resp := e.do(http.MethodGet, "/v1/sandbox/payments", "") // sends testKey

	require.Equal(t, http.StatusOK, resp.status, string(resp.body))
}

func TestConfig_DefaultsAPIKey(t *testing.T) {
	t.Parallel()
	require.Equal(t, "sk_test_oncerun", Config{}.WithDefaults().APIKey)
}
