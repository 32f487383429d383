package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/sdkfake"
	"github.com/oncerun/oncerun/workflows"
)

// TestControlCommandsRefuseBadFlags: the flags are checked before
// anything is dialled or sent, in both modes, and the error names the
// flag.
func TestControlCommandsRefuseBadFlags(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusTeapot)
	}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a cancel without a reason", []string{"cancel", "r1"}, `required flag(s) "reason" not set`},
		{"an empty reason", []string{"cancel", "r1", "--reason", ""}, "--reason is required: say why the run is cancelled"},
		{"a reason of spaces", []string{"cancel", "r1", "--reason", " \t "}, "--reason is required: say why the run is cancelled"},
		{"a reason with an escape", []string{"pause", "r1", "--reason", "stop\x1b[2J"}, "--reason holds the control character U+001B"},
		{"a reason too long", []string{"resume", "r1", "--reason", strings.Repeat("x", workflows.MaxReasonBytes+1)}, "--reason"},
		{"a message without its id", []string{"message", "r1", "--text", "hi"}, `required flag(s) "id" not set`},
		{"an empty text", []string{"message", "r1", "--id", "m1", "--text", ""}, "--text is required"},
		{"an id with a NUL", []string{"message", "r1", "--id", "m\x001", "--text", "hi"}, "--id holds a NUL character"},
		{"no run id", []string{"pause"}, "give the run's id: oncerun pause RUN-ID (or --run-id RUN-ID)"},
		{"two run ids", []string{"pause", "r1", "--run-id", "r2"}, `the run id is given twice, as "r1" and as --run-id "r2"`},
		{"two arguments", []string{"pause", "r1", "r2"}, "accepts at most 1 arg(s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			_, err := run(t, unreachable, append(tc.args, "--tenant", "acme")...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want, "without ONCERUN_API")
			assert.Less(t, time.Since(start), 500*time.Millisecond, "refused before connecting")

			_, err = run(t, Env{APIURL: srv.URL, Token: "oncerun_x"}, tc.args...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want, "with ONCERUN_API")
		})
	}
	_, err := run(t, unreachable, "pause", "r1", "--tenant", "acme", "--as", "da\x1bna")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--as: by holds the control character U+001B")
	_, err = run(t, unreachable, "pause", "r1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "give --tenant T")
	assert.Zero(t, hits.Load(), "no refused command reached the service")
}

// controlServer is an approvals service that records what it was sent and
// answers with answer.
type controlServer struct {
	mu     sync.Mutex
	paths  []string
	bodies []string
}

func (c *controlServer) start(t *testing.T, answer func(path string) any) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.paths = append(c.paths, r.Method+" "+r.URL.Path)
		c.bodies = append(c.bodies, string(raw))
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(answer(r.URL.Path))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// receiptOf is a cancelled run r1's receipt with an unresolved step 3.
func receiptOf(at time.Time) *workflows.Receipt {
	unresolved := workflows.ReceiptStep{Step: 3, Tool: "refund_payment", Key: "v1/acme/r1/3/refund_payment",
		State: workflows.StepNeedsResolution, Ended: "unknown: whether its effect happened waits for a person's answer"}
	return &workflows.Receipt{State: workflows.RunCancelled, CancelledBy: "ops", CancelledAt: at, Reason: "wrong customer",
		Steps: []workflows.ReceiptStep{
			{Step: 1, Tool: "lookup_order", Key: "v1/acme/r1/1/lookup_order", State: workflows.StepDone, Ended: "done: its effect was applied once"},
			{Step: 2, Tool: "issue_credit", Key: "v1/acme/r1/2/issue_credit", State: workflows.StepCancelled, Ended: "cancelled: approval withdrawn"},
			unresolved,
		},
		Unresolved: []workflows.ReceiptStep{unresolved}}
}

// TestControlThroughTheAPI: with ONCERUN_API each command posts to its
// endpoint the body the service reads, and prints its answer; --tenant
// and --as are refused.
func TestControlThroughTheAPI(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var cs controlServer
	url := cs.start(t, func(path string) any {
		switch {
		case strings.HasSuffix(path, "/cancel"):
			return approvals.CancelResponse{Tenant: "acme", RunID: "r1", State: workflows.RunCancelled, Receipt: receiptOf(at), StatusURL: "/v1/runs/r1"}
		case strings.HasSuffix(path, "/pause"):
			return approvals.PauseResponse{Tenant: "acme", RunID: "r1", State: workflows.RunPaused,
				Paused: &workflows.ControlRecord{By: "ops", Reason: "checking", At: at}}
		case strings.HasSuffix(path, "/resume"):
			return approvals.PauseResponse{Tenant: "acme", RunID: "r1", State: workflows.RunRunning}
		}
		return approvals.MessageResponse{Tenant: "acme", RunID: "r1", MessageID: "m1", Position: 2, AcceptedAt: at}
	})
	env := Env{APIURL: url, Token: "oncerun_x"}

	out, err := run(t, env, "cancel", "r1", "--reason", "wrong customer")
	require.NoError(t, err, out)
	assert.Contains(t, out, "run r1 of tenant acme: cancelled\ncancelled by ops at 2026-12-01 09:00:00Z: wrong customer\n")
	assert.Regexp(t, `STEP +TOOL +STATE +HOW IT ENDED\n1 +lookup_order +done +done: its effect was applied once\n`, out)
	assert.Contains(t, out, "unresolved: step 3 (refund_payment, key v1/acme/r1/3/refund_payment) waits for a person's answer:\n"+
		"  oncerun resolve --tenant acme --run-id r1 --step 3 --outcome applied|not_applied\n")

	out, err = run(t, env, "pause", "--run-id", "r1", "--reason", "checking", "--json")
	require.NoError(t, err, out)
	var p approvals.PauseResponse
	require.NoError(t, json.Unmarshal([]byte(out), &p), out)
	assert.Equal(t, "checking", p.Paused.Reason)

	out, err = run(t, env, "resume", "r1")
	require.NoError(t, err, out)
	assert.Equal(t, "run r1 of tenant acme: running\n", out)

	out, err = run(t, env, "message", "r1", "--id", "m1", "--text", "the customer called back")
	require.NoError(t, err, out)
	assert.Equal(t, "run r1 accepted message m1 at position 2 at 2026-12-01 09:00:00Z; its planner reads it on its next turn\n", out)

	assert.Equal(t, []string{"POST /v1/runs/r1/cancel", "POST /v1/runs/r1/pause", "POST /v1/runs/r1/resume", "POST /v1/runs/r1/messages"}, cs.paths)
	assert.JSONEq(t, `{"reason":"wrong customer"}`, cs.bodies[0])
	assert.JSONEq(t, `{"reason":"checking"}`, cs.bodies[1])
	assert.JSONEq(t, `{}`, cs.bodies[2])
	assert.JSONEq(t, `{"message_id":"m1","text":"the customer called back"}`, cs.bodies[3])

	for _, flag := range []string{"--tenant", "--as"} {
		_, err := run(t, env, "pause", "r1", flag, "x")
		require.Error(t, err)
		assert.Contains(t, err.Error(), flag+" with ONCERUN_API set")
	}
}

// TestCancelDirect: without ONCERUN_API, cancel sends the run its update
// as --as (default $USER), withdraws the approval the run withdrew and
// records the request, and prints the receipt; --json prints what the
// service would answer.
func TestCancelDirect(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	conn := pgtest.Connect(t, db)
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	require.NoError(t, approvalstore.RecordPending(ctx, conn, approvalstore.Request{
		Tenant: "acme", RunID: "r1", Step: 2, Tool: "issue_credit", Args: json.RawMessage(`{}`),
		ArgsHash: strings.Repeat("a", 64), RequestedAt: at, Deadline: at.Add(time.Hour),
	}))
	before := workflows.Status{Tenant: "acme", RunID: "r1", State: workflows.RunWaitingForApproval, Steps: []workflows.Step{
		{Step: 2, Tool: "issue_credit", State: workflows.StepPendingApproval, Approval: &workflows.StepApproval{Reason: "amount"}}}}
	after := before
	after.State, after.Receipt = workflows.RunCancelled, receiptOf(at)
	after.Cancel = &workflows.ControlRecord{By: "dana", Reason: "wrong customer", At: at}
	after.Steps = []workflows.Step{{Step: 2, Tool: "issue_credit", State: workflows.StepCancelled, Approval: &workflows.StepApproval{Reason: "amount"}}}

	tc := &mocks.Client{}
	wid := workflows.WorkflowID("acme", "r1")
	tc.On("QueryWorkflow", mock.Anything, wid, "", workflows.QueryStatus).Return(sdkfake.Value{V: before}, nil).Once()
	tc.On("UpdateWorkflow", mock.Anything, mock.MatchedBy(func(o client.UpdateWorkflowOptions) bool {
		return o.WorkflowID == wid && o.UpdateName == workflows.UpdateCancel &&
			o.Args[0] == workflows.Control{By: "dana", Reason: "wrong customer"}
	})).Return(sdkfake.Update{V: after}, nil).Twice()
	tc.On("QueryWorkflow", mock.Anything, wid, "", workflows.QueryStatus).Return(sdkfake.Value{V: after}, nil).Once()
	env := Env{Temporal: tc, DatabaseURL: db.URL, User: "dana"}

	out, err := run(t, env, "cancel", "r1", "--tenant", "acme", "--reason", "wrong customer")
	require.NoError(t, err, out)
	assert.Contains(t, out, "run r1 of tenant acme: cancelled\n1 pending approval withdrawn\ncancelled by ops at")
	assert.Contains(t, out, "unresolved: step 3")
	var state, by string
	require.NoError(t, conn.QueryRow(ctx, `SELECT state, decided_by FROM approvals WHERE run_id = 'r1' AND step = 2`).Scan(&state, &by))
	assert.Equal(t, []string{"cancelled", "dana"}, []string{state, by})

	out, err = run(t, env, "cancel", "r1", "--tenant", "acme", "--reason", "wrong customer", "--json")
	require.NoError(t, err, out)
	var res approvals.CancelResponse
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	assert.Equal(t, workflows.RunCancelled, res.State)
	assert.Equal(t, "wrong customer", res.Receipt.Reason)

	rows, err := approvalstore.RunControls(ctx, conn, "acme", "r1")
	require.NoError(t, err)
	require.Len(t, rows, 2)
	assert.Equal(t, []string{"dana", approvalstore.ControlAccepted}, []string{rows[0].Actor, rows[0].Outcome})
	assert.Equal(t, approvalstore.ControlRepeated, rows[1].Outcome)
	tc.AssertExpectations(t)
}

// TestStatusPrintsTheReceiptAndThePause: status says who paused a run and
// prints a cancelled run's receipt; --json carries both.
func TestStatusPrintsTheReceiptAndThePause(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	st := workflows.Status{Tenant: "acme", RunID: "r1", Planner: "openai", State: workflows.RunCancelled,
		Paused:  &workflows.ControlRecord{By: "vic", Reason: "checking", At: at},
		Cancel:  &workflows.ControlRecord{By: "ops", Reason: "wrong customer", At: at},
		Receipt: receiptOf(at),
		Steps:   []workflows.Step{{Step: 1, Tool: "lookup_order", State: workflows.StepDone, ArgsHash: strings.Repeat("a", 64), Turn: 1}}}
	var cs controlServer
	env := Env{APIURL: cs.start(t, func(string) any { return st }), Token: "oncerun_x"}

	out, err := run(t, env, "status", "--run-id", "r1")
	require.NoError(t, err, out)
	assert.Contains(t, out, "paused by vic at 2026-12-01 09:00:00Z: checking (it starts no step until it is resumed)\n")
	assert.Contains(t, out, "\nreceipt:\ncancelled by ops at 2026-12-01 09:00:00Z: wrong customer\n")
	assert.Regexp(t, `2 +issue_credit +cancelled +cancelled: approval withdrawn\n`, out)
	assert.Contains(t, out, "unresolved: step 3 (refund_payment")

	out, err = run(t, env, "status", "--run-id", "r1", "--json")
	require.NoError(t, err, out)
	var got workflows.Status
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	assert.Equal(t, st.Receipt, got.Receipt)
	assert.Equal(t, "vic", got.Paused.By)
	assert.Equal(t, 1, got.Steps[0].Turn)
}

// TestStartTakesParallel: --parallel reaches the run's limits, through
// the API as limits.parallel.
func TestStartTakesParallel(t *testing.T) {
	t.Parallel()
	var cs controlServer
	env := Env{APIURL: cs.start(t, func(string) any { return approvals.StartResponse{RunID: "r1"} }), Token: "oncerun_x"}
	out, err := run(t, env, "start", "--run-id", "r1", "--goal", "refund order 1001", "--parallel", "8")
	require.NoError(t, err, out)
	require.Len(t, cs.bodies, 1)
	assert.JSONEq(t, `{"run_id":"r1","goal":"refund order 1001","limits":{"parallel":8}}`, cs.bodies[0])

	_, err = run(t, unreachable, "start", "--tenant", "acme", "--run-id", "r1", "--goal", "refund", "--parallel", "65")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "limits.parallel 65 is not between 1 and 64")
}

// TestPauseAndMessageDirect: without ONCERUN_API, pause and message send
// the run their updates as $USER and say what the run answered.
func TestPauseAndMessageDirect(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	running := workflows.Status{Tenant: "acme", RunID: "r1", State: workflows.RunRunning}
	paused := running
	paused.State, paused.Paused = workflows.RunPaused, &workflows.ControlRecord{By: "dana", Reason: "checking", At: at}
	tc := &mocks.Client{}
	wid := workflows.WorkflowID("acme", "r1")
	tc.On("QueryWorkflow", mock.Anything, wid, "", workflows.QueryStatus).Return(sdkfake.Value{V: running}, nil).Once()
	tc.On("UpdateWorkflow", mock.Anything, mock.MatchedBy(func(o client.UpdateWorkflowOptions) bool {
		return o.UpdateName == workflows.UpdatePause && o.Args[0] == workflows.Control{By: "dana", Reason: "checking"}
	})).Return(sdkfake.Update{V: paused}, nil).Once()
	tc.On("UpdateWorkflow", mock.Anything, mock.MatchedBy(func(o client.UpdateWorkflowOptions) bool {
		return o.UpdateName == workflows.UpdateMessage && o.Args[0] == workflows.Message{MessageID: "m1", Text: "hi", By: "dana"}
	})).Return(sdkfake.Update{V: workflows.MessageReceipt{MessageID: "m1", Position: 1, AcceptedAt: at, Duplicate: true}}, nil).Once()
	env := Env{Temporal: tc, DatabaseURL: db.URL, User: "dana"}

	out, err := run(t, env, "pause", "r1", "--tenant", "acme", "--reason", "checking")
	require.NoError(t, err, out)
	assert.Equal(t, "run r1 of tenant acme: paused\npaused by dana at 2026-12-01 09:00:00Z: checking (it starts no step until it is resumed)\n", out)
	out, err = run(t, env, "message", "r1", "--tenant", "acme", "--id", "m1", "--text", "hi")
	require.NoError(t, err, out)
	assert.Equal(t, "run r1 had accepted message m1 already, at position 1 at 2026-12-01 09:00:00Z; nothing changed\n", out)

	rows, err := approvalstore.RunControls(context.Background(), pgtest.Connect(t, db), "acme", "r1")
	require.NoError(t, err)
	require.Len(t, rows, 2)
	assert.Equal(t, []string{"pause accepted", "message repeated"}, []string{rows[0].Action + " " + rows[0].Outcome, rows[1].Action + " " + rows[1].Outcome})
	tc.AssertExpectations(t)
}

// TestApprovalsListSaysAWithdrawnStepWasCancelled: the decided list
// prints a withdrawn approval's state with its words.
func TestApprovalsListSaysAWithdrawnStepWasCancelled(t *testing.T) {
	t.Parallel()
	var cs controlServer
	env := Env{APIURL: cs.start(t, func(string) any {
		return approvals.ApprovalList{State: "decided", Approvals: []approvals.Item{{Kind: approvals.KindApproval, RunID: "r1", Step: 2,
			Tool: "issue_credit", Args: json.RawMessage(`{}`), State: "cancelled",
			Withdrawn: "withdrawn: the run was cancelled by ops at 2026-12-01T09:00:00Z (wrong customer) before anyone decided; the step never ran"}}}
	}), Token: "oncerun_x"}
	out, err := run(t, env, "approvals", "--state", "decided")
	require.NoError(t, err, out)
	assert.Regexp(t, `cancelled +- +- +withdrawn: the run was cancelled by ops at 2026-12-01T09:00:00Z \(wrong customer\)…\n$`, out,
		"the problem goes last, cut to a line")
	out, err = run(t, env, "approvals", "--state", "decided", "--wide")
	require.NoError(t, err, out)
	assert.Contains(t, out, "(wrong customer) before anyone decided; the step never ran\n", "--wide prints it whole")
}

// TestApprovalsListKeepsEachStepOnOneLine: the arguments are cut to 80
// bytes unless --wide, and a long problem paragraph stays on the line's
// end, after the columns.
func TestApprovalsListKeepsEachStepOnOneLine(t *testing.T) {
	t.Parallel()
	args := `{"order_id":"1001","reason":"the parcel arrived damaged and the customer sent photos","amount_cents":25900,"currency":"EUR"}`
	problem := strings.Repeat("the provider answered something oncerun could not read; ", 16)
	var cs controlServer
	env := Env{APIURL: cs.start(t, func(string) any {
		return approvals.ApprovalList{State: "needs_resolution", Approvals: []approvals.Item{{Kind: approvals.KindApproval, RunID: "r1",
			Step: 3, Tool: "issue_credit", Args: json.RawMessage(args), State: "approved", Problem: problem,
			Amounts: []approvals.Money{{Field: "amount_cents", Minor: 25900, Currency: "EUR", Text: "259.00 EUR"}}}}}
	}), Token: "oncerun_x"}
	out, err := run(t, env, "approvals", "--state", "needs_resolution")
	require.NoError(t, err, out)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 2, out)
	assert.Less(t, len(lines[1]), 300, "one readable line")
	assert.NotContains(t, lines[1], "25900")
	assert.Regexp(t, `^r1 +3 +issue_credit +approval +259\.00 EUR +\{`, lines[1], "the amount is seen as money, in its own column")
	header := strings.Fields(lines[0])
	assert.Equal(t, "PROBLEM", header[len(header)-1])

	out, err = run(t, env, "approvals", "--state", "needs_resolution", "--wide")
	require.NoError(t, err, out)
	assert.Contains(t, out, `"amount_cents":25900`)
	assert.Contains(t, out, strings.TrimSpace(problem))
}

// TestApprovalsDirectShowsDeclaredAmountsAsMoney: without the service the
// CLI reads the amounts as the deployment's registry declares them.
func TestApprovalsDirectShowsDeclaredAmountsAsMoney(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	now := time.Now()
	require.NoError(t, approvalstore.RecordPending(context.Background(), pgtest.Connect(t, db), approvalstore.Request{
		Tenant: "acme", RunID: "r1", Step: 3, Tool: "issue_credit", Reason: "amount_cents above 10000",
		Args:     json.RawMessage(`{"order_id":"1001","reason":"the parcel arrived damaged and the customer sent photos","amount_cents":25900,"currency":"EUR"}`),
		ArgsHash: strings.Repeat("a", 64), RequestedAt: now, Deadline: now.Add(time.Hour),
	}))
	out, err := run(t, Env{Temporal: &mocks.Client{}, DatabaseURL: db.URL}, "approvals", "--tenant", "acme")
	require.NoError(t, err, out)
	assert.Regexp(t, `\nacme +r1 +3 +issue_credit +rule +259\.00 EUR +\{`, out)
}

// TestDecisionsOnARunTheDatabaseDoesNotHoldNameTheDatabase: the run
// exists in Temporal and its step waits, but DATABASE_URL is another
// database: approve and resolve say so, naming the database without its
// password, instead of "no step waiting".
func TestDecisionsOnARunTheDatabaseDoesNotHoldNameTheDatabase(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	now := time.Now()
	tc := &mocks.Client{}
	tc.On("QueryWorkflow", mock.Anything, workflows.WorkflowID("acme", "r6"), "", workflows.QueryStatus).Return(
		sdkfake.Value{V: workflows.Status{Tenant: "acme", RunID: "r6", State: workflows.RunWaitingForApproval, Steps: []workflows.Step{
			{Step: 1, Tool: "issue_credit", ArgsHash: strings.Repeat("a", 64), State: workflows.StepPendingApproval,
				Approval: &workflows.StepApproval{Reason: "amount_cents above 10000", RequestedAt: now, Deadline: now.Add(time.Hour)}},
			{Step: 2, Tool: "refund_payment", ArgsHash: strings.Repeat("b", 64), State: workflows.StepNeedsResolution,
				Resolution: &workflows.StepResolution{Round: 1, Known: "timeout", FirstSentAt: now, RequestedAt: now}},
		}}}, nil)
	env := Env{Temporal: tc, DatabaseURL: strings.Replace(db.URL, "postgres://postgres@", "postgres://postgres:s3cret@", 1), User: "dana"}

	out, err := run(t, env, "approve", "--tenant", "acme", "--run-id", "r6", "--step", "1")
	require.Error(t, err, out)
	assert.Contains(t, err.Error(), "run r6 exists in Temporal, and its step 1 waits for approval, but the database at")
	assert.Contains(t, err.Error(), "does not hold the run: set DATABASE_URL to the database its workers use")
	assert.NotContains(t, err.Error(), "s3cret", "the password is never shown")

	out, err = run(t, env, "resolve", "--tenant", "acme", "--run-id", "r6", "--step", "2", "--outcome", "not_applied")
	require.Error(t, err, out)
	assert.Contains(t, err.Error(), "its step 2 needs resolution, but the database at")
}
