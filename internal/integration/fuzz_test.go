package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/workflows"
)

// The fuzz's service answers within its deadlines: a decision's database
// work (fuzzDBTimeout) and then its signal (fuzzQueryTimeout); a start's
// questions to Temporal. fuzzAnswerWithin adds slack for a loaded machine.
const (
	fuzzDBTimeout    = 5 * time.Second
	fuzzQueryTimeout = 5 * time.Second
	fuzzAnswerWithin = fuzzDBTimeout + fuzzQueryTimeout + 5*time.Second
)

// FuzzApprovalsAPI sends arbitrary start and decision requests to the
// approvals service, served over HTTP with a worker on the test Temporal
// server and a real database, and checks the invariants of bad input:
//
//   - every request is answered, within its deadline;
//   - nothing the client sends is answered 500;
//   - a run the service accepts never reaches a state where a step reads
//     pending while no approvals row lists it (the run would wait for a
//     decision nobody can make);
//   - every decision request on a step of the caller's tenant leaves
//     exactly one audit row, and one on no such step leaves none.
//
// Each input is one start request (its body and Idempotency-Key) and one
// decision request (its body and User-Agent), sent by one of the test
// identities (who) to one of: the step a run of the world waits on, a step
// of the run just started, or the Idempotency-Key as a run id (target).
func FuzzApprovalsAPI(f *testing.F) {
	w := newFuzzWorld(f)
	start := func(runID, goal string) []byte {
		raw, err := json.Marshal(map[string]any{"run_id": runID, "goal": goal, "plan": creditPlan()})
		require.NoError(f, err)
		return raw
	}
	decide := func(hash, comment string) []byte {
		raw, err := json.Marshal(map[string]string{"args_hash": hash, "comment": comment})
		require.NoError(f, err)
		return raw
	}
	zeros := string(bytes.Repeat([]byte("0"), 64))
	f.Add(start("fz-ok", "refund order 1001"), "", decide(w.pending.ArgsHash, "ok"), "Mozilla/5.0", uint8(1), uint8(0))
	f.Add(start("fz-nul", "refund\x00x"), "", decide("x", ""), "curl/\xff", uint8(0), uint8(1))
	f.Add(start("fz-nul", "refund"), "", decide(w.pending.ArgsHash, "ok\x00"), "curl/\xff", uint8(2), uint8(0))
	f.Add([]byte(`{"goal":"g","limits":{"max_steps":4611686018427387904}}`), "..", decide(zeros, "a\x00"), "", uint8(1), uint8(2))
	f.Add([]byte(`{"run_id":"fz-note","plan":[{"tool":"add_order_note","args":{"order_id":"1001","text":"a\u0000b"}}]}`), "", []byte(`nope`), "", uint8(0), uint8(1))
	f.Add(start("fz-two", "g"), "fz-two", decide(zeros, ""), string(bytes.Repeat([]byte("a"), 511))+"é", uint8(0), uint8(1))
	f.Add([]byte(`{"run_id":"a","run_id":"b","goal":"g"}`), "r\u202e1", []byte(`{"args_hash":"`+zeros+`","args_hash":"`+zeros+`"}`), "", uint8(3), uint8(0x80))
	f.Fuzz(func(t *testing.T, startBody []byte, key string, decideBody []byte, agent string, who, target uint8) {
		id := testIdentities[int(who)%4]
		startedID := w.start(t, id, startBody, key)

		runID, step := w.pendingRun, int64(2)
		switch target % 3 {
		case 1:
			runID = startedID
		case 2:
			runID, step = key, int64(target/3%4)+1
		}
		verb := "approve"
		if target&0x80 != 0 {
			verb = "reject"
		}
		w.decide(t, id, runID, step, verb, decideBody, agent)
	})
}

// fuzzWorld is what FuzzApprovalsAPI's requests go to; each fuzzing
// process makes its own.
type fuzzWorld struct {
	e          *env
	a          *approvalsEnv
	http       *http.Client
	pendingRun string
	pending    workflows.Step
}

func newFuzzWorld(f *testing.F) *fuzzWorld {
	e := setup(f)
	// A logger through f would fail the fuzz target when the service logs
	// during an input.
	e.log = zap.NewNop()
	e.startWorker("fuzz", worker.Options{})
	a := e.serveApprovals(func(c *approvals.Config) {
		c.DBTimeout, c.QueryTimeout = fuzzDBTimeout, fuzzQueryTimeout
	})
	w := &fuzzWorld{e: e, a: a, http: &http.Client{Timeout: fuzzAnswerWithin}, pendingRun: e.id("fuzz-pending")}
	w.pending = a.startPending("ops", w.pendingRun)
	return w
}

// send sends a request as id and returns its status and body. A header
// whose value HTTP cannot carry (a control character) is left out: no
// client could send it.
func (w *fuzzWorld) send(t *testing.T, method, path string, id approvals.Identity, body []byte, headers ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, w.a.srv.URL+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+w.a.tokens[id.Name])
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		if headerValue(headers[i+1]) {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	resp, err := w.http.Do(req)
	require.NoError(t, err, "%s %s is answered within %s", method, path, fuzzAnswerWithin)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NotEqual(t, http.StatusInternalServerError, resp.StatusCode, "%s %s: %s", method, path, raw)
	return resp.StatusCode, raw
}

// start sends a start request; for a run it starts, it waits until the run
// settles and checks that no step reads pending without an approvals row.
// It returns the run id of a started run.
func (w *fuzzWorld) start(t *testing.T, id approvals.Identity, body []byte, key string) string {
	t.Helper()
	var headers []string
	if key != "" {
		headers = []string{"Idempotency-Key", key}
	}
	status, raw := w.send(t, http.MethodPost, "/v1/runs", id, body, headers...)
	if status != http.StatusCreated && status != http.StatusOK {
		return ""
	}
	var started approvals.StartResponse
	require.NoError(t, json.Unmarshal(raw, &started), "%s", raw)
	ctx := context.Background()
	var st workflows.Status
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var err error
		st, err = w.e.runs.Status(ctx, started.Tenant, started.RunID)
		over := time.Now().After(deadline)
		if over {
			require.NoError(t, err, "the status of run %q", started.RunID)
		}
		if err == nil && (st.State != workflows.RunRunning || over) {
			w.checkPending(t, started.Tenant, st)
			break
		}
	}
	if st.State == workflows.RunRunning || st.State == workflows.RunWaitingForApproval {
		// Keep the world small: the next input starts afresh.
		_ = w.e.tc.TerminateWorkflow(ctx, started.WorkflowID, "", "fuzz")
	}
	return started.RunID
}

// checkPending fails t if a step of the run reads pending while no
// approvals row lists it. A step reads pending for a moment before its row
// is written, so a run still running is given that moment first.
func (w *fuzzWorld) checkPending(t *testing.T, tenant string, st workflows.Status) {
	t.Helper()
	for _, s := range st.Steps {
		if s.State != workflows.StepPendingApproval {
			continue
		}
		rows := w.count(t, "approvals", "tenant = $1 AND run_id = $2 AND step = $3", tenant, st.RunID, s.Step)
		require.Equal(t, 1, rows, "run %q (%s) step %d reads pending but no approvals row lists it; error: %s",
			st.RunID, st.State, s.Step, st.Error)
	}
}

// decide sends a decision request and checks its audit rows.
func (w *fuzzWorld) decide(t *testing.T, id approvals.Identity, runID string, step int64, verb string, body []byte, agent string) {
	t.Helper()
	if runID == "" {
		runID = w.pendingRun
	}
	// Only a run id a key can hold can name a step; the count of one that
	// cannot is zero without asking (PostgreSQL would refuse it).
	exists, before := false, 0
	if _, err := keys.New(id.Tenant, runID, step, "tool"); err == nil {
		exists = w.count(t, "approvals", "tenant = $1 AND run_id = $2 AND step = $3", id.Tenant, runID, step) == 1
		before = w.count(t, "approval_decisions", "tenant = $1 AND run_id = $2 AND step = $3", id.Tenant, runID, step)
	}
	path := "/v1/runs/" + url.PathEscape(runID) + "/steps/" + strconv.FormatInt(step, 10) + "/" + verb
	status, raw := w.send(t, http.MethodPost, path, id, body, "User-Agent", agent)
	if !exists {
		require.Equal(t, http.StatusNotFound, status, "a decision on no step of %s: %s", id.Tenant, raw)
		return
	}
	after := w.count(t, "approval_decisions", "tenant = $1 AND run_id = $2 AND step = $3", id.Tenant, runID, step)
	require.Equal(t, before+1, after, "a decision request on step %d of run %q (answered %d: %s) leaves one audit row", step, runID, status, raw)
}

// headerValue reports whether HTTP can carry v as a header value: no
// control character but tab.
func headerValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func (w *fuzzWorld) count(t *testing.T, table, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, w.e.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table+" WHERE "+where, args...).Scan(&n))
	return n
}
