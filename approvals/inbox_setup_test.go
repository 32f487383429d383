package approvals

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// fakeTemporal stands in for Temporal in the inbox's handler tests: it
// answers the status query with the statuses it was given and records
// the signals sent. The approvals tables are real (pgtest); the
// integration tests run the inbox against a real Temporal server.
type fakeTemporal struct {
	client.Client
	mu       sync.Mutex
	statuses map[string]workflows.Status
	signals  []workflows.Approval
	// closed lists the runs that have ended: they answer queries, and
	// take no update (see control_setup_test.go).
	closed map[string]bool
	// updates are the updates sent, by name.
	updates []string
	// down makes every call fail as with Temporal out of reach.
	down bool
	// queries are the visibility queries ListWorkflow was sent.
	queries []string
}

func (f *fakeTemporal) QueryWorkflow(_ context.Context, workflowID, _, _ string, _ ...any) (converter.EncodedValue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errTemporalDown
	}
	st, ok := f.statuses[workflowID]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	return statusValue{st}, nil
}

func (f *fakeTemporal) SignalWorkflow(_ context.Context, workflowID, _, name string, arg any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.statuses[workflowID]; !ok {
		return serviceerror.NewNotFound("workflow not found")
	}
	if ap, ok := arg.(workflows.Approval); ok && name == workflows.SignalApproval {
		f.signals = append(f.signals, ap)
	}
	return nil
}

func (f *fakeTemporal) setStatus(st workflows.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses[workflows.WorkflowID(st.Tenant, st.RunID)] = st
}

func (f *fakeTemporal) approvals() []workflows.Approval {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]workflows.Approval(nil), f.signals...)
}

// statusValue is a status query's answer.
type statusValue struct{ st workflows.Status }

func (v statusValue) HasValue() bool { return true }

func (v statusValue) Get(ptr any) error {
	raw, err := json.Marshal(v.st)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, ptr)
}

// tuneWidget is a tool with an argument of each JSON type, whose edits
// are free, for the edit form's encoding.
var tuneWidget = tools.Tool{
	Name: "tune_widget",
	Schema: json.RawMessage(`{"type":"object","properties":{
		"name":{"type":"string"},"count":{"type":"integer","maximum":10},"ratio":{"type":"number"},
		"enabled":{"type":"boolean"},"labels":{"type":"object"},"note":{"type":["string","null"]}},
		"required":["name","count"],"additionalProperties":false}`),
	Class:    tools.ClassKeyed,
	Approval: tools.Always(),
	Run:      func(context.Context, tools.Call) (any, error) { return nil, nil },
}

// lockedTool is a tool whose calls may not be edited.
var lockedTool = tools.Tool{
	Name:     "restart_cluster",
	Schema:   json.RawMessage(`{"type":"object","properties":{"zone":{"type":"string"}},"required":["zone"]}`),
	Class:    tools.ClassKeyed,
	Approval: tools.Always(),
	Edits:    tools.EditForbidden,
	Run:      func(context.Context, tools.Call) (any, error) { return nil, nil },
}

// inboxEnv is an inbox served over HTTP for one test, on a database of
// its own, with the shop's tools and the two above.
type inboxEnv struct {
	t        *testing.T
	pool     *pgxpool.Pool
	reg      *tools.Registry
	temporal *fakeTemporal
	srv      *httptest.Server
	now      time.Time
	// skew moves the server's clock on from now (see advance).
	skew   atomic.Int64
	tokens map[string]string
}

// advance moves the server's clock on by d.
func (e *inboxEnv) advance(d time.Duration) { e.skew.Add(int64(d)) }

// setupInbox serves the inbox; adjust, when given, changes its Config
// first.
func setupInbox(t *testing.T, adjust ...func(*Config)) *inboxEnv {
	t.Helper()
	pool := pgtest.NewPool(t, 4)
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, append(shop.Tools(shop.Config{}), tuneWidget, lockedTool)...)
	require.NoError(t, err)
	e := &inboxEnv{t: t, pool: pool, reg: reg, temporal: &fakeTemporal{statuses: map[string]workflows.Status{}, closed: map[string]bool{}},
		now: time.Now().UTC().Truncate(time.Second), tokens: map[string]string{}}
	var entries []TokenEntry
	for _, id := range []Identity{{Name: "dana", Tenant: "acme", Role: RoleApprover}, {Name: "vic", Tenant: "acme", Role: RoleViewer},
		{Name: "ops", Tenant: "acme", Role: RoleOperator}, {Name: "omar", Tenant: "globex", Role: RoleOperator}} {
		tok, entry, err := NewToken(id)
		require.NoError(t, err)
		e.tokens[id.Name] = tok
		entries = append(entries, entry)
	}
	raw, err := json.Marshal(entries)
	require.NoError(t, err)
	toks, err := ParseTokens(raw)
	require.NoError(t, err)
	cfg := Config{Runs: &runs.Client{Temporal: e.temporal, Pool: pool}, Pool: pool, Tokens: toks, Tools: reg,
		Now: func() time.Time { return e.now.Add(time.Duration(e.skew.Load())) }}
	for _, f := range adjust {
		f(&cfg)
	}
	s, err := New(cfg)
	require.NoError(t, err)
	e.srv = httptest.NewServer(s.Handler())
	t.Cleanup(e.srv.Close)
	return e
}

// pending records a step of run runID of tenant acme that waits for
// approval, with the deadline left from now, and a status of its run
// whose earlier steps are prior. It returns the step's args hash.
func (e *inboxEnv) pending(runID string, step int64, tool, args string, left time.Duration, onExpiry string, prior ...workflows.Step) string {
	e.t.Helper()
	p, err := e.reg.Prepare(tools.ProposedCall{Tool: tool, Args: json.RawMessage(args)})
	require.NoError(e.t, err)
	require.NoError(e.t, approvalstore.RecordPending(context.Background(), e.pool, approvalstore.Approval{
		Tenant: "acme", RunID: runID, Step: step, Tool: tool, Args: p.Args, ArgsHash: p.ArgsHash, Goal: "refund order 1001",
		Reason: "amount_cents above 10000", RequestedBy: "ops", RequestedAt: e.now.Add(-time.Hour), Deadline: e.now.Add(left),
		OnExpiry: onExpiry,
	}))
	steps := append(prior, workflows.Step{Step: step, Tool: tool, Args: p.Args, ArgsHash: p.ArgsHash,
		State: workflows.StepPendingApproval, PlannedAt: e.now.Add(-time.Hour),
		Approval: &workflows.StepApproval{Reason: "amount_cents above 10000", RequestedAt: e.now.Add(-time.Hour), Deadline: e.now.Add(left),
			OnExpiry: onExpiry}})
	e.temporal.setStatus(workflows.Status{Tenant: "acme", RunID: runID, Planner: "script", State: workflows.RunWaitingForApproval,
		Steps: steps, StartedAt: e.now.Add(-time.Hour), UpdatedAt: e.now.Add(-time.Hour)})
	return p.ArgsHash
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
	e.t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(e.t, err)
	b := &browser{e: e, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
	status, _, _ := b.post("/login", url.Values{"token": {e.tokens[who]}})
	require.Equal(e.t, http.StatusSeeOther, status)
	status, page := b.get("/")
	require.Equal(e.t, http.StatusOK, status, page)
	m := csrfInput.FindStringSubmatch(page)
	require.NotNil(e.t, m, "the inbox carries a CSRF token")
	b.csrf = m[1]
	return b
}

func (b *browser) get(path string) (int, string) {
	b.e.t.Helper()
	resp, err := b.http.Get(b.e.srv.URL + path)
	require.NoError(b.e.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(b.e.t, err)
	return resp.StatusCode, string(body)
}

func (b *browser) post(path string, form url.Values) (int, http.Header, string) {
	b.e.t.Helper()
	resp, err := b.http.Post(b.e.srv.URL+path, "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
	require.NoError(b.e.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(b.e.t, err)
	return resp.StatusCode, resp.Header, string(body)
}

// unresolved records round 1 of a step of run runID of tenant acme whose
// outcome is unknown, as a run does.
func (e *inboxEnv) unresolved(runID string, step int64) {
	e.t.Helper()
	args := json.RawMessage(`{"payment_id":"pay_1001","amount_cents":25900,"currency":"EUR"}`)
	require.NoError(e.t, approvalstore.RecordUnresolved(context.Background(), e.pool, approvalstore.Resolution{
		Tenant: "acme", RunID: runID, Step: step, Round: 1, Tool: "refund_payment", Key: fmt.Sprintf("v1/acme/%s/%d/refund_payment", runID, step),
		Args: args, ArgsHash: strings.Repeat("c", 64), Goal: "refund order 1001", FirstSentAt: e.now.Add(-10 * time.Minute),
		Known: "the provider did not answer", RequestedAt: e.now.Add(-time.Minute), Deadline: e.now.Add(time.Hour),
	}))
}

// count counts the rows of approval_decisions that match where.
func (e *inboxEnv) count(where string, args ...any) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.pool.QueryRow(context.Background(), `SELECT count(*) FROM approval_decisions WHERE `+where, args...).Scan(&n))
	return n
}
