package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/worker"
	"github.com/oncerun/oncerun/workflows"
)

// refundArgs are the arguments of the refund a seeded resolution waits on.
const refundArgs = `{"payment_id":"pay_1001","amount_cents":25900,"currency":"EUR"}`

// unknownKnown is what a seeded resolution says oncerun knows.
const unknownKnown = "the provider did not answer within 30s after the request was sent; the paired read failed: HTTP 503"

// seedResolution writes the row a run writes when the outcome of its step
// is unknown: round round of step step, pending, asked for a minute ago.
func (e *env) seedResolution(tenant, runID string, step int64, round int) keys.Key {
	e.t.Helper()
	key, err := keys.New(tenant, runID, step, "refund_payment")
	require.NoError(e.t, err)
	hash, err := keys.ArgsHash([]byte(refundArgs))
	require.NoError(e.t, err)
	_, err = e.pool.Exec(context.Background(), `
INSERT INTO resolutions (tenant, run_id, step, round, tool, key, args, args_hash, goal, first_sent_at, known, requested_at, deadline)
VALUES ($1, $2, $3, $4, 'refund_payment', $5, $6, $7, 'refund order 1001', now() - interval '10 minutes', $8,
        now() - interval '1 minute', now() + interval '1 hour')`,
		tenant, runID, step, round, key.String(), refundArgs, hash, unknownKnown)
	require.NoError(e.t, err)
	return key
}

// resolvePath is the resolve endpoint of a step.
func resolvePath(runID string, step int64) string { return stepPath(runID, step, "resolve") }

// TestResolveAPI: a step whose outcome is unknown is listed under
// needs_resolution for its tenant only, and answered through the API with
// the guarantees of decisions: roles, strict values, an audit row for every
// request on the step, one answer of record. The run is not open, so an
// accepted answer cannot be delivered.
func TestResolveAPI(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.serveApprovals(nil)
	ctx := context.Background()
	run := e.id("unknown")
	key := e.seedResolution("acme", run, 2, 1)
	// An approval whose deadline passed long ago, asked for before: listed
	// first.
	_, err := e.pool.Exec(ctx, `
INSERT INTO approvals (tenant, run_id, step, tool, args, args_hash, reason, requested_at, deadline, requested_by)
VALUES ('acme', $1, 1, 'issue_credit', '{"order_id":"1001"}', repeat('a', 64), 'amount', now() - interval '2 days',
        now() - interval '1 day', 'ops')`, e.id("expired"))
	require.NoError(t, err)

	var list approvals.ApprovalList
	r := a.do(http.MethodGet, "/v1/approvals?state=needs_resolution", "vic", nil)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	r.json(t, &list)
	require.Len(t, list.Approvals, 2)
	assert.Equal(t, approvals.KindApproval, list.Approvals[0].Kind, "the older approval first")
	it := list.Approvals[1]
	assert.Equal(t, approvals.KindOutcomeUnknown, it.Kind)
	assert.Equal(t, run, it.RunID)
	assert.EqualValues(t, 2, it.Step)
	assert.Equal(t, "refund_payment", it.Tool)
	assert.JSONEq(t, refundArgs, string(it.Args))
	assert.Equal(t, "refund order 1001", it.Goal)
	require.NotNil(t, it.Resolution)
	assert.Equal(t, 1, it.Resolution.Round)
	assert.Equal(t, key.String(), it.Resolution.Key)
	assert.Equal(t, unknownKnown, it.Resolution.Known)
	assert.WithinDuration(t, time.Now().Add(-10*time.Minute), it.Resolution.FirstSentAt, time.Minute)
	assert.WithinDuration(t, time.Now().Add(time.Hour), it.Resolution.Deadline, time.Minute)
	assert.Nil(t, it.Resolution.Decision)
	for _, part := range []string{"refund_payment", `"payment_id":"pay_1001"`, key.String(), "nobody could tell whether it was applied", unknownKnown} {
		assert.Contains(t, it.Problem, part)
	}
	a.do(http.MethodGet, "/v1/approvals?state=needs_resolution&limit=1", "vic", nil).json(t, &list)
	require.Len(t, list.Approvals, 1, "the limit holds over both kinds")
	assert.Equal(t, approvals.KindApproval, list.Approvals[0].Kind)
	a.do(http.MethodGet, "/v1/approvals?state=needs_resolution", "gus", nil).json(t, &list)
	assert.Empty(t, list.Approvals, "another tenant sees nothing")

	applied := approvals.ResolveRequest{Outcome: "applied", Result: json.RawMessage(`{"refund_id": "re_1", "amount_cents": 25900}`), Note: "in the provider's dashboard"}
	for _, tc := range []struct {
		name   string
		who    string
		path   string
		body   any
		status int
		code   string
		parts  []string
	}{
		{"viewer", "vic", resolvePath(run, 2), applied, 403, "forbidden", []string{"vic is a viewer"}},
		{"another tenant", "gus", resolvePath(run, 2), applied, 404, "not_found", []string{"no step 2"}},
		{"a step with no resolution", "dana", resolvePath(run, 3), applied, 404, "not_found", []string{"no step 3"}},
		{"no such run", "dana", resolvePath("nope", 2), applied, 404, "not_found", []string{`"nope"`}},
		{"a round the step does not have", "dana", resolvePath(run, 2), approvals.ResolveRequest{Outcome: "applied", Round: 7}, 404, "not_found", []string{"no round 7"}},
		{"bad outcome", "dana", resolvePath(run, 2), map[string]any{"outcome": "maybe"}, 400, "invalid_request", []string{`outcome "maybe" is not applied or not_applied`}},
		{"no outcome", "dana", resolvePath(run, 2), map[string]any{"note": "hm"}, 400, "invalid_request", []string{"outcome"}},
		{"result with not_applied", "dana", resolvePath(run, 2), map[string]any{"outcome": "not_applied", "result": map[string]any{"x": 1}}, 400, "invalid_request", []string{"result is given only with outcome applied"}},
		{"result not JSON", "dana", resolvePath(run, 2), `{"outcome": "applied", "result": {refund}}`, 400, "invalid_request", []string{"not valid"}},
		{"NUL in the result", "dana", resolvePath(run, 2), `{"outcome": "applied", "result": {"id": "re\u0000"}}`, 400, "invalid_request", []string{"result holds a NUL character"}},
		{"control character in the note", "dana", resolvePath(run, 2), map[string]any{"outcome": "applied", "note": "ok\u001b[2J"}, 400, "invalid_request", []string{"note holds the control character U+001B"}},
		{"unknown field", "dana", resolvePath(run, 2), map[string]any{"outcome": "applied", "resolver": "root"}, 400, "invalid_request", []string{`unknown field "resolver"`}},
		{"negative round", "dana", resolvePath(run, 2), map[string]any{"outcome": "applied", "round": -1}, 400, "invalid_request", []string{"round -1"}},
		{"step zero", "dana", resolvePath(run, 0), applied, 400, "invalid_request", []string{`step "0"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a.expectError(a.do(http.MethodPost, tc.path, tc.who, tc.body), tc.status, tc.code, tc.parts...)
		})
	}
	audited := func(where string, args ...any) int {
		return e.count("resolution_decisions", "tenant = 'acme' AND run_id = '"+run+"' AND "+where, args...)
	}
	assert.Equal(t, 1, audited("outcome = 'forbidden' AND resolver = 'vic' AND role = 'viewer' AND round = 1 AND decision = 'applied'"))
	assert.Equal(t, 8, audited("outcome = 'invalid' AND resolver = 'dana' AND via = 'api'"))
	assert.Equal(t, 2, audited("outcome = 'invalid' AND decision = ''"), "an outcome that is none is recorded as ''")
	assert.Equal(t, 1, audited("outcome = 'not_pending' AND round = 7"))
	assert.Equal(t, 0, e.count("resolution_decisions", "resolver = 'gus' OR step <> 2 OR run_id <> $1", run),
		"requests naming no step of the tenant leave no row")
	assert.Equal(t, 0, audited("outcome = 'accepted'"))

	// Accepted and recorded, but the run is not open to apply it.
	r = a.do(http.MethodPost, resolvePath(run, 2), "dana", applied)
	a.expectError(r, http.StatusConflict, "run_closed", "recorded", "no longer open")
	var (
		round              int
		decision, resolver string
		role, via, note    string
		result             []byte
	)
	require.NoError(t, e.pool.QueryRow(ctx, `
SELECT round, decision, result, resolver, role, via, note FROM resolution_decisions
WHERE tenant = 'acme' AND run_id = $1 AND step = 2 AND outcome = 'accepted'`, run).
		Scan(&round, &decision, &result, &resolver, &role, &via, &note))
	assert.Equal(t, []string{"applied", "dana", "approver", "api", "in the provider's dashboard"}, []string{decision, resolver, role, via, note})
	assert.Equal(t, 1, round)
	assert.JSONEq(t, `{"refund_id":"re_1","amount_cents":25900}`, string(result))

	// Listed with the answer of record, which the run has not applied.
	a.do(http.MethodGet, "/v1/approvals?state=needs_resolution", "dana", nil).json(t, &list)
	require.Len(t, list.Approvals, 2)
	require.NotNil(t, list.Approvals[1].Resolution.Decision)
	assert.Equal(t, "dana", list.Approvals[1].Resolution.Decision.Resolver)
	assert.Equal(t, workflows.OutcomeApplied, list.Approvals[1].Resolution.Decision.Outcome)
	assert.Contains(t, list.Approvals[1].Problem, "dana answered applied")

	// Another answer: refused, whoever gives it.
	a.expectError(a.do(http.MethodPost, resolvePath(run, 2), "ops", approvals.ResolveRequest{Outcome: "not_applied"}),
		http.StatusConflict, "decision_conflict", "already answered applied by dana")
	a.expectError(a.do(http.MethodPost, resolvePath(run, 2), "ops", approvals.ResolveRequest{Outcome: "applied", Result: json.RawMessage(`{"refund_id":"re_2"}`)}),
		http.StatusConflict, "decision_conflict", "with another result")
	// The same answer while the round is pending is sent again; the run is
	// still not open.
	a.expectError(a.do(http.MethodPost, resolvePath(run, 2), "ops", approvals.ResolveRequest{Outcome: "applied",
		Result: json.RawMessage(`{"amount_cents":25900,"refund_id":"re_1"}`)}), http.StatusConflict, "run_closed")

	// Once the run has applied it, the same answer is 200 with the answer of
	// record, and the step leaves the list.
	_, err = e.pool.Exec(ctx, `UPDATE resolutions SET state = 'applied', resolved_by = 'dana', resolved_at = now(),
    result = '{"refund_id":"re_1","amount_cents":25900}' WHERE tenant = 'acme' AND run_id = $1 AND step = 2`, run)
	require.NoError(t, err)
	r = a.do(http.MethodPost, resolvePath(run, 2), "ops", approvals.ResolveRequest{Outcome: "applied", Result: json.RawMessage(`{"refund_id":"re_1","amount_cents":25900}`), Note: "me too"})
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var repeated approvals.ResolveResponse
	r.json(t, &repeated)
	assert.True(t, repeated.Repeated)
	assert.Equal(t, "dana", repeated.Resolution.Resolver)
	assert.Equal(t, "in the provider's dashboard", repeated.Resolution.Note)
	assert.Equal(t, "api", repeated.Resolution.Via)
	assert.Equal(t, 1, repeated.Resolution.Round)
	a.expectError(a.do(http.MethodPost, resolvePath(run, 2), "dana", approvals.ResolveRequest{Outcome: "not_applied"}),
		http.StatusConflict, "decision_conflict")
	a.do(http.MethodGet, "/v1/approvals?state=needs_resolution", "dana", nil).json(t, &list)
	require.Len(t, list.Approvals, 1)
	assert.Equal(t, approvals.KindApproval, list.Approvals[0].Kind)

	assert.Equal(t, 1, audited("outcome = 'accepted'"))
	assert.Equal(t, 2, audited("outcome = 'repeated' AND resolver = 'ops'"))
	assert.Equal(t, 3, audited("outcome = 'conflict'"))

	// A round the run recorded with no answer of record (answered by a
	// release before every answer was recorded) is not pending: nothing
	// adopts the run's record.
	other := e.id("around")
	e.seedResolution("acme", other, 4, 1)
	_, err = e.pool.Exec(ctx, `UPDATE resolutions SET state = 'not_applied', resolved_by = 'sre', resolved_at = now()
WHERE tenant = 'acme' AND run_id = $1`, other)
	require.NoError(t, err)
	a.expectError(a.do(http.MethodPost, resolvePath(other, 4), "dana", approvals.ResolveRequest{Outcome: "applied"}),
		http.StatusNotFound, "not_found", "not pending", "recorded it as not_applied")
	assert.Equal(t, 1, e.count("resolution_decisions", "run_id = $1 AND outcome = 'not_pending'", other))
}

// TestResolveSignalsAnOpenRun: an answer to an open run is delivered (202),
// and a repeat while the round is pending is delivered again (200). The
// step here waits for approval, not for resolution: the run ignores the
// answer and goes on when approved.
func TestResolveSignalsAnOpenRun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", sdkworker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("open")
	step := a.startPending("ops", run)
	e.seedResolution("acme", run, 2, 1)

	r := a.do(http.MethodPost, resolvePath(run, 2), "dana", approvals.ResolveRequest{Outcome: "not_applied", Note: "no refund at the provider"})
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
	var res approvals.ResolveResponse
	r.json(t, &res)
	assert.False(t, res.Repeated)
	assert.Equal(t, approvals.ResolutionRecord{RunID: run, Step: 2, Round: 1, Outcome: workflows.OutcomeNotApplied, Resolver: "dana",
		Role: approvals.RoleApprover, Note: "no refund at the provider", DecidedAt: res.Resolution.DecidedAt, Via: "api"}, res.Resolution)
	assert.WithinDuration(t, time.Now(), res.Resolution.DecidedAt, time.Minute)

	r = a.do(http.MethodPost, resolvePath(run, 2), "ops", approvals.ResolveRequest{Outcome: "not_applied"})
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var again approvals.ResolveResponse
	r.json(t, &again)
	assert.True(t, again.Repeated)
	assert.Equal(t, "dana", again.Resolution.Resolver)

	// Through the Go client too.
	c := &approvals.Client{BaseURL: a.srv.URL, Token: a.tokens["dana"]}
	viaClient, err := c.Resolve(context.Background(), run, 2, approvals.ResolveRequest{Outcome: "not_applied"})
	require.NoError(t, err)
	assert.True(t, viaClient.Repeated)
	_, err = c.Resolve(context.Background(), run, 2, approvals.ResolveRequest{Outcome: "applied"})
	var apiErr *approvals.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, "decision_conflict", apiErr.Code)

	st := e.status("acme", run)
	assert.Equal(t, workflows.StepPendingApproval, st.Steps[1].State, "the run ignored an answer for a step not in needs_resolution")
	r = a.do(http.MethodPost, stepPath(run, 2, "approve"), "dana", approvals.DecideRequest{ArgsHash: step.ArgsHash})
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
	final := e.result("acme", run)
	assert.Equal(t, workflows.RunCompleted, final.State)
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND order_id = '1001'"))
}

// TestResolveInInbox: the inbox shows a step whose outcome is unknown with
// what was sent, when, and what is known, and gives approvers a form with
// the decision form's protections; viewers get none.
func TestResolveInInbox(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.serveApprovals(nil)
	run := e.id("inbox")
	key := e.seedResolution("acme", run, 2, 1)
	path := "/runs/" + run + "/steps/2/resolve"

	b := a.browser()
	page, csrf := b.signIn("dana")
	assert.Contains(t, page, "Needs resolution (1)")
	assert.Contains(t, page, "Outcome unknown: refund_payment — step 2 of run")
	for _, part := range []string{"pay_1001", "25900", key.String(), "259.00 EUR was sent", "alert after", "What we know", `action="` + path + `"`,
		`name="outcome" value="applied"`, `name="outcome" value="not_applied"`, `name="result"`, `name="round" value="1"`} {
		assert.Contains(t, page, part)
	}
	assert.Contains(t, page, "the provider did not answer within 30s")

	vb := a.browser()
	vpage, vcsrf := vb.signIn("vic")
	assert.Contains(t, vpage, "Outcome unknown: refund_payment")
	assert.Contains(t, vpage, "may read but not resolve")
	assert.NotContains(t, vpage, `name="outcome"`)
	status, _, _ := vb.send(http.MethodPost, path, url.Values{"csrf": {vcsrf}, "outcome": {"applied"}, "round": {"1"}})
	assert.Equal(t, http.StatusForbidden, status)
	assert.Equal(t, 1, e.count("resolution_decisions", "outcome = 'forbidden' AND via = 'inbox' AND resolver = 'vic'"))

	form := url.Values{"csrf": {csrf}, "outcome": {"applied"}, "round": {"1"}, "result": {`{"refund_id":"re_1"}`}, "note": {"checked"}}
	for _, bad := range []string{"", "forged"} {
		f := url.Values{}
		for k, v := range form {
			f[k] = v
		}
		f.Set("csrf", bad)
		status, _, page := b.send(http.MethodPost, path, f)
		assert.Equal(t, http.StatusForbidden, status)
		assert.Contains(t, page, "not sent from this inbox")
	}
	status, _, _ = b.send(http.MethodPost, path, form, "Sec-Fetch-Site", "cross-site")
	assert.Equal(t, http.StatusForbidden, status, "a cross-site form post")
	assert.Equal(t, 1, e.count("resolution_decisions", "true"), "forged forms leave no row")

	bad := url.Values{"csrf": {csrf}, "outcome": {"not_applied"}, "round": {"1"}, "result": {`{"refund_id":"re_1"}`}}
	status, _, page = b.send(http.MethodPost, path, bad)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, page, "result is given only with outcome applied")
	assert.Contains(t, page, "Outcome unknown: refund_payment", "the inbox is shown again with the step")

	// The right form: recorded via the inbox; this run is not open.
	status, _, page = b.send(http.MethodPost, path, form)
	assert.Equal(t, http.StatusConflict, status)
	assert.Contains(t, page, "no longer open")
	assert.Equal(t, 1, e.count("resolution_decisions", "outcome = 'accepted' AND via = 'inbox' AND resolver = 'dana' AND note = 'checked'"))
	page, _ = b.signIn("dana")
	assert.Contains(t, page, ">Send the answer again</button>", "an answer not applied can be sent again")
	assert.Contains(t, page, "dana answered applied")
}

// TestResolveAnswersWhenTheDatabaseStalls: with PostgreSQL silent, a resolve
// request is answered 503 with Retry-After within the database deadline.
func TestResolveAnswersWhenTheDatabaseStalls(t *testing.T) {
	t.Parallel()
	e := setup(t)
	run := e.id("stall")
	e.seedResolution("acme", run, 2, 1)
	dbURL, err := url.Parse(e.pool.Config().ConnString())
	require.NoError(t, err)
	proxy := newStallProxy(t, dbURL.Host)
	dbURL.Host = proxy.ln.Addr().String()
	pool, err := worker.NewPool(context.Background(), dbURL.String())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := e.serveApprovals(func(c *approvals.Config) {
		c.Pool = pool
		c.Runs = &runs.Client{Temporal: e.tc, TaskQueue: e.queue, Pool: pool}
		c.DBTimeout = time.Second
	})
	first := s.do(http.MethodGet, "/v1/approvals?state=needs_resolution", "dana", nil)
	require.Equal(t, http.StatusOK, first.status, "through the proxy; body: %s", first.body)

	proxy.stall()
	start := time.Now()
	r := s.do(http.MethodPost, resolvePath(run, 2), "dana", approvals.ResolveRequest{Outcome: "applied"})
	s.expectError(r, http.StatusServiceUnavailable, "unavailable", "did not answer within 1s")
	assert.Equal(t, "2", r.header.Get("Retry-After"))
	assert.Less(t, time.Since(start), 15*time.Second)
	proxy.resume()
	assert.Zero(t, e.count("resolution_decisions", "outcome = 'accepted'"))
}

// TestResolveCLI: `oncerun approvals --state needs_resolution` prints the
// steps whose outcome is unknown, and `oncerun resolve` answers them through
// the API or, without it, after asking the run, with an audit row via cli.
func TestResolveCLI(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", sdkworker.Options{})
	a := e.serveApprovals(nil)
	closed := e.id("cli-closed")
	e.seedResolution("acme", closed, 2, 1)

	out, err := a.oncerunVia("vic", "approvals", "--state", "needs_resolution", "--wide")
	require.NoError(t, err, out)
	assert.Regexp(t, `(?m)^RUN\s+STEP\s+TOOL\s+KIND\s.*\sPROBLEM$`, out)
	assert.Regexp(t, `(?m)^`+closed+`\s+2\s+refund_payment\s+outcome_unknown\s.*\spending\s.*\srefund_payment .*nobody could tell`, out)

	out, err = a.oncerunVia("dana", "resolve", "--run-id", closed, "--step", "2", "--outcome", "applied", "--result", `{"refund_id":"re_1"}`)
	require.ErrorContains(t, err, "HTTP 409", out)
	assert.Contains(t, out, "no longer open")
	assert.Equal(t, 1, e.count("resolution_decisions", "run_id = $1 AND outcome = 'accepted' AND via = 'api' AND resolver = 'dana'", closed))

	// Without the API: the run is asked first. A step that does not need
	// resolution is refused without a row, and nothing is sent.
	open := e.id("cli-open")
	a.startPending("ops", open)
	e.seedResolution("acme", open, 2, 1)
	out, err = e.oncerun("resolve", "--tenant", "acme", "--run-id", open, "--step", "2", "--outcome", "not_applied")
	require.Error(t, err, out)
	assert.Contains(t, err.Error(), "is pending_approval, not needs_resolution")
	out, err = e.oncerun("resolve", "--tenant", "acme", "--run-id", closed, "--step", "2", "--outcome", "not_applied")
	require.Error(t, err, out)
	assert.Contains(t, err.Error(), "not found")
	assert.Equal(t, 0, e.count("resolution_decisions", "via = 'cli'"))

	// What the CLI then does (TestUnknownRefundWaitsForAPersonsResolve
	// drives it on a run that needs resolution): the one path every answer
	// takes, with the database's credentials, an audit row via cli, and the
	// signal.
	direct := func(outcome string) (approvalstore.Resolved, error) {
		return e.runs.Resolve(context.Background(), e.pool, approvalstore.ResolveRequest{StepRequest: approvalstore.Local("acme", open, 2, "sre"), Outcome: outcome, Note: "not in the provider's ledger"})
	}
	res, err := direct("not_applied")
	require.NoError(t, err)
	assert.False(t, res.Repeated)
	assert.Equal(t, "cli", res.Decision.Via)
	assert.Equal(t, "local", res.Decision.Role)
	assert.Equal(t, 1, e.count("resolution_decisions",
		"run_id = $1 AND outcome = 'accepted' AND via = 'cli' AND role = 'local' AND resolver = 'sre' AND remote_addr = 'local'", open))
	_, err = direct("applied")
	require.ErrorContains(t, err, "already answered not_applied by sre")
	r := a.do(http.MethodPost, resolvePath(open, 2), "dana", approvals.ResolveRequest{Outcome: "not_applied"})
	require.Equal(t, http.StatusOK, r.status, "the CLI's answer is the answer of record; body: %s", r.body)
}
