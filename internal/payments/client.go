// Package payments is a client of a payment provider's refunds API, in the
// shape Stripe's takes (the sandbox provider, `oncerun-dev sandbox-payments`,
// serves it too). Every error it returns is classified where it happens:
// see [Client.Refund].
package payments

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/oncerun/oncerun/internal/telemetry"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/tools"
)

// Defaults of [Config].
const (
	DefaultTimeout = 20 * time.Second
	// DefaultKeyLifetime is how long the provider keeps idempotency keys
	// (Stripe's is 24 hours).
	DefaultKeyLifetime = 24 * time.Hour
)

// Config configures a [Client].
type Config struct {
	// BaseURL is the provider's address, such as http://127.0.0.1:8099
	// (PAYMENTS_BASE_URL). Required.
	BaseURL string
	// APIKey is sent as the bearer token (PAYMENTS_API_KEY). Required.
	APIKey string
	// Timeout bounds one request. Default DefaultTimeout.
	Timeout time.Duration
	// HTTP is the client requests go through, its CheckRedirect replaced
	// by one that refuses every redirect (see [Client.Refund]). Default: a
	// client of its own that opens a connection per request: Go's transport
	// silently resends a request carrying an Idempotency-Key when a reused
	// connection drops, which would hide from oncerun an outcome it must
	// classify (and would resend after the provider's key lifetime).
	HTTP *http.Client
}

// Client calls the provider.
type Client struct {
	cfg  Config
	base *url.URL
}

// New checks cfg and returns a client.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" {
		return nil, errors.New("payments: BaseURL (PAYMENTS_BASE_URL) is empty")
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("payments: BaseURL %q is not an http or https URL", untrusted.Redact(cfg.BaseURL))
	}
	if cfg.APIKey == "" {
		return nil, errors.New("payments: APIKey (PAYMENTS_API_KEY) is empty")
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	if cfg.HTTP == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DisableKeepAlives = true
		// Traced while OTEL_* configure tracing: the provider gets our traceparent.
		cfg.HTTP = &http.Client{Transport: telemetry.Transport(t)}
	}
	// Go's client keeps the Authorization header on a redirect to another
	// port of the same host or to a subdomain, and resends the body and its
	// Idempotency-Key wherever a 307 points: the API key must reach the
	// provider only.
	httpc := *cfg.HTTP
	httpc.CheckRedirect = untrusted.NoRedirects.CheckRedirect
	cfg.HTTP = &httpc
	return &Client{cfg: cfg, base: u}, nil
}

// RefundRequest is a refund to make.
type RefundRequest struct {
	PaymentID string `json:"payment_id"`
	// Amount is in integer minor units of Currency.
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// Refund is a refund in the provider's ledger.
type Refund struct {
	ID             string `json:"id"`
	PaymentID      string `json:"payment_id"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	Status         string `json:"status"`
	IdempotencyKey string `json:"idempotency_key"`
	// Created is a Unix time in seconds.
	Created int64 `json:"created"`
}

// APIError is an error answer of the provider.
type APIError struct {
	Status  int    `json:"-"`
	Type    string `json:"type"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// Error names the status, type and code.
func (e *APIError) Error() string {
	s := fmt.Sprintf("provider answered %d %s", e.Status, e.Type)
	if e.Code != "" {
		s += " (" + e.Code + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Refund asks the provider for a refund under idempotency key key, and
// classifies every failure:
//
//   - before the effect ([tools.ErrNotApplied]): the request could not be
//     built or was never written (a refused connection, a DNS failure), or
//     the provider answered definitely that nothing happened (4xx other
//     than 409 and 422). A definite answer that retrying cannot change (400,
//     404) is also [tools.Permanent].
//   - unknown (any other error): the request was written and no definite
//     answer came back (a timeout, a reset connection, a 5xx, a 409 while
//     the first request with the key is still being processed, a 422 for a
//     key the provider holds with another body, a body that does not
//     read).
//
// The client follows no redirect, not even to the provider's own host: a
// provider's API answers its own paths, and a redirect says BaseURL is not
// where the provider is (http for https, a missing path prefix), which
// PAYMENTS_BASE_URL must say instead. A 307 or 308 asks for the same request
// elsewhere, which by HTTP's rules means the provider did not act on it: not
// applied, and permanent (the same request is answered the same way). A
// 301, 302 or 303 may answer a POST the provider acted on (a 303 is how a
// server shows the result of a POST it ran): unknown.
func (c *Client) Refund(ctx context.Context, key string, req RefundRequest) (Refund, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return Refund{}, tools.Permanent(tools.NotApplied(fmt.Errorf("encode refund: %w", err)))
	}
	var r Refund
	err = c.do(ctx, http.MethodPost, "/v1/refunds", body, key, &r)
	return r, err
}

// FindByKey lists the refunds made under idempotency key key: the paired
// read of a refund. An error means the provider cannot tell now.
func (c *Client) FindByKey(ctx context.Context, key string) ([]Refund, error) {
	return c.list(ctx, url.Values{"idempotency_key": {key}})
}

// Since lists the refunds created at or after t, for reconciliation.
func (c *Client) Since(ctx context.Context, t time.Time) ([]Refund, error) {
	return c.list(ctx, url.Values{"created_gte": {strconv.FormatInt(t.Unix(), 10)}})
}

func (c *Client) list(ctx context.Context, q url.Values) ([]Refund, error) {
	var out struct {
		Data []Refund `json:"data"`
	}
	if err := c.do(ctx, http.MethodGet, "/v1/refunds?"+q.Encode(), nil, "", &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// do sends one request and decodes a 2xx answer into out, classifying
// failures as Refund documents.
func (c *Client) do(ctx context.Context, method, path string, body []byte, key string, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var written atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteHeaders: func() { written.Store(true) },
	})
	u := strings.TrimSuffix(c.base.String(), "/") + path
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return tools.Permanent(tools.NotApplied(fmt.Errorf("%s %s: %w", method, path, err)))
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	// A worker frozen past its key's lease sends no effect
	// (tools.BeforeSend); a read may go out at any time.
	if key != "" {
		if err := tools.BeforeSend(ctx); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	resp, err := c.cfg.HTTP.Do(req)
	if redirect := (*untrusted.RedirectError)(nil); errors.As(err, &redirect) {
		// Not err itself: it repeats the Location as the provider sent it.
		err = fmt.Errorf("%s %s: %w", method, path, redirect)
		if redirect.Repeat() {
			return tools.Permanent(tools.NotApplied(err))
		}
		return err
	}
	if err != nil {
		err = fmt.Errorf("%s %s: %w", method, path, err)
		if !written.Load() {
			// Nothing reached the provider.
			return tools.NotApplied(err)
		}
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%s %s: the answer is not the expected JSON: %w", method, path, err)
		}
		return nil
	}
	apiErr := &APIError{Status: resp.StatusCode}
	var envelope struct {
		Error *APIError `json:"error"`
	}
	if json.Unmarshal(raw, &envelope) == nil && envelope.Error != nil {
		apiErr = envelope.Error
		apiErr.Status = resp.StatusCode
	}
	err = fmt.Errorf("%s %s: %w", method, path, apiErr)
	switch {
	case resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusUnprocessableEntity || resp.StatusCode >= 500:
		// 409: the first request with the key is still being processed.
		// 422: the provider holds a request under the key with another
		// body: something was made under it. Neither says nothing
		// happened: the paired read settles them.
		return err
	case resp.StatusCode == http.StatusBadRequest, resp.StatusCode == http.StatusNotFound:
		return tools.Permanent(tools.NotApplied(err))
	}
	return tools.NotApplied(err)
}
