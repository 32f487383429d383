package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/approvals/inbox"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/worker"
	"github.com/oncerun/oncerun/workflows"
)

// The identities of an approvals test: an operator, an approver and a viewer
// of tenant acme, and an approver and an operator of tenant globex.
var testIdentities = []approvals.Identity{
	{Name: "ops", Tenant: "acme", Role: approvals.RoleOperator},
	{Name: "dana", Tenant: "acme", Role: approvals.RoleApprover},
	{Name: "vic", Tenant: "acme", Role: approvals.RoleViewer},
	{Name: "gus", Tenant: "globex", Role: approvals.RoleApprover},
	{Name: "gops", Tenant: "globex", Role: approvals.RoleOperator},
}

// approvalsEnv is a test's approvals service, served over real HTTP.
type approvalsEnv struct {
	*env
	srv    *httptest.Server
	tokens map[string]string
}

// serveApprovals serves the approvals service for the test's world; adjust
// changes its config before it starts. Every service of a test knows the
// same tokens.
func (e *env) serveApprovals(adjust func(*approvals.Config)) *approvalsEnv {
	e.t.Helper()
	if e.apTokens == nil {
		e.apTokenOf = map[string]string{}
		var entries []approvals.TokenEntry
		for _, id := range testIdentities {
			tok, entry, err := approvals.NewToken(id)
			require.NoError(e.t, err)
			e.apTokenOf[id.Name] = tok
			entries = append(entries, entry)
		}
		raw, err := json.Marshal(entries)
		require.NoError(e.t, err)
		e.apTokens, err = approvals.ParseTokens(raw)
		require.NoError(e.t, err)
	}
	a := &approvalsEnv{env: e, tokens: e.apTokenOf}
	tokens := e.apTokens
	reg, err := worker.Registry(worker.Config{})
	require.NoError(e.t, err)
	cfg := approvals.Config{
		Runs: &runs.Client{Temporal: e.tc, TaskQueue: e.queue, Pool: e.pool}, Pool: e.pool,
		Tokens: tokens, Tools: reg, Log: e.logger("approvals"),
	}
	if adjust != nil {
		adjust(&cfg)
	}
	srv, err := approvals.New(cfg)
	require.NoError(e.t, err)
	e.t.Cleanup(srv.Close)
	ib, err := inbox.New(inbox.Config{API: srv, Log: e.logger("inbox")})
	require.NoError(e.t, err)
	a.srv = httptest.NewServer(ib.Handler())
	e.t.Cleanup(a.srv.Close)
	return a
}

// response is an HTTP response with its body read.
type response struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the body into v.
func (r response) json(t testing.TB, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.body, v), "body: %s", r.body)
}

// do sends a request as the named identity ("" sends no token); body is
// JSON-encoded unless it is a string.
func (a *approvalsEnv) do(method, path, who string, body any, headers ...string) response {
	a.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(a.t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, a.srv.URL+path, rd)
	require.NoError(a.t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if who != "" {
		tok, ok := a.tokens[who]
		if !ok {
			tok = who // a raw token
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := a.srv.Client().Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(a.t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}

// expectError asserts an error response: its status, its JSON code, and
// that its message contains each of parts.
func (a *approvalsEnv) expectError(r response, status int, code string, parts ...string) {
	a.t.Helper()
	require.Equal(a.t, status, r.status, "body: %s", r.body)
	assert.Equal(a.t, "application/json; charset=utf-8", r.header.Get("Content-Type"))
	var eb approvals.ErrorBody
	r.json(a.t, &eb)
	assert.Equal(a.t, code, eb.Error.Code, "message: %s", eb.Error.Message)
	for _, p := range parts {
		assert.Contains(a.t, eb.Error.Message, p)
	}
}

// creditPlan looks order 1001 up and then credits it above the approval
// threshold: step 2 waits for approval.
func creditPlan() []map[string]any {
	return []map[string]any{
		{"tool": "lookup_order", "args": map[string]any{"order_id": "1001"}},
		{"tool": "issue_credit", "args": map[string]any{"order_id": "1001", "reason": "damaged_in_transit", "amount_cents": 25900, "currency": "EUR"}},
	}
}

// startPending starts a credit run as who through the API and waits until
// its step 2 waits for approval; it returns the step.
func (a *approvalsEnv) startPending(who, runID string) workflows.Step {
	a.t.Helper()
	r := a.do(http.MethodPost, "/v1/runs", who, map[string]any{"run_id": runID, "goal": "refund order 1001", "plan": creditPlan()})
	require.Equal(a.t, http.StatusCreated, r.status, "body: %s", r.body)
	tenant := "acme"
	for _, id := range testIdentities {
		if id.Name == who {
			tenant = id.Tenant
		}
	}
	st := a.waitFor(tenant, runID, "step 2's approval", func(s workflows.Status) bool {
		return s.State == workflows.RunWaitingForApproval
	})
	return st.Steps[1]
}

func stepPath(runID string, step int64, verb string) string {
	return fmt.Sprintf("/v1/runs/%s/steps/%d/%s", runID, step, verb)
}
