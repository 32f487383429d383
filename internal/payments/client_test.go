package payments_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/payments"
	sandbox "github.com/oncerun/oncerun/internal/sandbox/payments"
	"github.com/oncerun/oncerun/tools"
)

// setup starts a sandbox provider with payment pay_1 of 10.00 EUR and
// returns it with a client.
func setup(t *testing.T) (*sandbox.Running, *payments.Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p, err := sandbox.Start(ctx, sandbox.Config{Addr: "127.0.0.1:0", DataDir: t.TempDir(),
		Payments: []sandbox.Payment{{ID: "pay_1", Amount: 1000, Currency: "eur"}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	c, err := payments.New(payments.Config{BaseURL: p.URL(), APIKey: sandbox.DefaultAPIKey, Timeout: 5 * time.Second})
	require.NoError(t, err)
	return p, c
}

var req = payments.RefundRequest{PaymentID: "pay_1", Amount: 300, Currency: "eur"}

// permanent reports whether err is a non-retryable Temporal error.
func permanent(err error) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app) && app.NonRetryable()
}

func TestRefundSucceedsAndIsFoundByItsKey(t *testing.T) {
	t.Parallel()
	p, c := setup(t)
	r, err := c.Refund(context.Background(), "k1", req)
	require.NoError(t, err)
	assert.Equal(t, "k1", r.IdempotencyKey)
	assert.EqualValues(t, 300, r.Amount)
	again, err := c.Refund(context.Background(), "k1", req)
	require.NoError(t, err)
	assert.Equal(t, r.ID, again.ID, "the provider answers the same key with the first refund")
	found, err := c.FindByKey(context.Background(), "k1")
	require.NoError(t, err)
	require.Len(t, found, 1)
	assert.Equal(t, r.ID, found[0].ID)
	since, err := c.Since(context.Background(), time.Now().Add(-time.Minute))
	require.NoError(t, err)
	assert.Len(t, since, 1)
	assert.Len(t, p.Refunds(), 1)
}

func TestRefundErrorsAreClassified(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		fault      string
		req        payments.RefundRequest
		notApplied bool // before the effect
		permanent  bool
		applied    int // refunds in the provider's ledger afterwards
	}{
		{name: "amount too large", req: payments.RefundRequest{PaymentID: "pay_1", Amount: 5000, Currency: "eur"}, notApplied: true, permanent: true},
		{name: "unknown payment", req: payments.RefundRequest{PaymentID: "pay_x", Amount: 1, Currency: "eur"}, notApplied: true, permanent: true},
		{name: "error after apply", fault: sandbox.FaultErrorAfterApply, req: req, applied: 1},
		{name: "key held with another body", req: payments.RefundRequest{PaymentID: "pay_1", Amount: 301, Currency: "eur"}, applied: 1},
		{name: "error before apply", fault: sandbox.FaultErrorBeforeApply, req: req},
		{name: "connection dropped after apply", fault: sandbox.FaultDropAfterApply, req: req, applied: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, c := setup(t)
			if tc.fault != "" {
				require.NoError(t, p.SetFault(tc.fault, 1))
			}
			if tc.req.Amount == 301 {
				_, err := c.Refund(context.Background(), "k1", req)
				require.NoError(t, err)
			}
			_, err := c.Refund(context.Background(), "k1", tc.req)
			require.Error(t, err)
			assert.Equal(t, tc.notApplied, errors.Is(err, tools.ErrNotApplied), "before the effect: %v", err)
			assert.Equal(t, tc.permanent, permanent(err), "permanent: %v", err)
			assert.Len(t, p.Refunds(), tc.applied)
		})
	}
}

func TestRefundStillInProgressIsUnknown(t *testing.T) {
	t.Parallel()
	p, c := setup(t)
	// The first request with the key is held at the provider for a while.
	first := make(chan error, 1)
	go func() {
		body, _ := json.Marshal(req)
		r, err := http.NewRequest(http.MethodPost, p.URL()+"/v1/refunds", bytes.NewReader(body))
		if err != nil {
			first <- err
			return
		}
		r.Header.Set("Authorization", "Bearer "+sandbox.DefaultAPIKey)
		r.Header.Set("Idempotency-Key", "k1")
		r.Header.Set(sandbox.HeaderFault, "delay=2s")
		resp, err := http.DefaultClient.Do(r)
		if err == nil {
			resp.Body.Close()
		}
		first <- err
	}()
	require.Eventually(t, func() bool {
		_, err := c.Refund(context.Background(), "k1", req)
		var api *payments.APIError
		if errors.As(err, &api) && api.Status == http.StatusConflict {
			assert.False(t, errors.Is(err, tools.ErrNotApplied), "a request in progress may yet apply")
			assert.False(t, permanent(err))
			return true
		}
		return false
	}, 5*time.Second, 20*time.Millisecond)
	require.NoError(t, <-first)
}

func TestRequestThatNeverLeftIsBeforeTheEffect(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	c, err := payments.New(payments.Config{BaseURL: "http://" + addr, APIKey: "k"})
	require.NoError(t, err)
	_, err = c.Refund(context.Background(), "k1", req)
	require.Error(t, err)
	assert.True(t, errors.Is(err, tools.ErrNotApplied), "a refused connection sent nothing: %v", err)
	assert.False(t, permanent(err), "it may work later")
}

// A refund whose send-by moment (its key's lease may have expired) has
// passed is not sent, though its context is not done yet: a process frozen
// past it has just come back, and the lease may be another worker's.
func TestRefundPastItsSendByIsNotSent(t *testing.T) {
	t.Parallel()
	p, c := setup(t)
	_, err := c.Refund(idempotency.WithSendBy(context.Background(), time.Now().Add(-time.Second)), "k1", req)
	require.Error(t, err)
	assert.ErrorIs(t, err, tools.ErrNotApplied)
	assert.Empty(t, p.Refunds(), "nothing reached the provider")

	// A read has no effect: it goes out whenever it is asked for.
	_, err = c.FindByKey(idempotency.WithSendBy(context.Background(), time.Now().Add(-time.Second)), "k1")
	assert.NoError(t, err)
}

func TestReadUnavailableIsAnError(t *testing.T) {
	t.Parallel()
	p, c := setup(t)
	require.NoError(t, p.SetFault(sandbox.FaultReadUnavailable, 1))
	_, err := c.FindByKey(context.Background(), "k1")
	require.Error(t, err)
	found, err := c.FindByKey(context.Background(), "k1")
	require.NoError(t, err)
	assert.Empty(t, found)
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []payments.Config{{}, {BaseURL: "ftp://x", APIKey: "k"}, {BaseURL: "http://x"}} {
		_, err := payments.New(cfg)
		assert.Error(t, err, "%+v", cfg)
	}
}

func TestToolsWithoutAProviderRefuseBeforeSending(t *testing.T) {
	t.Parallel()
	ts := payments.Tools(nil, payments.ToolsConfig{})
	k, err := keys.New("acme", "r1", 1, payments.RefundPayment)
	require.NoError(t, err)
	_, err = ts[0].Run(context.Background(), tools.Call{Key: k, Args: json.RawMessage(`{}`)})
	assert.True(t, errors.Is(err, tools.ErrNotApplied))
	assert.True(t, permanent(err))
}

func TestRecordOfReadsBothShapes(t *testing.T) {
	t.Parallel()
	r, err := payments.RecordOf(json.RawMessage(`{"id":"re_1","amount":5,"currency":"eur"}`))
	require.NoError(t, err)
	assert.Equal(t, "re_1", r.ID)
	r, err = payments.RecordOf(json.RawMessage(`{"found":true,"refund":{"id":"re_2","amount":7,"currency":"eur"}}`))
	require.NoError(t, err)
	assert.Equal(t, "re_2", r.ID)
	_, err = payments.RecordOf(json.RawMessage(`{"found":false}`))
	assert.Error(t, err)
}

func TestRefundApprovalAboveTheThreshold(t *testing.T) {
	t.Parallel()
	ts := payments.Tools(nil, payments.ToolsConfig{ApprovalThresholdCents: 1000})
	need, _, err := ts[0].Approval.Needs(json.RawMessage(`{"amount_cents":1001}`))
	require.NoError(t, err)
	assert.True(t, need)
	need, _, err = ts[0].Approval.Needs(json.RawMessage(`{"amount_cents":1000}`))
	require.NoError(t, err)
	assert.False(t, need)
}

func TestRefundWithAKeyTooLongIsRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	p, c := setup(t)
	ts := payments.Tools(c, payments.ToolsConfig{})
	k, err := keys.New("acme", strings.Repeat("r", 250), 1, payments.RefundPayment)
	require.NoError(t, err)
	_, err = ts[0].Run(context.Background(), tools.Call{Key: k,
		Args: json.RawMessage(`{"order_id":"1","payment_id":"pay_1","amount_cents":5,"currency":"EUR","reason":"x"}`)})
	assert.True(t, errors.Is(err, tools.ErrNotApplied))
	assert.ErrorContains(t, err, "use a shorter run id")
	assert.Empty(t, p.Refunds())
}

// A password in the provider's URL is never printed, not even in the error
// about the URL itself.
func TestNewNeverPrintsThePasswordOfItsURL(t *testing.T) {
	t.Parallel()
	_, err := payments.New(payments.Config{BaseURL: "ftp://shop:hunter2@127.0.0.1:1", APIKey: "k"})
	require.Error(t, err)
	assert.ErrorContains(t, err, "shop:xxxxx@127.0.0.1:1")
	assert.NotContains(t, err.Error(), "hunter2")
}

// headersSeen is an HTTP server that answers 200 with an empty list and
// keeps the headers of every request it got.
type headersSeen struct {
	mu  sync.Mutex
	got []http.Header
}

func (h *headersSeen) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.got = append(h.got, r.Header.Clone())
	h.mu.Unlock()
	_, _ = w.Write([]byte(`{"data":[]}`))
}

func (h *headersSeen) requests() []http.Header {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]http.Header(nil), h.got...)
}

func TestTheClientFollowsNoRedirectAndClassifiesIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		status     int
		sameHost   bool
		notApplied bool // else unknown
	}{
		{name: "307 to another host", status: http.StatusTemporaryRedirect, notApplied: true},
		{name: "308 to another host", status: http.StatusPermanentRedirect, notApplied: true},
		{name: "302 to another host", status: http.StatusFound},
		{name: "307 to the same host", status: http.StatusTemporaryRedirect, sameHost: true, notApplied: true},
		{name: "303 to the same host", status: http.StatusSeeOther, sameHost: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			other := &headersSeen{}
			elsewhere := httptest.NewServer(other)
			t.Cleanup(elsewhere.Close)
			own := &headersSeen{}
			provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/refunds" {
					own.ServeHTTP(w, r)
					return
				}
				target := elsewhere.URL
				if tc.sameHost {
					target = "http://" + r.Host
				}
				http.Redirect(w, r, target+"/moved/v1/refunds?token=s3cret", tc.status)
			}))
			t.Cleanup(provider.Close)
			c, err := payments.New(payments.Config{BaseURL: provider.URL, APIKey: "sk_s3cret"})
			require.NoError(t, err)

			_, err = c.Refund(context.Background(), "k1", req)

			require.Error(t, err)
			assert.ErrorContains(t, err, "refused a redirect")
			assert.NotContains(t, err.Error(), "s3cret", "neither the key nor the Location's query is repeated")
			assert.Equal(t, tc.notApplied, errors.Is(err, tools.ErrNotApplied), "before the effect: %v", err)
			assert.Equal(t, tc.notApplied, permanent(err), "permanent: %v", err)
			assert.Empty(t, other.requests(), "the API key, the body and the Idempotency-Key went to no other host")
			assert.Empty(t, own.requests(), "nor elsewhere on the provider's host")
		})
	}
}

func TestAReadAnsweredWithARedirectSendsTheAPIKeyNowhereElse(t *testing.T) {
	t.Parallel()
	other := &headersSeen{}
	elsewhere := httptest.NewServer(other)
	t.Cleanup(elsewhere.Close)
	provider := httptest.NewServer(http.RedirectHandler(elsewhere.URL+"/v1/refunds", http.StatusFound))
	t.Cleanup(provider.Close)
	c, err := payments.New(payments.Config{BaseURL: provider.URL, APIKey: "sk_s3cret"})
	require.NoError(t, err)

	_, err = c.FindByKey(context.Background(), "k1")

	assert.ErrorContains(t, err, "refused a redirect (HTTP 302) to "+elsewhere.URL)
	assert.Empty(t, other.requests())
}
