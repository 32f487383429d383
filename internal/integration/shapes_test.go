package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// startModelRun starts a run of the openai planner through the API as ops
// of tenant acme.
func (a *approvalsEnv) startModelRun(runID, goal string) {
	a.t.Helper()
	r := a.do(http.MethodPost, "/v1/runs", "ops", map[string]any{"run_id": runID, "goal": goal, "planner": "openai"})
	require.Equal(a.t, http.StatusCreated, r.status, "body: %s", r.body)
}

func TestParallelTurnDecidedByConcurrentRequestsInAnyOrder(t *testing.T) {
	t.Parallel()
	e := setup(t)
	note := modelCall{ID: "call_note_b", Tool: "add_order_note", Args: map[string]any{"order_id": "1001", "text": "credit promised"}}
	model := e.serveModel(func(n int, _ modelRequest) []modelCall {
		if n > 1 {
			return nil
		}
		var calls []modelCall
		for i := range 10 {
			calls = append(calls, creditCall(fmt.Sprintf("call_%02d", i), reasonOf(i)))
		}
		// Two identical keyed calls of one turn: one effect.
		first := note
		first.ID = "call_note_a"
		return append(calls, first, note)
	})
	e.startWorker("w1", sdkworker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("parallel")
	a.startModelRun(run, "make good on order 1001")

	st := e.waitFor("acme", run, "ten approvals asked together", func(s workflows.Status) bool {
		n := 0
		for _, step := range s.Steps {
			if step.State == workflows.StepPendingApproval {
				n++
			}
		}
		return n == 10 && e.count("approvals", "tenant = 'acme' AND run_id = $1 AND state = 'pending'", run) == 10
	})
	require.Len(t, st.Steps, 12)
	for i, s := range st.Steps {
		assert.Equal(t, int64(i+1), s.Step)
		assert.Equal(t, 1, s.Turn, "one turn")
	}
	// The ten cards are in the inbox at once.
	var list struct {
		Approvals []approvals.Item `json:"approvals"`
	}
	a.do(http.MethodGet, "/v1/approvals", "dana", nil).json(t, &list)
	assert.Len(t, list.Approvals, 10)

	// Ten decisions at once, in a random order: even steps approved, odd
	// rejected, each comment naming its step.
	var wg sync.WaitGroup
	codes := make([]int, 10)
	for _, i := range rand.Perm(10) {
		s := st.Steps[i]
		verb := "approve"
		if i%2 == 1 {
			verb = "reject"
		}
		wg.Go(func() {
			r := a.do(http.MethodPost, stepPath(run, s.Step, verb), "dana",
				approvals.DecideRequest{ArgsHash: s.ArgsHash, Comment: fmt.Sprintf("for step %d", s.Step)})
			codes[i] = r.status
		})
	}
	wg.Wait()
	for i, c := range codes {
		assert.Equal(t, http.StatusAccepted, c, "decision on step %d", i+1)
	}

	final := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, final.State, "error: %s", final.Error)
	for i := range 10 {
		s := final.Steps[i]
		require.NotNil(t, s.Approval)
		assert.Equal(t, fmt.Sprintf("for step %d", s.Step), s.Approval.Comment, "each decision on its own step")
		want := workflows.StepDone
		if i%2 == 1 {
			want = workflows.StepRejected
		}
		assert.Equal(t, want, s.State, "step %d", s.Step)
		assert.Equal(t, map[bool]int{true: 1, false: 0}[i%2 == 0],
			e.count("credits", "tenant = 'acme' AND order_id = '1001' AND reason = $1", reasonOf(i)), "credit of step %d", s.Step)
		assert.Equal(t, 1, e.count("approvals", "tenant = 'acme' AND run_id = $1 AND step = $2 AND comment = $3",
			run, s.Step, fmt.Sprintf("for step %d", s.Step)))
	}
	assert.Equal(t, 5, e.count("credits", "tenant = 'acme' AND order_id = '1001' AND reason LIKE 'goodwill-%'"))
	assert.Equal(t, workflows.StepDone, final.Steps[10].State)
	assert.Equal(t, workflows.StepDuplicate, final.Steps[11].State)
	assert.Equal(t, 1, e.count("order_notes", "tenant = 'acme' AND order_id = '1001' AND body = 'credit promised'"), "one note")

	// The model's next turn got one answer of its own carrying its twelve
	// calls with the ids it gave, and one tool message per call, in the
	// order proposed.
	reqs := model.seen()
	require.Len(t, reqs, 2)
	msgs := reqs[1].Messages
	require.Len(t, msgs, 2+1+12)
	require.Len(t, msgs[2].ToolCalls, 12)
	for i, tc := range msgs[2].ToolCalls {
		want := fmt.Sprintf("call_%02d", i)
		switch i {
		case 10:
			want = "call_note_a"
		case 11:
			want = "call_note_b"
		}
		assert.Equal(t, want, tc.ID)
		assert.Equal(t, "tool", msgs[3+i].Role)
		assert.Equal(t, want, msgs[3+i].ToolCallID)
	}
}

func TestFiftyMessagesSentWhileATurnRunsEachAppearOnceInOrder(t *testing.T) {
	t.Parallel()
	e := setup(t)
	release := make(chan struct{})
	model := e.serveModel(func(n int, _ modelRequest) []modelCall {
		switch n {
		case 1:
			// The turn runs until every message has been sent.
			<-release
			return []modelCall{{ID: "call_1", Tool: "lookup_order", Args: map[string]any{"order_id": "1001"}}}
		}
		return nil
	})
	e.startWorker("w1", sdkworker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("messages")
	a.startModelRun(run, "look order 1001 up")
	waitForRequests(t, model, 1)

	type receipt struct {
		MessageID string `json:"message_id"`
		Position  int    `json:"position"`
		Duplicate bool   `json:"duplicate"`
	}
	receipts := make([]receipt, 50)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			r := a.do(http.MethodPost, "/v1/runs/"+run+"/messages", "ops",
				map[string]any{"message_id": fmt.Sprintf("m-%02d", i), "text": fmt.Sprintf("note %02d", i)})
			if assert.Equal(t, http.StatusOK, r.status, "body: %s", r.body) {
				r.json(t, &receipts[i])
			}
		})
	}
	wg.Wait()
	// A repeat is the same message, not a new one.
	var again receipt
	r := a.do(http.MethodPost, "/v1/runs/"+run+"/messages", "ops", map[string]any{"message_id": "m-07", "text": "note 07"})
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	r.json(t, &again)
	assert.True(t, again.Duplicate)
	assert.Equal(t, receipts[7].Position, again.Position)
	close(release)

	final := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, final.State, "error: %s", final.Error)
	// In the order accepted: message i's text at its position.
	byPosition := make([]string, 50)
	for i, rc := range receipts {
		require.True(t, rc.Position >= 1 && rc.Position <= 50, "message %d: position %d", i, rc.Position)
		require.Empty(t, byPosition[rc.Position-1], "two messages at position %d", rc.Position)
		byPosition[rc.Position-1] = fmt.Sprintf("note %02d", i)
	}
	reqs := model.seen()
	require.Len(t, reqs, 2)
	assert.Equal(t, byPosition, reqs[1].userMessages(), "each message once, in the order accepted")
	require.Len(t, final.Messages, 50)
}

func TestScriptedRunRefusesMessagesAndOtherTenantsSeeNoRun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", sdkworker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("scripted")
	a.startPending("ops", run)
	body := map[string]any{"message_id": "m-1", "text": "hello"}
	a.expectError(a.do(http.MethodPost, "/v1/runs/"+run+"/messages", "ops", body), http.StatusConflict, "run_refused", "script")
	for _, path := range []string{"/messages", "/cancel", "/pause", "/resume"} {
		body := body
		if path != "/messages" {
			body = map[string]any{"reason": "because"}
		}
		r := a.do(http.MethodPost, "/v1/runs/"+run+path, "gops", body)
		assert.Equal(t, http.StatusNotFound, r.status, "%s by another tenant: %s", path, r.body)
		r = a.do(http.MethodPost, "/v1/runs/"+run+path, "vic", body)
		assert.Equal(t, http.StatusForbidden, r.status, "%s by a viewer: %s", path, r.body)
	}
}

// slowTool is a read tool that calls out (an activity, not a local one)
// whose calls wait until release is closed.
func slowTool(release <-chan struct{}) tools.Tool {
	return tools.Tool{
		Name: "slow_check", Description: "Check an order with a slow service.", Class: tools.ClassRead,
		Schema: json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`),
		Run: func(ctx context.Context, _ tools.Call) (any, error) {
			select {
			case <-release:
				return map[string]any{"checked": true}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	}
}

func TestCancelWithAStepInFlightEndsCancelledWithAReceipt(t *testing.T) {
	t.Parallel()
	e := setup(t)
	release := make(chan struct{})
	e.tools = append(e.tools, slowTool(release))
	model := e.serveModel(func(n int, _ modelRequest) []modelCall {
		return []modelCall{
			{ID: "call_check", Tool: "slow_check", Args: map[string]any{"order_id": "1001"}},
			creditCall("call_credit", "late"),
		}
	})
	e.startWorker("w1", sdkworker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("cancel")
	a.startModelRun(run, "tag and credit order 1001")
	st := e.waitFor("acme", run, "the credit's approval", func(s workflows.Status) bool {
		return len(s.Steps) == 2 && s.Steps[1].State == workflows.StepPendingApproval && s.State == workflows.RunWaitingForApproval
	})

	type cancelled struct {
		State   workflows.RunState `json:"state"`
		Receipt *workflows.Receipt `json:"receipt"`
	}
	var c cancelled
	r := a.do(http.MethodPost, "/v1/runs/"+run+"/cancel", "ops", map[string]any{"reason": "the customer withdrew"})
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	r.json(t, &c)
	assert.Equal(t, workflows.RunCancelling, c.State, "step 1 still runs")
	require.NotNil(t, c.Receipt)
	assert.Equal(t, "ops", c.Receipt.CancelledBy)
	assert.Equal(t, []int64{1}, c.Receipt.InFlight)
	// The approval is withdrawn: a decision now is refused.
	r = a.do(http.MethodPost, stepPath(run, 2, "approve"), "dana", approvals.DecideRequest{ArgsHash: st.Steps[1].ArgsHash})
	assert.Equal(t, http.StatusConflict, r.status, "body: %s", r.body)
	assert.Equal(t, 1, e.count("approvals", "tenant = 'acme' AND run_id = $1 AND step = 2 AND state = 'cancelled'", run))

	close(release)
	final := e.result("acme", run)
	assert.Equal(t, workflows.RunCancelled, final.State)
	assert.Equal(t, []workflows.StepState{workflows.StepDone, workflows.StepCancelled},
		[]workflows.StepState{final.Steps[0].State, final.Steps[1].State})
	assert.Equal(t, 0, e.count("credits", "tenant = 'acme' AND order_id = '1001' AND reason = 'late'"))
	assert.Len(t, model.seen(), 1, "no planner asked after the cancel")

	// Again: 200, the same receipt, now final.
	var again cancelled
	r = a.do(http.MethodPost, "/v1/runs/"+run+"/cancel", "ops", map[string]any{"reason": "again"})
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	r.json(t, &again)
	assert.Equal(t, workflows.RunCancelled, again.State)
	require.NotNil(t, again.Receipt)
	assert.Equal(t, "the customer withdrew", again.Receipt.Reason)
	assert.Equal(t, c.Receipt.CancelledAt, again.Receipt.CancelledAt)
	require.Len(t, again.Receipt.Steps, 2)
	assert.Empty(t, again.Receipt.InFlight)
	// Pausing or messaging it is refused, naming its state.
	a.expectError(a.do(http.MethodPost, "/v1/runs/"+run+"/pause", "ops", map[string]any{}), http.StatusConflict, "run_closed", "cancelled")
	a.expectError(a.do(http.MethodPost, "/v1/runs/"+run+"/messages", "ops", map[string]any{"message_id": "m", "text": "t"}),
		http.StatusConflict, "run_closed", "cancelled")
}

func TestPausedRunTakesDecisionsAndCarriesThemOutOnResume(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.serveModel(func(n int, _ modelRequest) []modelCall {
		if n == 1 {
			return []modelCall{creditCall("call_1", "paused")}
		}
		return nil
	})
	e.startWorker("w1", sdkworker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("pause")
	a.startModelRun(run, "credit order 1001")
	st := e.waitFor("acme", run, "the credit's approval", func(s workflows.Status) bool {
		return len(s.Steps) == 1 && s.Steps[0].State == workflows.StepPendingApproval && s.State == workflows.RunWaitingForApproval
	})
	r := a.do(http.MethodPost, "/v1/runs/"+run+"/pause", "ops", map[string]any{"reason": "audit"})
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	r = a.do(http.MethodPost, stepPath(run, 1, "approve"), "dana", approvals.DecideRequest{ArgsHash: st.Steps[0].ArgsHash})
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
	paused := e.waitFor("acme", run, "the approval applied", func(s workflows.Status) bool {
		return s.Steps[0].State == workflows.StepApproved
	})
	assert.Equal(t, workflows.RunPaused, paused.State)
	time.Sleep(500 * time.Millisecond)
	assert.Equal(t, 0, e.count("credits", "tenant = 'acme' AND reason = 'paused'"), "nothing runs while paused")

	r = a.do(http.MethodPost, "/v1/runs/"+run+"/resume", "ops", map[string]any{})
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	final := e.result("acme", run)
	assert.Equal(t, workflows.RunCompleted, final.State)
	assert.Equal(t, workflows.StepDone, final.Steps[0].State)
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND reason = 'paused'"))
}

// waitForRequests waits until the model has been asked n times.
func waitForRequests(t *testing.T, m *fakeModel, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for len(m.seen()) < n {
		require.True(t, time.Now().Before(deadline), "the model was asked %d times, not %d", len(m.seen()), n)
		time.Sleep(20 * time.Millisecond)
	}
}
