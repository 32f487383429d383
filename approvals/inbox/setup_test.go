package inbox

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstest"
	"github.com/oncerun/oncerun/internal/runs"
)

// inboxEnv is the inbox in front of the API, served over HTTP for one
// test, in a world of its own.
type inboxEnv struct {
	*approvalstest.World
	srv *httptest.Server
}

// setupInbox serves the inbox; adjust, when given, changes the API's
// Config first (the inbox's database budget is the API's).
func setupInbox(t *testing.T, adjust ...func(*approvals.Config)) *inboxEnv {
	t.Helper()
	e := &inboxEnv{World: approvalstest.New(t)}
	var entries []approvals.TokenEntry
	for _, id := range []approvals.Identity{{Name: "dana", Tenant: "acme", Role: approvals.RoleApprover},
		{Name: "vic", Tenant: "acme", Role: approvals.RoleViewer}, {Name: "ops", Tenant: "acme", Role: approvals.RoleOperator},
		{Name: "omar", Tenant: "globex", Role: approvals.RoleOperator}} {
		tok, entry, err := approvals.NewToken(id)
		require.NoError(t, err)
		e.Tokens[id.Name] = tok
		entries = append(entries, entry)
	}
	raw, err := json.Marshal(entries)
	require.NoError(t, err)
	toks, err := approvals.ParseTokens(raw)
	require.NoError(t, err)
	cfg := approvals.Config{Runs: &runs.Client{Temporal: e.Temporal, Pool: e.Pool}, Pool: e.Pool, Tokens: toks, Tools: e.Reg,
		Now: e.Clock}
	for _, f := range adjust {
		f(&cfg)
	}
	api, err := approvals.New(cfg)
	require.NoError(t, err)
	ib, err := New(Config{API: api})
	require.NoError(t, err)
	e.srv = httptest.NewServer(ib.Handler())
	t.Cleanup(e.srv.Close)
	e.URL = e.srv.URL
	return e
}

// browser is a signed-in client of the inbox that does not follow
// redirects.
type browser struct {
	e    *inboxEnv
	http *http.Client
	csrf string
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (e *inboxEnv) signIn(who string) *browser {
	e.T.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(e.T, err)
	b := &browser{e: e, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
	status, _, _ := b.post("/login", url.Values{"token": {e.Tokens[who]}})
	require.Equal(e.T, http.StatusSeeOther, status)
	status, page := b.get("/")
	require.Equal(e.T, http.StatusOK, status, page)
	m := csrfInput.FindStringSubmatch(page)
	require.NotNil(e.T, m, "the inbox carries a CSRF token")
	b.csrf = m[1]
	return b
}

func (b *browser) get(path string) (int, string) {
	b.e.T.Helper()
	resp, err := b.http.Get(b.e.srv.URL + path)
	require.NoError(b.e.T, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(b.e.T, err)
	return resp.StatusCode, string(body)
}

func (b *browser) post(path string, form url.Values) (int, http.Header, string) {
	b.e.T.Helper()
	resp, err := b.http.Post(b.e.srv.URL+path, "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
	require.NoError(b.e.T, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(b.e.T, err)
	return resp.StatusCode, resp.Header, string(body)
}
