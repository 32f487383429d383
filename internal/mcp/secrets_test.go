package mcp_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/oncerun/oncerun/internal/mcp"
)

// The credentials in the URL of the guarded server.
const (
	urlPassword = "s3cret-pass"
	urlKey      = "s3cret-key"
)

// guarded is a test MCP server (honouring) that answers 401 to a request
// without the URL's credentials: u:s3cret-pass as Basic credentials and
// api_key=s3cret-key in the query. fail500 makes it answer 500 to
// tools/call.
type guarded struct {
	URL     string
	srv     *httptest.Server
	fail500 atomic.Bool
}

func startGuarded(t *testing.T) *guarded {
	t.Helper()
	g := &guarded{}
	srv := newServer(honouring, &ledger{release: make(chan struct{})}, false)
	h := mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return srv }, nil)
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := r.BasicAuth()
		if user != "u" || pass != urlPassword || r.URL.Query().Get("api_key") != urlKey {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if g.fail500.Load() && bytes.Contains(body, []byte(`"tools/call"`)) {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(g.srv.Close)
	u, err := url.Parse(g.srv.URL + "/mcp?api_key=" + urlKey)
	require.NoError(t, err)
	u.User = url.UserPassword("u", urlPassword)
	g.URL = u.String()
	return g
}

// secretsSetup loads the guarded server with a logger writing to the
// returned buffer.
func secretsSetup(t *testing.T, g *guarded, optional bool) (mcp.Discovered, *zaptest.Buffer, error) {
	t.Helper()
	logs := &zaptest.Buffer{}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), logs, zap.DebugLevel))
	sc := httpConfig("pay", g.URL, payTools(true))
	sc.Optional = optional
	d, err := mcp.Load(context.Background(), mcp.Config{Servers: []mcp.ServerConfig{sc}},
		mcp.Options{Log: log, ConnectTimeout: 5 * time.Second})
	if err == nil {
		t.Cleanup(func() { _ = d.Close() })
	}
	return d, logs, err
}

// assertNoSecret checks that text shows neither credential of the URL.
func assertNoSecret(t *testing.T, what, text string) {
	t.Helper()
	assert.NotContains(t, text, urlPassword, what)
	assert.NotContains(t, text, urlKey, what)
	assert.NotContains(t, text, "s3cret", what)
}

func TestAServerURLsCredentialsAreInNoErrorOrLogLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// fail makes the error to look at.
		fail func(t *testing.T, g *guarded) (*zaptest.Buffer, error)
		want string
	}{
		{name: "down at start", want: "connect to MCP server pay", fail: func(t *testing.T, g *guarded) (*zaptest.Buffer, error) {
			g.srv.Close()
			_, logs, err := secretsSetup(t, g, false)
			return logs, err
		}},
		{name: "optional and down at start", want: "connect to MCP server pay", fail: func(t *testing.T, g *guarded) (*zaptest.Buffer, error) {
			g.srv.Close()
			d, logs, err := secretsSetup(t, g, true)
			require.NoError(t, err)
			require.Len(t, d.Skipped, 1)
			return logs, d.Skipped[0].Err
		}},
		{name: "down at the call", want: "connection refused", fail: func(t *testing.T, g *guarded) (*zaptest.Buffer, error) {
			d, logs, err := secretsSetup(t, g, false)
			require.NoError(t, err)
			g.srv.Close()
			return logs, run(t, toolOf(t, d, "pay_refund"), callOf(t, "pay_refund", 1, refundArgs), nil)
		}},
		{name: "answers 500", want: "HTTP 500", fail: func(t *testing.T, g *guarded) (*zaptest.Buffer, error) {
			d, logs, err := secretsSetup(t, g, false)
			require.NoError(t, err)
			g.fail500.Store(true)
			return logs, run(t, toolOf(t, d, "pay_refund"), callOf(t, "pay_refund", 1, refundArgs), nil)
		}},
		{name: "answers a tool error", want: "answered an error", fail: func(t *testing.T, g *guarded) (*zaptest.Buffer, error) {
			d, logs, err := secretsSetup(t, g, false)
			require.NoError(t, err)
			return logs, run(t, toolOf(t, d, "pay_decline"), callOf(t, "pay_decline", 1, refundArgs), nil)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := startGuarded(t)

			logs, err := tc.fail(t, g)

			require.Error(t, err)
			assert.ErrorContains(t, err, tc.want)
			assert.ErrorContains(t, err, "xxxxx@127.0.0.1", "the server is named, its password hidden")
			assertNoSecret(t, "error", err.Error())
			assertNoSecret(t, "logs", logs.String())
		})
	}
}

func TestTheURLsCredentialsReachTheServer(t *testing.T) {
	t.Parallel()
	g := startGuarded(t)
	d, _, err := secretsSetup(t, g, false)
	require.NoError(t, err, "the server refuses a request without them")

	var got refundRecord
	require.NoError(t, run(t, toolOf(t, d, "pay_refund"), callOf(t, "pay_refund", 1, refundArgs), &got))

	assert.True(t, strings.HasPrefix(got.ID, "re_"))
}
