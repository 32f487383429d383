package mcp_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/tools"
)

// bearer is the token the redirect tests' servers are configured with.
const bearer = "tok-s3cret"

// recorder is an HTTP server that answers 404 to every request and keeps
// what it got: where a refused redirect pointed.
type recorder struct {
	mu  sync.Mutex
	got []*http.Request
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.got = append(r.got, req.Clone(context.Background()))
	r.mu.Unlock()
	http.NotFound(w, req)
}

func (r *recorder) requests() []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*http.Request(nil), r.got...)
}

// redirecting is a test MCP server of variant honouring at /mcp whose
// tools/call POSTs (every request, with all) are answered with status and
// a Location that to gives. It also serves MCP at /mcp/; its other paths
// are a recorder.
type redirecting struct {
	URL     string
	Ledger  *ledger
	Other   *recorder
	release sync.Once
}

// releaseSlow ends the calls of slow still running.
func (r *redirecting) releaseSlow() { r.release.Do(func() { close(r.Ledger.release) }) }

func startRedirecting(t *testing.T, status int, all bool, to func(own string) string) *redirecting {
	t.Helper()
	r := &redirecting{Ledger: &ledger{release: make(chan struct{})}, Other: &recorder{}}
	srv := newServer(honouring, r.Ledger, false)
	h := mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return srv }, nil)
	var own string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch req.URL.Path {
		case "/mcp/":
			h.ServeHTTP(w, req)
			return
		case "/mcp":
		default:
			r.Other.ServeHTTP(w, req)
			return
		}
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		if all || (req.Method == http.MethodPost && bytes.Contains(body, []byte(`"tools/call"`))) {
			w.Header().Set("Location", to(own))
			w.WriteHeader(status)
			return
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(ts.Close)
	t.Cleanup(r.releaseSlow) // runs first
	own = ts.URL
	r.URL = ts.URL + "/mcp"
	return r
}

// startRecorder starts a recorder of its own: another origin.
func startRecorder(t *testing.T) (*recorder, string) {
	t.Helper()
	r := &recorder{}
	ts := httptest.NewServer(r)
	t.Cleanup(ts.Close)
	return r, ts.URL
}

// withToken is the options of a worker whose PAY_TOKEN is bearer.
var withToken = mcp.Options{LookupEnv: func(k string) (string, bool) {
	if k == "PAY_TOKEN" {
		return bearer, true
	}
	return "", false
}}

// payServer is the configuration of the refund server at url, sent bearer.
func payServer(url string) mcp.ServerConfig {
	sc := httpConfig("pay", url, payTools(true))
	sc.BearerTokenEnv = "PAY_TOKEN"
	return sc
}

// loadPay loads the refund server at url, sent bearer, and closes it at
// the test's end.
func loadPay(t *testing.T, url string) mcp.Discovered {
	t.Helper()
	d, err := mcp.Load(context.Background(), mcp.Config{Servers: []mcp.ServerConfig{payServer(url)}}, withToken)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func TestACallRedirectedElsewhereSendsNothingThereAndIsClassifiedByTheRedirect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		status     int
		sameOrigin bool
		notApplied bool // else the outcome is unknown
	}{
		// The server asks for the same request elsewhere: it did not act.
		{name: "307 to another origin", status: http.StatusTemporaryRedirect, notApplied: true},
		{name: "308 to another origin", status: http.StatusPermanentRedirect, notApplied: true},
		// A server may answer these after it acted on the POST.
		{name: "302 to another origin", status: http.StatusFound},
		{name: "303 to the same origin, which would make the call a GET", status: http.StatusSeeOther, sameOrigin: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			other, otherURL := startRecorder(t)
			s := startRedirecting(t, tc.status, false, func(own string) string {
				if tc.sameOrigin {
					return own + "/result?sig=s3cret"
				}
				return otherURL + "/mcp?sig=s3cret"
			})
			if tc.sameOrigin {
				other = s.Other
			}
			d := loadPay(t, s.URL)
			refund := toolOf(t, d, "pay_refund")
			call := callOf(t, refund.Name, 1, refundArgs)

			err := run(t, refund, call, nil)

			require.Error(t, err)
			assert.Empty(t, other.requests(), "neither the token, nor the key, nor the call went where the redirect pointed")
			assert.ErrorContains(t, err, "refused a redirect")
			assert.NotContains(t, err.Error(), "s3cret", "the target is named redacted")
			assert.Equal(t, tc.notApplied, permanent(err) && errors.Is(err, tools.ErrNotApplied), "permanent and not applied: %v", err)
			if !tc.notApplied {
				assert.ErrorContains(t, err, "outcome unknown")
				assert.NotErrorIs(t, err, tools.ErrNotApplied)
			}
			assert.Empty(t, s.Ledger.Under(call.Key.String()), "the server never ran the call")
		})
	}
}

func TestAHandshakeRedirectedToAnotherOriginIsRefusedNamingTheTarget(t *testing.T) {
	t.Parallel()
	other, otherURL := startRecorder(t)
	s := startRedirecting(t, http.StatusTemporaryRedirect, true, func(string) string { return otherURL + "/mcp" })

	_, err := mcp.Load(context.Background(), mcp.Config{Servers: []mcp.ServerConfig{payServer(s.URL)}}, withToken)

	require.Error(t, err)
	assert.ErrorContains(t, err, "connect to MCP server pay")
	assert.ErrorContains(t, err, "refused a redirect (HTTP 307) to "+otherURL+": it leads to another origin")
	assert.Empty(t, other.requests(), "the bearer token went nowhere but the configured origin")
}

func TestACallRedirectedWithinTheServerIsFollowedAndRunsOnce(t *testing.T) {
	t.Parallel()
	// A server mounted at /mcp/ that sends /mcp there, as some frameworks
	// do: the same request again, to the same origin.
	s := startRedirecting(t, http.StatusTemporaryRedirect, false, func(own string) string { return own + "/mcp/" })
	d := loadPay(t, s.URL)
	refund := toolOf(t, d, "pay_refund")
	call := callOf(t, refund.Name, 1, refundArgs)

	require.NoError(t, run(t, refund, call, nil))

	assert.Len(t, s.Ledger.Under(call.Key.String()), 1)
	assert.Equal(t, []seen{{Meta: call.Key.String(), Header: call.Key.String(), AllMeta: map[string]any{mcp.MetaIdempotencyKey: call.Key.String()}}}, s.Ledger.Seen(),
		"the key went with the request it followed")
}

func TestACallWhoseRedirectedRequestTimesOutLeavesTheOutcomeUnknown(t *testing.T) {
	t.Parallel()
	s := startRedirecting(t, http.StatusTemporaryRedirect, false, func(own string) string { return own + "/mcp/" })
	d := loadPay(t, s.URL)
	slow := toolOf(t, d, "pay_slow")
	// Before the sessions close, which waits for the server's calls.
	defer s.releaseSlow()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()

	_, err := slow.Run(ctx, callOf(t, slow.Name, 1, refundArgs))

	require.Error(t, err)
	assert.NotErrorIs(t, err, tools.ErrNotApplied, "the 307 said nothing of the request that followed it, which the server got")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}
