package payments

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testKey is the API key the test servers use.
const testKey = "sk_test_unit"

// clock is a settable clock for Config.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// env is a running sandbox with one payment, pi_1: 1000 usd.
type env struct {
	t     *testing.T
	run   *Running
	clock *clock
	dir   string
}

// setup starts a sandbox on a free port in a fresh data dir; edit adjusts
// the Config first.
func setup(t *testing.T, edit ...func(*Config)) *env {
	t.Helper()
	e := &env{t: t, clock: &clock{now: time.Unix(1_700_000_000, 0)}, dir: t.TempDir()}
	cfg := Config{Addr: "127.0.0.1:0", DataDir: e.dir, APIKey: testKey, Now: e.clock.Now}
	for _, f := range edit {
		f(&cfg)
	}
	run, err := Start(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, run.Close()) })
	e.run = run
	require.NoError(t, run.SeedPayment(Payment{ID: "pi_1", Amount: 1000, Currency: "usd"}))
	return e
}

// client never reuses connections: Go's transport silently retries a
// request carrying an Idempotency-Key when a reused connection closes,
// which would hide drop_after_apply.
func client() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
}

// response is an answered request.
type response struct {
	status int
	header http.Header
	body   []byte
}

// send makes a request with the test API key and headers given as
// name, value pairs; it returns the transport error, if any.
func (e *env) send(method, path, body string, headers ...string) (response, error) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.run.URL()+path, strings.NewReader(body))
	require.NoError(e.t, err)
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client().Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// do is send for requests that must be answered.
func (e *env) do(method, path, body string, headers ...string) response {
	e.t.Helper()
	resp, err := e.send(method, path, body, headers...)
	require.NoError(e.t, err)
	return resp
}

// refund posts a refund body with key and any extra headers.
func (e *env) refund(key, body string, headers ...string) response {
	e.t.Helper()
	return e.do(http.MethodPost, "/v1/refunds", body, append([]string{"Idempotency-Key", key}, headers...)...)
}

// okRefund posts a refund that must succeed and returns it.
func (e *env) okRefund(key, body string, headers ...string) Refund {
	e.t.Helper()
	resp := e.refund(key, body, headers...)
	require.Equal(e.t, http.StatusOK, resp.status, string(resp.body))
	return decodeAs[Refund](e.t, resp.body)
}

// list gets /v1/refunds with query and returns the refunds.
func (e *env) list(query string) []Refund {
	e.t.Helper()
	resp := e.do(http.MethodGet, "/v1/refunds?"+query, "")
	require.Equal(e.t, http.StatusOK, resp.status, string(resp.body))
	return decodeAs[struct{ Data []Refund }](e.t, resp.body).Data
}

// apiError decodes an error answer, requiring status.
func apiError(t *testing.T, resp response, status int) APIError {
	t.Helper()
	require.Equal(t, status, resp.status, string(resp.body))
	return decodeAs[struct{ Error APIError }](t, resp.body).Error
}

func decodeAs[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(b, &v), string(b))
	return v
}

// body is a refund request body for pi_1.
func body(amount int, currency string) string {
	return `{"payment_id":"pi_1","amount":` + strconv.Itoa(amount) + `,"currency":"` + currency + `"}`
}
