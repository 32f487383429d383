package integration

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/workflows"
)

func TestApprovalsAPIFullFlow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", worker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("refund")
	step := a.startPending("ops", run)

	r := a.do(http.MethodGet, "/v1/approvals?state=pending", "dana", nil)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var list approvals.ApprovalList
	r.json(t, &list)
	require.Len(t, list.Approvals, 1)
	it := list.Approvals[0]
	assert.Equal(t, run, it.RunID)
	assert.EqualValues(t, 2, it.Step)
	assert.Equal(t, "issue_credit", it.Tool)
	assert.JSONEq(t, `{"order_id":"1001","reason":"damaged_in_transit","amount_cents":25900,"currency":"EUR"}`, string(it.Args))
	assert.Equal(t, step.ArgsHash, it.ArgsHash)
	assert.Equal(t, "ops", it.RequestedBy, "who asked: the operator who started the run")
	assert.Equal(t, "refund order 1001", it.Goal)
	assert.WithinDuration(t, time.Now(), it.RequestedAt, time.Minute)
	assert.WithinDuration(t, it.RequestedAt.Add(workflows.DefaultApprovalDeadline), it.Deadline, time.Second)
	assert.Equal(t, "pending", it.State)

	r = a.do(http.MethodPost, stepPath(run, 2, "approve"), "dana", approvals.DecideRequest{ArgsHash: it.ArgsHash, Comment: "photos confirm it"})
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
	var accepted approvals.DecideResponse
	r.json(t, &accepted)
	assert.False(t, accepted.Repeated)
	assert.Equal(t, workflows.DecisionApprove, accepted.Decision.Decision)
	assert.Equal(t, "dana", accepted.Decision.Approver)
	assert.Equal(t, "api", accepted.Decision.Via)

	st := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
	assert.Equal(t, workflows.StepDone, st.Steps[1].State)
	require.NotNil(t, st.Steps[1].Approval)
	assert.Equal(t, "dana", st.Steps[1].Approval.Approver)
	assert.Equal(t, "photos confirm it", st.Steps[1].Approval.Comment)
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND order_id = '1001'"))

	// The audit row says who, when, what and from where.
	var approver, role, decision, remote, via, hash, comment string
	var at time.Time
	require.NoError(t, e.pool.QueryRow(context.Background(), `
SELECT approver, role, decision, remote_addr, via, args_hash, comment, decided_at FROM approval_decisions
WHERE tenant = 'acme' AND run_id = $1 AND step = 2 AND outcome = 'accepted'`, run).
		Scan(&approver, &role, &decision, &remote, &via, &hash, &comment, &at))
	assert.Equal(t, []string{"dana", "approver", "approve", "127.0.0.1", "api", it.ArgsHash, "photos confirm it"},
		[]string{approver, role, decision, remote, via, hash, comment})
	assert.WithinDuration(t, time.Now(), at, time.Minute)

	// Decided: gone from pending, listed as decided with the decision.
	r = a.do(http.MethodGet, "/v1/approvals", "dana", nil)
	r.json(t, &list)
	assert.Equal(t, "pending", list.State, "pending is the default view")
	assert.Empty(t, list.Approvals)
	r = a.do(http.MethodGet, "/v1/approvals?state=decided", "vic", nil)
	r.json(t, &list)
	require.Len(t, list.Approvals, 1)
	assert.Equal(t, "approved", list.Approvals[0].State)
	assert.Equal(t, "dana", list.Approvals[0].DecidedBy)
	require.NotNil(t, list.Approvals[0].Decision)
	assert.Equal(t, workflows.DecisionApprove, list.Approvals[0].Decision.Decision)

	// The same decision again: 200 with the original decision.
	r = a.do(http.MethodPost, stepPath(run, 2, "approve"), "ops", approvals.DecideRequest{ArgsHash: it.ArgsHash, Comment: "me too"})
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var repeated approvals.DecideResponse
	r.json(t, &repeated)
	assert.True(t, repeated.Repeated)
	assert.Equal(t, "dana", repeated.Decision.Approver)
	assert.Equal(t, "photos confirm it", repeated.Decision.Comment)
	assert.True(t, accepted.Decision.DecidedAt.Equal(repeated.Decision.DecidedAt))

	// A different decision after it: 409, and nothing changes.
	r = a.do(http.MethodPost, stepPath(run, 2, "reject"), "dana", approvals.DecideRequest{ArgsHash: it.ArgsHash})
	a.expectError(r, http.StatusConflict, "decision_conflict", "already approved by dana")
	assert.Equal(t, 1, e.count("approval_decisions", "run_id = $1 AND outcome = 'accepted'", run))
	assert.Equal(t, 1, e.count("approval_decisions", "run_id = $1 AND outcome = 'repeated' AND approver = 'ops'", run))
	assert.Equal(t, 1, e.count("approval_decisions", "run_id = $1 AND outcome = 'conflict' AND decision = 'reject'", run))

	// The run's status, steps included.
	r = a.do(http.MethodGet, "/v1/runs/"+run, "vic", nil)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var got workflows.Status
	r.json(t, &got)
	assert.Equal(t, workflows.RunCompleted, got.State)
	require.Len(t, got.Steps, 2)
	assert.Equal(t, "issue_credit", got.Steps[1].Tool)
}

func TestApprovalsAPIStartRun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.serveApprovals(nil)
	run := e.id("start")
	body := map[string]any{"run_id": run, "goal": "refund", "plan": creditPlan()}

	r := a.do(http.MethodPost, "/v1/runs", "ops", body)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	var first approvals.StartResponse
	r.json(t, &first)
	assert.Equal(t, "acme", first.Tenant, "the tenant is the token's")
	assert.Equal(t, run, first.RunID)
	assert.Equal(t, workflows.WorkflowID("acme", run), first.WorkflowID)
	assert.False(t, first.Existing)
	assert.Equal(t, "/v1/runs/"+run, r.header.Get("Location"))

	r = a.do(http.MethodPost, "/v1/runs", "ops", body)
	require.Equal(t, http.StatusOK, r.status, "the same request again; body: %s", r.body)
	var again approvals.StartResponse
	r.json(t, &again)
	assert.True(t, again.Existing)
	assert.Equal(t, first.TemporalRunID, again.TemporalRunID)

	r = a.do(http.MethodPost, "/v1/runs", "ops", map[string]any{"run_id": run, "goal": "something else", "plan": creditPlan()})
	a.expectError(r, http.StatusUnprocessableEntity, "run_conflict", run, "already used with another input")

	// The Idempotency-Key header is the run id.
	keyed := e.id("keyed")
	r = a.do(http.MethodPost, "/v1/runs", "ops", map[string]any{"plan": creditPlan()}, "Idempotency-Key", keyed)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	var byKey approvals.StartResponse
	r.json(t, &byKey)
	assert.Equal(t, keyed, byKey.RunID)
	r = a.do(http.MethodPost, "/v1/runs", "ops", map[string]any{"plan": creditPlan()}, "Idempotency-Key", keyed)
	assert.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	r = a.do(http.MethodPost, "/v1/runs", "ops", map[string]any{"run_id": "other", "plan": creditPlan()}, "Idempotency-Key", keyed)
	a.expectError(r, http.StatusBadRequest, "invalid_request", "Idempotency-Key", "differ")

	// Another tenant's operator starts its own run under the same id.
	r = a.do(http.MethodPost, "/v1/runs", "gops", body)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	var theirs approvals.StartResponse
	r.json(t, &theirs)
	assert.Equal(t, workflows.WorkflowID("globex", run), theirs.WorkflowID)
	assert.NotEqual(t, first.TemporalRunID, theirs.TemporalRunID)
}

func TestApprovalsAPIStartRunRefusesBadRequests(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.serveApprovals(func(c *approvals.Config) { c.MaxBodyBytes = 4096 })
	plan := creditPlan()
	for _, tc := range []struct {
		name    string
		who     string
		body    any
		headers []string
		status  int
		code    string
		parts   []string
	}{
		{"no run id", "ops", map[string]any{"plan": plan}, nil, 400, "invalid_request", []string{"run_id is required"}},
		{"neither goal nor plan", "ops", map[string]any{"run_id": "r"}, nil, 400, "invalid_request", []string{"give a goal or a plan"}},
		{"unknown field", "ops", map[string]any{"run_id": "r", "plan": plan, "tenant": "globex"}, nil, 400, "invalid_request", []string{`unknown field "tenant"`}},
		{"malformed JSON", "ops", `{"run_id": `, nil, 400, "invalid_request", []string{"not valid"}},
		{"two objects", "ops", `{"run_id": "r", "goal": "g"} {}`, nil, 400, "invalid_request", []string{"data after the JSON value"}},
		{"unknown tool", "ops", map[string]any{"run_id": "r", "plan": []map[string]any{{"tool": "wire_money", "args": map[string]any{}}}}, nil, 400, "invalid_request", []string{"plan[0]", "unknown tool \"wire_money\""}},
		{"args against the schema", "ops", map[string]any{"run_id": "r", "plan": []map[string]any{{"tool": "lookup_order", "args": map[string]any{"order": 1}}}}, nil, 400, "invalid_request", []string{"plan[0]"}},
		{"bad run id", "ops", map[string]any{"run_id": "bad\x01id", "goal": "g"}, nil, 400, "invalid_request", []string{"invalid run input"}},
		{"bad deadline", "ops", map[string]any{"run_id": "r", "goal": "g", "limits": map[string]any{"approval_deadline": "soon"}}, nil, 400, "invalid_request", []string{"limits.approval_deadline", "soon"}},
		{"deadline too long", "ops", map[string]any{"run_id": "r", "goal": "g", "limits": map[string]any{"approval_deadline": "400h"}}, nil, 400, "invalid_request", []string{"approval deadline"}},
		{"body too large", "ops", map[string]any{"run_id": "r", "goal": strings.Repeat("x", 5000)}, nil, 413, "body_too_large", []string{"4096 bytes"}},
		{"not JSON", "ops", "run_id=r", []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type", []string{"application/json"}},
		{"approver starts", "dana", map[string]any{"run_id": "r", "plan": plan}, nil, 403, "forbidden", []string{"dana is a approver", "operator"}},
		{"viewer starts", "vic", map[string]any{"run_id": "r", "plan": plan}, nil, 403, "forbidden", []string{"operator"}},
		{"no token", "", map[string]any{"run_id": "r", "plan": plan}, nil, 401, "unauthorized", []string{"Bearer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := a.do(http.MethodPost, "/v1/runs", tc.who, tc.body, tc.headers...)
			a.expectError(r, tc.status, tc.code, tc.parts...)
		})
	}
	_, err := e.tc.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID("acme", "r"), "")
	assert.Error(t, err, "no refused request started a run")
}

func TestApprovalsAPIAuthentication(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.serveApprovals(nil)
	hash := strings.Repeat("a", 64)
	endpoints := []struct{ method, path string }{
		{http.MethodPost, "/v1/runs"},
		{http.MethodGet, "/v1/runs/r"},
		{http.MethodGet, "/v1/approvals"},
		{http.MethodPost, stepPath("r", 1, "approve")},
		{http.MethodPost, stepPath("r", 1, "reject")},
	}
	for _, ep := range endpoints {
		for _, tc := range []struct{ name, header string }{
			{"no header", ""},
			{"not bearer", "Basic b3BzOm9wcw=="},
			{"empty bearer", "Bearer "},
			{"unknown token", "Bearer oncerun_not-a-token"},
			{"the hash as token", "Bearer " + approvals.TokenSHA256(a.tokens["ops"])},
		} {
			t.Run(ep.method+" "+ep.path+" "+tc.name, func(t *testing.T) {
				var body any
				if ep.method == http.MethodPost {
					body = map[string]any{"args_hash": hash}
				}
				r := a.do(ep.method, ep.path, "", body, "Authorization", tc.header)
				a.expectError(r, http.StatusUnauthorized, "unauthorized")
				assert.Contains(t, r.header.Get("WWW-Authenticate"), "Bearer")
			})
		}
	}
	assert.Equal(t, 0, e.count("approval_decisions", "true"), "no unauthenticated request reached the audit table")
}

func TestApprovalsAPIDecisionErrors(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", worker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("errs")
	step := a.startPending("ops", run)
	other := strings.Repeat("0", 64)

	for _, tc := range []struct {
		name   string
		who    string
		path   string
		body   any
		status int
		code   string
		parts  []string
	}{
		{"a done step", "dana", stepPath(run, 1, "approve"), approvals.DecideRequest{ArgsHash: step.ArgsHash}, 404, "not_found", []string{"no step 1"}},
		{"no such step", "dana", stepPath(run, 9, "approve"), approvals.DecideRequest{ArgsHash: step.ArgsHash}, 404, "not_found", []string{"no step 9"}},
		{"no such run", "dana", stepPath("nope", 2, "approve"), approvals.DecideRequest{ArgsHash: step.ArgsHash}, 404, "not_found", []string{`"nope"`}},
		{"another args hash", "dana", stepPath(run, 2, "approve"), approvals.DecideRequest{ArgsHash: other}, 409, "args_hash_mismatch", []string{other, step.ArgsHash}},
		{"no args hash", "dana", stepPath(run, 2, "approve"), map[string]any{"comment": "ok"}, 400, "invalid_request", []string{"args_hash"}},
		{"args hash in capitals", "dana", stepPath(run, 2, "approve"), approvals.DecideRequest{ArgsHash: strings.ToUpper(step.ArgsHash)}, 400, "invalid_request", []string{"args_hash"}},
		{"comment too long", "dana", stepPath(run, 2, "reject"), approvals.DecideRequest{ArgsHash: step.ArgsHash, Comment: strings.Repeat("x", 2001)}, 400, "invalid_request", []string{"comment"}},
		{"unknown field", "dana", stepPath(run, 2, "approve"), map[string]any{"args_hash": step.ArgsHash, "approver": "root"}, 400, "invalid_request", []string{`unknown field "approver"`}},
		{"bad step", "dana", "/v1/runs/" + run + "/steps/two/approve", approvals.DecideRequest{ArgsHash: step.ArgsHash}, 400, "invalid_request", []string{`step "two"`}},
		{"step zero", "dana", stepPath(run, 0, "approve"), approvals.DecideRequest{ArgsHash: step.ArgsHash}, 400, "invalid_request", []string{`step "0"`}},
		{"viewer", "vic", stepPath(run, 2, "approve"), approvals.DecideRequest{ArgsHash: step.ArgsHash}, 403, "forbidden", []string{"vic is a viewer"}},
		{"other tenant", "gus", stepPath(run, 2, "approve"), approvals.DecideRequest{ArgsHash: step.ArgsHash}, 404, "not_found", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := a.do(http.MethodPost, tc.path, tc.who, tc.body)
			a.expectError(r, tc.status, tc.code, tc.parts...)
		})
	}
	st := e.status("acme", run)
	assert.Equal(t, workflows.StepPendingApproval, st.Steps[1].State, "no refused request decided the step")
	assert.Equal(t, 0, e.count("approval_decisions", "outcome = 'accepted'"))
	assert.Equal(t, 1, e.count("approval_decisions", "outcome = 'args_mismatch' AND args_hash = $1", other))
	assert.Equal(t, 1, e.count("approval_decisions", "outcome = 'forbidden' AND approver = 'vic' AND role = 'viewer'"))
	assert.Equal(t, 0, e.count("approval_decisions", "approver = 'gus'"), "another tenant's attempt leaves no trace in this tenant's audit")

	// Other methods and paths answer in JSON too.
	a.expectError(a.do(http.MethodGet, stepPath(run, 2, "approve"), "dana", nil), http.StatusMethodNotAllowed, "method_not_allowed", "POST")
	a.expectError(a.do(http.MethodDelete, "/v1/runs/"+run, "dana", nil), http.StatusMethodNotAllowed, "method_not_allowed", "GET")
	a.expectError(a.do(http.MethodGet, "/v1/nothing", "dana", nil), http.StatusNotFound, "not_found", "/v1/nothing")
	a.expectError(a.do(http.MethodGet, "/v1/approvals?state=open", "dana", nil), http.StatusBadRequest, "invalid_request", `"open"`)
	a.expectError(a.do(http.MethodGet, "/v1/approvals?limit=0", "dana", nil), http.StatusBadRequest, "invalid_request", "limit")
	a.expectError(a.do(http.MethodGet, "/v1/approvals?tenant=globex", "dana", nil), http.StatusBadRequest, "invalid_request", `"tenant"`)
	a.expectError(a.do(http.MethodGet, "/v1/runs/nope", "dana", nil), http.StatusNotFound, "not_found", `"nope"`)

	// Past the deadline, before the run has recorded the expiry: not
	// pending, off the pending list, and needing resolution.
	future := e.serveApprovals(func(c *approvals.Config) {
		c.Now = func() time.Time { return time.Now().Add(workflows.DefaultApprovalDeadline + 2*time.Minute) }
	})
	r := future.do(http.MethodPost, stepPath(run, 2, "approve"), "dana", approvals.DecideRequest{ArgsHash: step.ArgsHash})
	future.expectError(r, http.StatusNotFound, "not_found", "deadline")
	assert.Equal(t, 1, e.count("approval_decisions", "outcome = 'not_pending' AND run_id = $1", run))
	assert.Equal(t, 0, e.count("approval_decisions", "outcome = 'accepted'"))
	var later approvals.ApprovalList
	future.do(http.MethodGet, "/v1/approvals?state=pending", "dana", nil).json(t, &later)
	assert.Empty(t, later.Approvals, "a step past its deadline is not pending")
	future.do(http.MethodGet, "/v1/approvals?state=needs_resolution", "dana", nil).json(t, &later)
	require.Len(t, later.Approvals, 1)
	assert.Contains(t, later.Approvals[0].Problem, "deadline")

	// Rejected: the step is decided and the run goes on without the credit.
	r = a.do(http.MethodPost, stepPath(run, 2, "reject"), "dana", approvals.DecideRequest{ArgsHash: step.ArgsHash, Comment: "no photos"})
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
	final := e.result("acme", run)
	assert.Equal(t, workflows.StepRejected, final.Steps[1].State)
	assert.Equal(t, 0, e.count("credits", "tenant = 'acme'"))
	// A decision on a step that expired or was decided around the service.
	a.expectError(a.do(http.MethodPost, stepPath(run, 2, "approve"), "dana", approvals.DecideRequest{ArgsHash: step.ArgsHash}),
		http.StatusConflict, "decision_conflict", "already rejected by dana")
}

func TestApprovalsAPITenantIsolation(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", worker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("iso")
	step := a.startPending("ops", run)

	// globex sees nothing of acme's run: not its status, not its approval,
	// and cannot decide it. The answers are those for a run that does not
	// exist.
	a.expectError(a.do(http.MethodGet, "/v1/runs/"+run, "gus", nil), http.StatusNotFound, "not_found")
	var list approvals.ApprovalList
	for _, view := range []string{"pending", "decided", "needs_resolution"} {
		r := a.do(http.MethodGet, "/v1/approvals?state="+view, "gus", nil)
		require.Equal(t, http.StatusOK, r.status)
		r.json(t, &list)
		assert.Empty(t, list.Approvals, view)
	}
	a.expectError(a.do(http.MethodPost, stepPath(run, 2, "approve"), "gus", approvals.DecideRequest{ArgsHash: step.ArgsHash}),
		http.StatusNotFound, "not_found")
	st := e.status("acme", run)
	assert.Equal(t, workflows.StepPendingApproval, st.Steps[1].State)

	// acme's viewer sees it.
	r := a.do(http.MethodGet, "/v1/approvals", "vic", nil)
	r.json(t, &list)
	require.Len(t, list.Approvals, 1)
	assert.Equal(t, run, list.Approvals[0].RunID)

	// globex's own run under the same run id, and acme's decided: each
	// tenant sees its own step and decision only.
	theirs := a.startPending("gops", run)
	r = a.do(http.MethodPost, stepPath(run, 2, "approve"), "dana", approvals.DecideRequest{ArgsHash: step.ArgsHash})
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
	a.do(http.MethodGet, "/v1/approvals", "gus", nil).json(t, &list)
	require.Len(t, list.Approvals, 1)
	assert.Nil(t, list.Approvals[0].Decision, "acme's decision is not globex's")
	assert.Equal(t, theirs.ArgsHash, list.Approvals[0].ArgsHash)
	a.do(http.MethodGet, "/v1/approvals?state=decided", "gus", nil).json(t, &list)
	assert.Empty(t, list.Approvals)
	gst := e.status("globex", run)
	assert.Equal(t, workflows.StepPendingApproval, gst.Steps[1].State, "globex's step still waits")
}

func TestApprovalsAPIUndeliveredDecisionIsSentAgain(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", worker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("undelivered")
	step := a.startPending("ops", run)

	// A service whose Temporal client cannot reach the run: the decision is
	// recorded, the signal fails, and the caller is told to repeat it.
	lost, err := client.NewLazyClient(client.Options{HostPort: frontend, Namespace: "no-such-namespace"})
	require.NoError(t, err)
	t.Cleanup(lost.Close)
	cut := e.serveApprovals(func(c *approvals.Config) {
		c.Runs = &runs.Client{Temporal: lost, TaskQueue: e.queue, Pool: e.pool}
		c.QueryTimeout = 5 * time.Second
	})
	r := cut.do(http.MethodPost, stepPath(run, 2, "approve"), "dana", approvals.DecideRequest{ArgsHash: step.ArgsHash})
	cut.expectError(r, http.StatusServiceUnavailable, "unavailable", "recorded", "send the same decision again")
	assert.Equal(t, 1, e.count("approval_decisions", "outcome = 'accepted' AND run_id = $1", run))

	// Listed as needing resolution once the grace period has passed.
	later := e.serveApprovals(func(c *approvals.Config) {
		c.Now = func() time.Time { return time.Now().Add(2 * time.Minute) }
	})
	var list approvals.ApprovalList
	later.do(http.MethodGet, "/v1/approvals?state=needs_resolution", "dana", nil).json(t, &list)
	require.Len(t, list.Approvals, 1)
	assert.Contains(t, list.Approvals[0].Problem, "has not applied the decision")
	page, _ := later.browser().signIn("dana")
	assert.Contains(t, page, "Needs resolution (1)")
	assert.Contains(t, page, ">Send the decision again</button>", "the inbox offers to send the recorded decision again")
	assert.Contains(t, page, `name="decision" value="approve"`)
	vpage, _ := later.browser().signIn("vic")
	assert.Contains(t, vpage, "Needs resolution (1)")
	assert.NotContains(t, vpage, "Send the decision again", "a viewer gets no button")
	later.do(http.MethodGet, "/v1/approvals?state=decided", "dana", nil).json(t, &list)
	assert.Empty(t, list.Approvals, "past the grace period the step is no longer being decided")
	a.do(http.MethodGet, "/v1/approvals?state=pending", "dana", nil).json(t, &list)
	assert.Empty(t, list.Approvals, "a recorded decision takes the step off the pending list")
	a.do(http.MethodGet, "/v1/approvals?state=decided", "dana", nil).json(t, &list)
	assert.Len(t, list.Approvals, 1, "within the grace period the step is being decided")

	// Repeating the decision through a service that reaches Temporal
	// delivers it: 200 with the original, and the run goes on.
	r = a.do(http.MethodPost, stepPath(run, 2, "approve"), "dana", approvals.DecideRequest{ArgsHash: step.ArgsHash})
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	st := e.result("acme", run)
	assert.Equal(t, workflows.RunCompleted, st.State)
	assert.Equal(t, workflows.StepDone, st.Steps[1].State)
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme'"))
}

func TestApprovalsAPITwoApproversAtOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", worker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("race")
	step := a.startPending("ops", run)

	verbs := []string{"approve", "reject", "approve", "reject"}
	who := []string{"dana", "ops", "ops", "dana"}
	statuses := make([]int, len(verbs))
	var wg sync.WaitGroup
	for i := range verbs {
		wg.Go(func() {
			statuses[i] = a.do(http.MethodPost, stepPath(run, 2, verbs[i]), who[i], approvals.DecideRequest{ArgsHash: step.ArgsHash}).status
		})
	}
	wg.Wait()
	accepted := 0
	for _, s := range statuses {
		if s == http.StatusAccepted {
			accepted++
		}
		assert.Contains(t, []int{http.StatusAccepted, http.StatusOK, http.StatusConflict}, s)
	}
	assert.Equal(t, 1, accepted, "exactly one decision is the decision of record: %v", statuses)
	var decision string
	require.NoError(t, e.pool.QueryRow(context.Background(),
		`SELECT decision FROM approval_decisions WHERE run_id = $1 AND outcome = 'accepted'`, run).Scan(&decision))
	final := e.result("acme", run)
	assert.Equal(t, map[string]workflows.StepState{"approve": workflows.StepDone, "reject": workflows.StepRejected}[decision],
		final.Steps[1].State, "the run applied the decision of record")
	for i, s := range statuses {
		want := http.StatusConflict
		if verbs[i] == decision {
			want = http.StatusOK
		}
		if s != http.StatusAccepted {
			assert.Equal(t, want, s, "request %d (%s)", i, verbs[i])
		}
	}
}

func TestApprovalsAPIRunThatCannotApply(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", worker.Options{})
	a := e.serveApprovals(nil)
	ctx := context.Background()

	// A run that is gone while its step waits: the decision is recorded and
	// the caller is told the run cannot apply it.
	gone := e.id("gone")
	step := a.startPending("ops", gone)
	require.NoError(t, e.tc.TerminateWorkflow(ctx, workflows.WorkflowID("acme", gone), "", "test"))
	r := a.do(http.MethodPost, stepPath(gone, 2, "approve"), "dana", approvals.DecideRequest{ArgsHash: step.ArgsHash})
	a.expectError(r, http.StatusConflict, "run_closed", "no longer open")

	// A decision recorded but not delivered, then the deadline: the run
	// records the step as expired; the decision needs resolution, and
	// neither repeating nor changing it is answered as applied.
	late := e.id("late")
	r = a.do(http.MethodPost, "/v1/runs", "ops", map[string]any{"run_id": late, "plan": creditPlan(),
		"limits": map[string]any{"approval_deadline": "3s"}})
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	st := e.waitFor("acme", late, "step 2's approval", func(s workflows.Status) bool { return s.State == workflows.RunWaitingForApproval })
	lost, err := client.NewLazyClient(client.Options{HostPort: frontend, Namespace: "no-such-namespace"})
	require.NoError(t, err)
	t.Cleanup(lost.Close)
	cut := e.serveApprovals(func(c *approvals.Config) {
		c.Runs = &runs.Client{Temporal: lost, TaskQueue: e.queue, Pool: e.pool}
		c.QueryTimeout = 2 * time.Second
	})
	r = cut.do(http.MethodPost, stepPath(late, 2, "approve"), "dana", approvals.DecideRequest{ArgsHash: st.Steps[1].ArgsHash})
	cut.expectError(r, http.StatusServiceUnavailable, "unavailable", "recorded")
	final := e.result("acme", late)
	require.Equal(t, workflows.StepExpired, final.Steps[1].State)
	require.Eventually(t, func() bool {
		return e.count("approvals", "run_id = $1 AND state = 'expired'", late) == 1
	}, 10*time.Second, 50*time.Millisecond)

	var list approvals.ApprovalList
	a.do(http.MethodGet, "/v1/approvals?state=needs_resolution", "vic", nil).json(t, &list)
	// The terminated run's step is still within the grace period.
	require.Len(t, list.Approvals, 1)
	require.Equal(t, late, list.Approvals[0].RunID)
	problem := list.Approvals[0].Problem
	assert.Contains(t, problem, "dana approved this step")
	assert.Contains(t, problem, "recorded it as expired")
	a.do(http.MethodGet, "/v1/approvals?state=decided", "vic", nil).json(t, &list)
	for _, it := range list.Approvals {
		assert.NotEqual(t, late, it.RunID, "a step that needs resolution is not listed as decided")
	}
	a.do(http.MethodGet, "/v1/approvals?state=needs_resolution", "gus", nil).json(t, &list)
	assert.Empty(t, list.Approvals, "another tenant does not see the step")
	for _, verb := range []string{"approve", "reject"} {
		r = a.do(http.MethodPost, stepPath(late, 2, verb), "dana", approvals.DecideRequest{ArgsHash: st.Steps[1].ArgsHash})
		a.expectError(r, http.StatusConflict, "resolved_otherwise", "recorded it as expired")
	}

	// An expired step nobody decided: 404, audited as not pending.
	quiet := e.id("quiet")
	r = a.do(http.MethodPost, "/v1/runs", "ops", map[string]any{"run_id": quiet, "plan": creditPlan(),
		"limits": map[string]any{"approval_deadline": "1s"}})
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	final = e.result("acme", quiet)
	require.Equal(t, workflows.StepExpired, final.Steps[1].State)
	require.Eventually(t, func() bool {
		return e.count("approvals", "run_id = $1 AND state = 'expired'", quiet) == 1
	}, 10*time.Second, 50*time.Millisecond)
	r = a.do(http.MethodPost, stepPath(quiet, 2, "approve"), "dana", approvals.DecideRequest{ArgsHash: final.Steps[1].ArgsHash})
	a.expectError(r, http.StatusNotFound, "not_found", "not pending", "expired")
	assert.Equal(t, 1, e.count("approval_decisions", "run_id = $1 AND outcome = 'not_pending'", quiet))
}
