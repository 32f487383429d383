package approvals

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/approvalstest"
	"github.com/oncerun/oncerun/internal/runs"
)

// apiEnv is the API served over HTTP for one test, in a world of its own.
type apiEnv struct {
	*approvalstest.World
	srv *httptest.Server
}

// testIdentities are the tokens' identities of every test, by name.
var testIdentities = []Identity{{Name: "dana", Tenant: "acme", Role: RoleApprover}, {Name: "vic", Tenant: "acme", Role: RoleViewer},
	{Name: "ops", Tenant: "acme", Role: RoleOperator}, {Name: "omar", Tenant: "globex", Role: RoleOperator}}

// testServer builds the service of world w, with a token for each of
// testIdentities; adjust, when given, changes its Config first.
func testServer(t testing.TB, w *approvalstest.World, adjust ...func(*Config)) *Server {
	t.Helper()
	var entries []TokenEntry
	for _, id := range testIdentities {
		tok, entry, err := NewToken(id)
		require.NoError(t, err)
		w.Tokens[id.Name] = tok
		entries = append(entries, entry)
	}
	raw, err := json.Marshal(entries)
	require.NoError(t, err)
	toks, err := ParseTokens(raw)
	require.NoError(t, err)
	cfg := Config{Runs: &runs.Client{Temporal: w.Temporal, Pool: w.Pool}, Pool: w.Pool, Tokens: toks, Tools: w.Reg, Now: w.Clock}
	for _, f := range adjust {
		f(&cfg)
	}
	s, err := New(cfg)
	require.NoError(t, err)
	return s
}

// setupAPI serves the API; adjust, when given, changes its Config first.
func setupAPI(t *testing.T, adjust ...func(*Config)) *apiEnv {
	t.Helper()
	e := &apiEnv{World: approvalstest.New(t)}
	e.srv = httptest.NewServer(testServer(t, e.World, adjust...).Handler())
	t.Cleanup(e.srv.Close)
	e.URL = e.srv.URL
	return e
}
