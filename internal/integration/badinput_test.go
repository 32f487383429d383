package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/worker"
	"github.com/oncerun/oncerun/workflows"
)

// TestStartRefusesInputThatCouldWedgeARun: what PostgreSQL cannot store
// (a NUL character), what a terminal would obey, what people cannot read
// or a URL cannot carry, and limits that overflow are refused when the run
// is started, with a 400 that names the field; no run starts.
func TestStartRefusesInputThatCouldWedgeARun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.serveApprovals(nil)
	note := func(text string) []map[string]any {
		return []map[string]any{{"tool": "add_order_note", "args": map[string]any{"order_id": "1001", "text": text}}}
	}
	for _, tc := range []struct {
		name  string
		runID string
		body  any
		key   string // Idempotency-Key
		parts []string
	}{
		{"NUL in the goal", "nul-goal", map[string]any{"goal": "refund\u0000x", "plan": creditPlan()}, "", []string{"goal holds a NUL character (U+0000) at byte 6"}},
		{"escape in the goal", "esc-goal", map[string]any{"goal": "refund\u001b[2J", "plan": creditPlan()}, "", []string{"goal holds the control character U+001B"}},
		{"NUL in a tool argument", "nul-arg", map[string]any{"plan": note("a\u0000b")}, "", []string{"plan step 1 arguments", "NUL character", "text"}},
		{"C1 control in a tool argument", "c1-arg", map[string]any{"plan": note("a\u009bb")}, "", []string{"U+009B"}},
		{"goal not UTF-8", "", "{\"run_id\":\"utf8\",\"goal\":\"\xff\",\"plan\":[]}", "", []string{"not valid"}},
		{"run id .", ".", map[string]any{"goal": "g"}, "", []string{`run_id "." cannot be used`}},
		{"run id ..", "..", map[string]any{"goal": "g"}, "", []string{`run_id ".." cannot be used`}},
		{"run id .. as Idempotency-Key", "", map[string]any{"goal": "g"}, "..", []string{`run_id ".." cannot be used`}},
		{"right-to-left override", "r\u202e1", map[string]any{"goal": "g"}, "", []string{"U+202E"}},
		{"zero-width space", "r\u200b1", map[string]any{"goal": "g"}, "", []string{"U+200B"}},
		{"fullwidth letters", "ｒ１", map[string]any{"goal": "g"}, "", []string{`NFKC form is "r1"`}},
		{"leading space", " r1", map[string]any{"goal": "g"}, "", []string{"starts or ends with a space"}},
		{"max_steps 2^62", "big", map[string]any{"goal": "g", "limits": map[string]any{"max_steps": int64(1) << 62}}, "", []string{"limits.max_steps 4611686018427387904 is more than 10000"}},
		{"negative max_steps", "neg", map[string]any{"goal": "g", "limits": map[string]any{"max_steps": -1}}, "", []string{"limits must not be negative"}},
		{"max_steps not an integer", "", `{"run_id":"frac","goal":"g","limits":{"max_steps":1.5}}`, "", []string{"limits.max_steps"}},
		{"a key twice", "", `{"run_id":"a","run_id":"b","goal":"g"}`, "", []string{`field "run_id" appears twice`}},
		{"a key twice in a plan call", "", `{"run_id":"dup","plan":[{"tool":"lookup_order","tool":"issue_credit","args":{}}]}`, "", []string{`field "tool" appears twice in plan[0]`}},
		{"a field in capitals", "", `{"Run_ID":"caps","goal":"g"}`, "", []string{`unknown field "Run_ID"`}},
		{"planner's malformed field in a plan", "", `{"run_id":"mal","plan":[{"tool":"lookup_order","malformed":"x"}]}`, "", []string{"malformed is for planners"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := tc.body
			if m, ok := body.(map[string]any); ok && tc.runID != "" {
				m["run_id"] = tc.runID
			}
			var headers []string
			if tc.key != "" {
				headers = []string{"Idempotency-Key", tc.key}
			}
			r := a.do(http.MethodPost, "/v1/runs", "ops", body, headers...)
			a.expectError(r, http.StatusBadRequest, "invalid_request", tc.parts...)
			if tc.runID != "" {
				_, err := e.tc.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID("acme", tc.runID), "")
				assert.Error(t, err, "no run started")
			}
		})
	}
}

// TestEveryDecisionRequestOnAStepLeavesOneAuditRow: whatever is wrong with
// a decision request on a step of the caller's tenant (a User-Agent that is
// not UTF-8, a comment with a NUL, a body that is not JSON), it is answered
// with a 4xx, never a 500, and leaves exactly one audit row, with what the
// client sent escaped and cut to fit. A request naming no step of the
// tenant leaves none.
func TestEveryDecisionRequestOnAStepLeavesOneAuditRow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", sdkworker.Options{})
	a := e.serveApprovals(func(c *approvals.Config) { c.MaxBodyBytes = 4096 })
	run := e.id("audit")
	step := a.startPending("ops", run)
	hash := step.ArgsHash
	other := strings.Repeat("0", 64)
	body := func(hash, comment string) string {
		raw, err := json.Marshal(map[string]string{"args_hash": hash, "comment": comment})
		require.NoError(t, err)
		return string(raw)
	}
	longAgent := strings.Repeat("a", 511) + "é" + "tail"

	type row struct{ Outcome, Decision, ArgsHash, Comment, UserAgent, Detail string }
	lastRow := func() row {
		var r row
		require.NoError(t, e.pool.QueryRow(context.Background(), `
SELECT outcome, decision, args_hash, comment, user_agent, detail FROM approval_decisions
WHERE tenant = 'acme' AND run_id = $1 AND step = 2 ORDER BY id DESC LIMIT 1`, run).
			Scan(&r.Outcome, &r.Decision, &r.ArgsHash, &r.Comment, &r.UserAgent, &r.Detail))
		return r
	}
	for _, tc := range []struct {
		name    string
		who     string
		verb    string
		body    string
		headers []string
		status  int
		code    string
		want    row // the fields that are set are checked
	}{
		{"a viewer whose User-Agent is not UTF-8", "vic", "approve", body(hash, ""), []string{"User-Agent", "curl/\xff\xfe"},
			403, "forbidden", row{Outcome: "forbidden", UserAgent: `curl/\xff\xfe`}},
		{"a User-Agent cut inside a character", "dana", "approve", body(other, ""), []string{"User-Agent", longAgent},
			409, "args_hash_mismatch", row{Outcome: "args_mismatch", ArgsHash: other, UserAgent: strings.Repeat("a", 511)}},
		{"a NUL in the comment", "dana", "approve", body(hash, "fine\x00"), nil,
			400, "invalid_request", row{Outcome: "invalid", Decision: "approve", Comment: `fine\u0000`, Detail: "comment holds a NUL character"}},
		{"an escape in the comment", "dana", "reject", body(hash, "\x1b[2Jno"), nil,
			400, "invalid_request", row{Outcome: "invalid", Decision: "reject", Comment: `\u001b[2Jno`}},
		{"a comment too long", "dana", "reject", body(hash, strings.Repeat("x", 2001)), nil,
			400, "invalid_request", row{Outcome: "invalid", Comment: strings.Repeat("x", 2000)}},
		{"a malformed args hash", "dana", "approve", body("nope", ""), nil,
			400, "invalid_request", row{Outcome: "invalid", ArgsHash: "nope"}},
		{"an args hash of 3 KB", "dana", "approve", body(strings.Repeat("f", 3000), ""), nil,
			400, "invalid_request", row{Outcome: "invalid", ArgsHash: strings.Repeat("f", 128)}},
		{"no args hash", "dana", "approve", `{}`, nil, 400, "invalid_request", row{Outcome: "invalid", ArgsHash: ""}},
		{"a key twice", "dana", "approve", `{"args_hash":"` + other + `","args_hash":"` + hash + `"}`, nil,
			400, "invalid_request", row{Outcome: "invalid", Detail: `field "args_hash" appears twice`}},
		{"a field in capitals", "dana", "approve", `{"ARGS_HASH":"` + hash + `"}`, nil,
			400, "invalid_request", row{Outcome: "invalid", Detail: `unknown field "ARGS_HASH"`}},
		{"an unknown field", "dana", "approve", `{"args_hash":"` + hash + `","approver":"root"}`, nil,
			400, "invalid_request", row{Outcome: "invalid", Detail: `unknown field "approver"`}},
		{"not JSON", "dana", "approve", `{"args_hash":`, nil, 400, "invalid_request", row{Outcome: "invalid"}},
		{"not UTF-8 in the body", "dana", "approve", "{\"args_hash\":\"" + hash + "\",\"comment\":\"\xff\"}", nil,
			400, "invalid_request", row{Outcome: "invalid"}},
		{"a form body", "dana", "approve", "args_hash=" + hash, []string{"Content-Type", "application/x-www-form-urlencoded"},
			415, "unsupported_media_type", row{Outcome: "invalid"}},
		{"a body too large", "dana", "approve", body(hash, strings.Repeat("x", 5000)), nil,
			413, "body_too_large", row{Outcome: "invalid"}},
		{"a viewer with a body that is not JSON", "vic", "reject", `nope`, nil, 403, "forbidden", row{Outcome: "forbidden"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.count("approval_decisions", "tenant = 'acme' AND run_id = $1 AND step = 2", run)
			r := a.do(http.MethodPost, stepPath(run, 2, tc.verb), tc.who, tc.body, tc.headers...)
			a.expectError(r, tc.status, tc.code)
			require.Equal(t, before+1, e.count("approval_decisions", "tenant = 'acme' AND run_id = $1 AND step = 2", run),
				"exactly one audit row")
			got := lastRow()
			assert.Equal(t, tc.want.Outcome, got.Outcome)
			if tc.want.Decision != "" {
				assert.Equal(t, tc.want.Decision, got.Decision)
			}
			if tc.want.ArgsHash != "" || tc.name == "no args hash" {
				assert.Equal(t, tc.want.ArgsHash, got.ArgsHash)
			}
			if tc.want.Comment != "" {
				assert.Equal(t, tc.want.Comment, got.Comment)
			}
			if tc.want.UserAgent != "" {
				assert.Equal(t, tc.want.UserAgent, got.UserAgent)
			}
			if tc.want.Detail != "" {
				assert.Contains(t, got.Detail, tc.want.Detail)
			}
		})
	}

	// Requests that name no step of the tenant leave no row.
	total := e.count("approval_decisions", "true")
	a.expectError(a.do(http.MethodPost, stepPath(run, 2, "approve"), "gus", body(hash, "")), http.StatusNotFound, "not_found")
	a.expectError(a.do(http.MethodPost, stepPath("no-such-run", 2, "approve"), "dana", body(hash, "")), http.StatusNotFound, "not_found")
	a.expectError(a.do(http.MethodPost, stepPath(run, 7, "approve"), "dana", `nope`), http.StatusNotFound, "not_found")
	a.expectError(a.do(http.MethodPost, "/v1/runs/r%00/steps/2/approve", "dana", body(hash, "")), http.StatusNotFound, "not_found")
	a.expectError(a.do(http.MethodPost, "/v1/runs/r%FF/steps/2/approve", "dana", body(hash, "")), http.StatusNotFound, "not_found")
	assert.Equal(t, total, e.count("approval_decisions", "true"))
	assert.Zero(t, e.count("approval_decisions", "outcome = 'accepted'"), "nothing was accepted")
	st := e.status("acme", run)
	assert.Equal(t, workflows.StepPendingApproval, st.Steps[1].State)
}

// TestARepeatForOtherArgumentsIsAMismatch: the decision of record repeated
// with another args hash is not a repeat: it is refused as a mismatch, and
// audited with the hash it named.
func TestARepeatForOtherArgumentsIsAMismatch(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", sdkworker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("repeat")
	hash := a.startPending("ops", run).ArgsHash
	other := strings.Repeat("0", 64)
	lastRow := func() (outcome, argsHash, detail string) {
		require.NoError(t, e.pool.QueryRow(context.Background(), `
SELECT outcome, args_hash, detail FROM approval_decisions WHERE run_id = $1 ORDER BY id DESC LIMIT 1`, run).
			Scan(&outcome, &argsHash, &detail))
		return outcome, argsHash, detail
	}

	r := a.do(http.MethodPost, stepPath(run, 2, "approve"), "dana", approvals.DecideRequest{ArgsHash: hash, Comment: "ok"})
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
	r = a.do(http.MethodPost, stepPath(run, 2, "approve"), "ops", approvals.DecideRequest{ArgsHash: other})
	a.expectError(r, http.StatusConflict, "args_hash_mismatch", other, hash)
	outcome, argsHash, detail := lastRow()
	assert.Equal(t, []string{"args_mismatch", other, "the step's args_hash is " + hash}, []string{outcome, argsHash, detail})

	r = a.do(http.MethodPost, stepPath(run, 2, "approve"), "ops", approvals.DecideRequest{ArgsHash: hash})
	require.Equal(t, http.StatusOK, r.status, "the same decision for the same arguments is a repeat; body: %s", r.body)
	outcome, _, _ = lastRow()
	assert.Equal(t, "repeated", outcome)
	assert.Equal(t, 1, e.count("approval_decisions", "run_id = $1 AND outcome = 'accepted'", run))
}

// stallProxy passes TCP connections on to PostgreSQL and can stop passing
// bytes, as a database that stalls does: it neither refuses nor answers.
type stallProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cond    *sync.Cond
	stalled bool
	conns   []net.Conn
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &stallProxy{ln: ln, target: target}
	p.cond = sync.NewCond(&p.mu)
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.resume()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *stallProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

// pipe copies from src to dst, holding every read back while stalled.
func (p *stallProxy) pipe(src, dst net.Conn) {
	defer src.Close()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.stalled {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
}

func (p *stallProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = false
	p.cond.Broadcast()
}

// TestApprovalsAnswerWhenTheDatabaseStalls: with PostgreSQL silent (not
// refusing, just not answering), the list, a decision and the inbox answer
// 503 with a Retry-After header within their deadline instead of waiting
// for the client to hang up; when the database answers again, so do they.
func TestApprovalsAnswerWhenTheDatabaseStalls(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", sdkworker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("stall")
	step := a.startPending("ops", run)

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
	b := s.browser()
	b.signIn("dana")
	r := s.do(http.MethodGet, "/v1/approvals", "dana", nil)
	require.Equal(t, http.StatusOK, r.status, "through the proxy; body: %s", r.body)

	proxy.stall()
	// A client that gives up long after the deadline: a request that waits
	// for it fails the test instead of hanging it.
	patient := &http.Client{Timeout: 30 * time.Second}
	send := func(method, path string, body io.Reader, headers ...string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, s.srv.URL+path, body)
		require.NoError(t, err)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := patient.Do(req)
		require.NoError(t, err, "%s %s is answered while the database stalls", method, path)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, raw
	}
	bearer := "Bearer " + s.tokens["dana"]
	for _, req := range []struct{ method, path, body string }{
		{http.MethodGet, "/v1/approvals", ""},
		{http.MethodGet, "/v1/approvals?state=needs_resolution", ""},
		{http.MethodPost, stepPath(run, 2, "approve"), `{"args_hash":"` + step.ArgsHash + `"}`},
	} {
		resp, raw := send(req.method, req.path, strings.NewReader(req.body), "Authorization", bearer, "Content-Type", "application/json")
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s %s: %s", req.method, req.path, raw)
		assert.Equal(t, "2", resp.Header.Get("Retry-After"), "%s %s", req.method, req.path)
		var eb approvals.ErrorBody
		require.NoError(t, json.Unmarshal(raw, &eb), "%s", raw)
		assert.Equal(t, "unavailable", eb.Error.Code)
		assert.Contains(t, eb.Error.Message, "did not answer within 1s")
	}
	status, headers, page := b.send(http.MethodGet, "/", nil)
	assert.Equal(t, http.StatusServiceUnavailable, status, "the inbox: %s", page)
	assert.Equal(t, "2", headers.Get("Retry-After"))
	assert.Contains(t, page, "could not be read")

	proxy.resume()
	require.Eventually(t, func() bool {
		return s.do(http.MethodGet, "/v1/approvals", "dana", nil).status == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond, "the service answers again once the database does")
	assert.Zero(t, e.count("approval_decisions", "outcome = 'accepted'"), "the decision made while the database stalled was not recorded")
}

// TestRunStatusCarriesStableErrors: the errors of a run's status, as the
// API gives them, are the failures' own messages; Temporal's details (the
// worker's identity, event ids) stay in the logs.
func TestRunStatusCarriesStableErrors(t *testing.T) {
	t.Parallel()
	e := setup(t)
	archived := tools.Tool{
		Name:   "archive_order",
		Schema: json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`),
		Class:  tools.ClassRead,
		Run: func(context.Context, tools.Call) (any, error) {
			return nil, tools.Permanent(errors.New("order 1001 is archived"))
		},
	}
	e.tools = append(e.tools, archived)
	e.startWorker("w1", sdkworker.Options{})
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, e.tools...)
	require.NoError(t, err)
	a := e.serveApprovals(func(c *approvals.Config) { c.Tools = reg })
	run := e.id("errors")
	r := a.do(http.MethodPost, "/v1/runs", "ops", map[string]any{"run_id": run,
		"plan": []map[string]any{{"tool": "archive_order", "args": map[string]any{"order_id": "1001"}}}})
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	e.result("acme", run)

	r = a.do(http.MethodGet, "/v1/runs/"+run, "vic", nil)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	var st workflows.Status
	r.json(t, &st)
	require.Len(t, st.Steps, 1)
	assert.Equal(t, workflows.StepFailed, st.Steps[0].State)
	assert.Equal(t, "tool archive_order: order 1001 is archived", st.Steps[0].Error)
	for _, internal := range []string{"scheduledEventID", "startedEventID", "identity", "retryable", "activity error"} {
		assert.NotContains(t, string(r.body), internal)
	}
}

// TestScriptedRunHistoryDoesNotCarryThePlanEveryTurn: each planning turn of
// a scripted run gets the plan's next calls (a batch of at most 32), not
// the whole plan, and runs as a local activity whose input stays out of the
// history; what each turn records (its marker) holds what the run did not
// know of each call, checked: not its arguments, which are in the run's
// input, nor the goal. The run's history grows with the number of steps,
// not with its square.
func TestScriptedRunHistoryDoesNotCarryThePlanEveryTurn(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", sdkworker.Options{})
	run := e.id("window")
	var plan []map[string]any
	for i := range 40 {
		plan = append(plan, map[string]any{"tool": "lookup_order", "args": map[string]any{"order_id": fmt.Sprintf("order-%03d-padded-to-be-long", i)}})
	}
	a := e.serveApprovals(nil)
	r := a.do(http.MethodPost, "/v1/runs", "ops", map[string]any{"run_id": run, "goal": strings.Repeat("g", 500), "plan": plan})
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	final := e.result("acme", run)
	require.Len(t, final.Steps, 40)

	turns, scheduled, recorded := planningTurns(t, e, run)
	assert.Equal(t, 3, turns, "a turn of 32 calls, one of 8, and the last")
	assert.Zero(t, scheduled, "a script's turns run as local activities, not through the server")
	assert.NotContains(t, recorded, "padded-to-be-long", "the calls' arguments are the run's own: no turn records them again")
	assert.NotContains(t, recorded, strings.Repeat("g", 100), "nor the goal")
	assert.Less(t, len(recorded), 40*250, "about 200 bytes a call: its hash, class, timeout and guarantee")
}

// planningTurns counts the planning turns of a run's history (local
// activity markers, and Plan activities scheduled through the server) and
// returns what their markers hold, one after the other.
func planningTurns(t *testing.T, e *env, runID string) (turns, scheduled int, recorded string) {
	t.Helper()
	ctx := context.Background()
	it := e.tc.GetWorkflowHistory(ctx, workflows.WorkflowID("acme", runID), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		if attrs := ev.GetActivityTaskScheduledEventAttributes(); attrs != nil && attrs.GetActivityType().GetName() == "Plan" {
			turns++
			scheduled++
		}
		m := ev.GetMarkerRecordedEventAttributes()
		if m == nil || m.GetMarkerName() != "LocalActivity" || !localActivityOf(m, "Plan") {
			continue // a database tool's steps are local activities too
		}
		turns++
		for _, ps := range m.GetDetails() {
			for _, p := range ps.GetPayloads() {
				recorded += string(p.GetData())
			}
		}
	}
	return turns, scheduled, recorded
}

// localActivityOf reports whether a local activity's marker is of an
// activity of type typ.
func localActivityOf(m *historypb.MarkerRecordedEventAttributes, typ string) bool {
	for _, p := range m.GetDetails()["data"].GetPayloads() {
		var data struct{ ActivityType string }
		if json.Unmarshal(p.GetData(), &data) == nil && data.ActivityType == typ {
			return true
		}
	}
	return false
}

// TestInboxFormsWithBadValues: an inbox decision whose values are wrong (a
// NUL in the comment, a decision tampered with) is refused and audited like
// one through the API; a form too large to read is 413, not taken for a
// forged one, and leaves no row.
func TestInboxFormsWithBadValues(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", sdkworker.Options{})
	a := e.serveApprovals(func(c *approvals.Config) { c.MaxBodyBytes = 4096 })
	run := e.id("inbox-bad")
	step := a.startPending("ops", run)
	b := a.browser()
	_, csrf := b.signIn("dana")
	path := "/runs/" + run + "/steps/2/decide"
	form := func(decision, comment string) url.Values {
		return url.Values{"csrf": {csrf}, "args_hash": {step.ArgsHash}, "decision": {decision}, "comment": {comment}}
	}
	rows := func() int { return e.count("approval_decisions", "run_id = $1", run) }

	status, _, page := b.send(http.MethodPost, path, form("approve", "fine\x00"))
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, page, "comment holds a NUL character")
	assert.Equal(t, 1, e.count("approval_decisions", `run_id = $1 AND outcome = 'invalid' AND via = 'inbox' AND comment = 'fine\u0000'`, run))

	status, _, page = b.send(http.MethodPost, path, form("delete", ""))
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, page, `decision &#34;delete&#34; is not approve, reject or edit`)
	assert.Equal(t, 1, e.count("approval_decisions", "run_id = $1 AND outcome = 'invalid' AND decision = ''", run))

	before := rows()
	status, _, page = b.send(http.MethodPost, path, form("approve", strings.Repeat("x", 5000)))
	assert.Equal(t, http.StatusRequestEntityTooLarge, status, "%s", page)
	assert.Equal(t, before, rows(), "a form that cannot be read leaves no row")

	st := e.status("acme", run)
	assert.Equal(t, workflows.StepPendingApproval, st.Steps[1].State)
}
