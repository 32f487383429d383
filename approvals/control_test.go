package approvals

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/approvalstest"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/workflows"
)

// errorOf decodes an error body.
func errorOf(t *testing.T, body string) ErrorDetail {
	t.Helper()
	var eb ErrorBody
	require.NoError(t, json.Unmarshal([]byte(body), &eb), body)
	return eb.Error
}

// TestCancelAPIWithdrawsTheRunsApprovals: an operator's cancel answers
// the run's state and receipt, withdraws the approval the run waited for
// at once (a decision after it is 409), and is audited; the same cancel
// again answers the same receipt.
func TestCancelAPIWithdrawsTheRunsApprovals(t *testing.T) {
	t.Parallel()
	e := setupAPI(t)
	hash := e.Pending("r1", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "", approvalstest.LookupStep(e.Now))

	status, _, body := e.Call("ops", http.MethodPost, "/v1/runs/r1/cancel", `{"reason": "wrong customer"}`)
	require.Equal(t, http.StatusOK, status, body)
	var res CancelResponse
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	assert.Equal(t, "acme", res.Tenant)
	assert.Equal(t, "r1", res.RunID)
	assert.Equal(t, workflows.RunCancelled, res.State)
	assert.Equal(t, "/v1/runs/r1", res.StatusURL)
	require.NotNil(t, res.Receipt)
	assert.Equal(t, "ops", res.Receipt.CancelledBy)
	assert.Equal(t, "wrong customer", res.Receipt.Reason)
	require.Len(t, res.Receipt.Steps, 2)
	assert.Equal(t, workflows.StepCancelled, res.Receipt.Steps[1].State)
	for _, field := range []string{`"tenant"`, `"run_id"`, `"state"`, `"receipt"`, `"status_url"`} {
		assert.Contains(t, body, field)
	}

	state, comment := e.ApprovalRow("r1", 2)
	assert.Equal(t, approvalstore.StateCancelled, state, "withdrawn at once, before the run records it")
	assert.Equal(t, "wrong customer", comment)

	status, _, body = e.Call("dana", http.MethodPost, "/v1/runs/r1/steps/2/approve", `{"args_hash": "`+hash+`"}`)
	assert.Equal(t, http.StatusConflict, status, body)
	detail := errorOf(t, body)
	assert.Equal(t, "approval_withdrawn", detail.Code)
	assert.Contains(t, detail.Message, "its approval was withdrawn because the run was cancelled by ops")
	assert.Contains(t, detail.Message, "(wrong customer)")
	assert.Empty(t, e.Temporal.Approvals(), "the run hears of no decision")

	status, _, again := e.Call("ops", http.MethodPost, "/v1/runs/r1/cancel", `{"reason": "again"}`)
	require.Equal(t, http.StatusOK, status, again)
	var res2 CancelResponse
	require.NoError(t, json.Unmarshal([]byte(again), &res2))
	assert.Equal(t, res.Receipt, res2.Receipt, "the first cancel's receipt")

	// Once the run has ended, its receipt still answers.
	e.Temporal.End("r1", workflows.RunCancelled)
	status, _, ended := e.Call("ops", http.MethodPost, "/v1/runs/r1/cancel", `{"reason": "and again"}`)
	require.Equal(t, http.StatusOK, status, ended)
	var res3 CancelResponse
	require.NoError(t, json.Unmarshal([]byte(ended), &res3))
	assert.Equal(t, res.Receipt, res3.Receipt)

	rows := e.Controls("acme", "r1")
	require.Len(t, rows, 3)
	assert.Equal(t, []string{approvalstore.ControlAccepted, "ops", "wrong customer", "1 pending approval withdrawn"},
		[]string{rows[0].Outcome, rows[0].Actor, rows[0].Reason, rows[0].Detail})
	assert.Equal(t, approvalstore.ControlRepeated, rows[1].Outcome)
	assert.Equal(t, approvalstore.ControlRepeated, rows[2].Outcome)
}

// TestPauseAndResumeAPI: a pause answers the pause in force, a resume
// null, each audited; a pause of a cancelled run is 409.
func TestPauseAndResumeAPI(t *testing.T) {
	t.Parallel()
	e := setupAPI(t)
	e.Running("r1", false, approvalstest.LookupStep(e.Now))

	status, _, body := e.Call("ops", http.MethodPost, "/v1/runs/r1/pause", `{"reason": "checking the stock"}`)
	require.Equal(t, http.StatusOK, status, body)
	var res PauseResponse
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	assert.Equal(t, workflows.RunPaused, res.State)
	require.NotNil(t, res.Paused)
	assert.Equal(t, "ops", res.Paused.By)
	assert.Equal(t, "checking the stock", res.Paused.Reason)

	status, _, body = e.Call("ops", http.MethodPost, "/v1/runs/r1/resume", "")
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `"paused": null`)
	assert.Contains(t, body, `"state": "running"`)

	status, _, body = e.Call("ops", http.MethodPost, "/v1/runs/r1/resume", "{}")
	require.Equal(t, http.StatusOK, status, body)

	_, _, _ = e.Call("ops", http.MethodPost, "/v1/runs/r1/cancel", `{"reason": "done with it"}`)
	status, _, body = e.Call("ops", http.MethodPost, "/v1/runs/r1/pause", "")
	assert.Equal(t, http.StatusConflict, status, body)
	detail := errorOf(t, body)
	assert.Equal(t, "run_refused", detail.Code)
	assert.Contains(t, detail.Message, "it can no longer be paused")

	var outcomes []string
	for _, r := range e.Controls("acme", "r1") {
		outcomes = append(outcomes, r.Action+" "+r.Outcome)
	}
	assert.Equal(t, []string{"pause accepted", "resume accepted", "resume repeated", "cancel accepted", "pause refused"}, outcomes)
}

// TestMessageAPI: a message is accepted once by its id, the same again
// answers its receipt with duplicate; a scripted run refuses it.
func TestMessageAPI(t *testing.T) {
	t.Parallel()
	e := setupAPI(t)
	e.Running("r1", false)
	e.Running("r-script", true)

	status, _, body := e.Call("ops", http.MethodPost, "/v1/runs/r1/messages", `{"message_id": "m1", "text": "the customer called back"}`)
	require.Equal(t, http.StatusOK, status, body)
	var res MessageResponse
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	assert.Equal(t, MessageResponse{Tenant: "acme", RunID: "r1", MessageID: "m1", Position: 1, AcceptedAt: res.AcceptedAt}, res)
	assert.False(t, res.AcceptedAt.IsZero())
	assert.Contains(t, body, `"duplicate": false`)

	status, _, body = e.Call("ops", http.MethodPost, "/v1/runs/r1/messages", `{"message_id": "m1", "text": "the customer called back"}`)
	require.Equal(t, http.StatusOK, status, body)
	var dup MessageResponse
	require.NoError(t, json.Unmarshal([]byte(body), &dup))
	assert.True(t, dup.Duplicate)
	assert.Equal(t, 1, dup.Position)

	status, _, body = e.Call("ops", http.MethodPost, "/v1/runs/r-script/messages", `{"message_id": "m1", "text": "hello"}`)
	assert.Equal(t, http.StatusConflict, status, body)
	assert.Contains(t, errorOf(t, body).Message, "follows a script")

	assert.Equal(t, []string{approvalstore.ControlAccepted, approvalstore.ControlRepeated},
		[]string{e.Controls("acme", "r1")[0].Outcome, e.Controls("acme", "r1")[1].Outcome})
	assert.Equal(t, approvalstore.ControlRefused, e.Controls("acme", "r-script")[0].Outcome)
}

// TestControlAPIRefusals: every endpoint answers 403 to a viewer and an
// approver, 404 for a run the tenant does not have, 400 naming the field,
// 409 for a run that has ended and 503 with Temporal out of reach; every
// request on a run of the tenant is audited, a forbidden one included,
// one on a run it does not have is not, and nothing refused reaches the
// run.
func TestControlAPIRefusals(t *testing.T) {
	t.Parallel()
	bad := map[string]string{
		"cancel":   `{"reason": "stop\u001b[2J"}`,
		"pause":    `{"reason": "stop\u001b[2J"}`,
		"resume":   `{"reason": "` + strings.Repeat("x", workflows.MaxReasonBytes+1) + `"}`,
		"messages": `{"message_id": "m1"}`,
	}
	badField := map[string]string{"cancel": "reason holds the control character U+001B", "pause": "reason holds the control character U+001B",
		"resume": "reason", "messages": "text is required"}
	good := map[string]string{"cancel": `{"reason": "wrong customer"}`, "pause": "", "resume": "", "messages": `{"message_id": "m1", "text": "hi"}`}
	for _, endpoint := range []string{"cancel", "pause", "resume", "messages"} {
		t.Run(endpoint, func(t *testing.T) {
			t.Parallel()
			e := setupAPI(t)
			e.Running("r1", false)
			e.Running("r-done", false)
			e.Temporal.End("r-done", workflows.RunCompleted)
			path := func(run string) string { return "/v1/runs/" + run + "/" + endpoint }

			for _, who := range []string{"vic", "dana"} {
				status, _, body := e.Call(who, http.MethodPost, path("r1"), good[endpoint])
				assert.Equal(t, http.StatusForbidden, status, body)
				assert.Contains(t, errorOf(t, body).Message, "takes an operator token")
			}
			status, _, body := e.Call("ops", http.MethodPost, path("r-unknown"), good[endpoint])
			assert.Equal(t, http.StatusNotFound, status, body)
			status, _, body = e.Call("omar", http.MethodPost, path("r1"), good[endpoint])
			assert.Equal(t, http.StatusNotFound, status, body, "another tenant's run")
			assert.Equal(t, `no run "r1"`, errorOf(t, body).Message)

			status, _, body = e.Call("ops", http.MethodPost, path("r1"), bad[endpoint])
			assert.Equal(t, http.StatusBadRequest, status, body)
			assert.Contains(t, errorOf(t, body).Message, badField[endpoint])
			status, _, body = e.Call("ops", http.MethodPost, path("r1"), `{"reason": "x", "Reason": "y"}`)
			assert.Equal(t, http.StatusBadRequest, status, body)
			status, _, body = e.Call("ops", http.MethodPost, path("r-unknown"), bad[endpoint])
			assert.Equal(t, http.StatusNotFound, status, "a run the tenant does not have, whatever the request says: %s", body)
			assert.Empty(t, e.Temporal.Sent(), "nothing malformed reached the run")

			status, _, body = e.Call("ops", http.MethodPost, path("r-done"), good[endpoint])
			assert.Equal(t, http.StatusConflict, status, body)
			assert.Equal(t, ErrorDetail{Code: "run_closed", Message: "run r-done has ended: it is completed"}, errorOf(t, body))

			e.Temporal.SetDown(true)
			status, h, body := e.Call("ops", http.MethodPost, path("r1"), good[endpoint])
			assert.Equal(t, http.StatusServiceUnavailable, status, body)
			assert.Equal(t, "2", h.Get("Retry-After"))
			assert.Equal(t, "unavailable", errorOf(t, body).Code)
			e.Temporal.SetDown(false)

			var got []string
			for _, r := range append(append(e.Controls("acme", "r-unknown"), e.Controls("globex", "r1")...), e.Controls("acme", "r1")...) {
				got = append(got, r.Outcome)
			}
			assert.Equal(t, []string{"forbidden", "forbidden", "invalid", "invalid", "unavailable"}, got)
			assert.Equal(t, []string{"vic", "dana"}, []string{e.Controls("acme", "r1")[0].Actor, e.Controls("acme", "r1")[1].Actor})
			assert.Equal(t, approvalstore.ControlRefused, e.Controls("acme", "r-done")[0].Outcome)
		})
	}
}

// TestCancelAPIRefusesABlankReason: a reason of spaces says no more than
// none: 400 naming the field, audited as invalid, and the run hears
// nothing.
func TestCancelAPIRefusesABlankReason(t *testing.T) {
	t.Parallel()
	e := setupAPI(t)
	e.Running("r1", false)
	for _, body := range []string{`{}`, `{"reason": ""}`, `{"reason": "   "}`, `{"reason": "\t\n"}`} {
		status, _, resp := e.Call("ops", http.MethodPost, "/v1/runs/r1/cancel", body)
		assert.Equal(t, http.StatusBadRequest, status, body)
		assert.Equal(t, ErrorDetail{Code: "invalid_request", Message: "reason is required: say why the run is cancelled"}, errorOf(t, resp), body)
	}
	assert.Empty(t, e.Temporal.Sent())
	rows := e.Controls("acme", "r1")
	require.Len(t, rows, 4)
	assert.Equal(t, approvalstore.ControlInvalid, rows[2].Outcome)
}

// TestRunStatusCarriesTheControls: GET /v1/runs/{run_id} answers the
// pause, the cancel and its receipt, the messages, and each step's turn
// and call id.
func TestRunStatusCarriesTheControls(t *testing.T) {
	t.Parallel()
	e := setupAPI(t)
	step := approvalstest.LookupStep(e.Now)
	step.Turn, step.CallID = 1, "call_1"
	e.Running("r1", false, step)
	_, _, _ = e.Call("ops", http.MethodPost, "/v1/runs/r1/pause", `{"reason": "hold on"}`)
	_, _, _ = e.Call("ops", http.MethodPost, "/v1/runs/r1/messages", `{"message_id": "m1", "text": "hi"}`)
	_, _, _ = e.Call("ops", http.MethodPost, "/v1/runs/r1/cancel", `{"reason": "stop"}`)

	status, _, body := e.Call("vic", http.MethodGet, "/v1/runs/r1", "")
	require.Equal(t, http.StatusOK, status, body)
	var raw map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(body), &raw))
	for _, field := range []string{"paused", "cancel", "receipt", "messages"} {
		assert.Contains(t, raw, field)
	}
	var st workflows.Status
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	assert.Equal(t, "hold on", st.Paused.Reason)
	assert.Equal(t, "stop", st.Cancel.Reason)
	assert.Equal(t, "m1", st.Messages[0].MessageID)
	assert.Equal(t, 1, st.Steps[0].Turn)
	assert.Equal(t, "call_1", st.Steps[0].CallID)
}

// TestClientControls: the API's Go client reaches each endpoint and
// decodes its answer; a refusal is an *APIError with the status.
func TestClientControls(t *testing.T) {
	t.Parallel()
	e := setupAPI(t)
	e.Running("r1", false)
	c := &Client{BaseURL: e.srv.URL, Token: e.Tokens["ops"]}
	ctx := context.Background()

	p, err := c.Pause(ctx, "r1", ControlRequest{Reason: "hold on"})
	require.NoError(t, err)
	assert.Equal(t, "hold on", p.Paused.Reason)
	p, err = c.Resume(ctx, "r1", ControlRequest{})
	require.NoError(t, err)
	assert.Nil(t, p.Paused)
	m, err := c.Message(ctx, "r1", MessageRequest{MessageID: "m1", Text: "hi"})
	require.NoError(t, err)
	assert.Equal(t, 1, m.Position)
	res, err := c.Cancel(ctx, "r1", ControlRequest{Reason: "stop"})
	require.NoError(t, err)
	assert.Equal(t, "stop", res.Receipt.Reason)

	_, err = c.Cancel(ctx, "r-unknown", ControlRequest{Reason: "stop"})
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, http.StatusNotFound, ae.Status)
}

// TestStartAPITakesParallel: limits.parallel reaches the run's input.
func TestStartAPITakesParallel(t *testing.T) {
	t.Parallel()
	e := setupAPI(t)
	s := &Server{cfg: Config{}.WithDefaults()}
	req, err := http.NewRequest(http.MethodPost, "/v1/runs", nil)
	require.NoError(t, err)
	in, err := s.runInput(req, Identity{Name: "ops", Tenant: "acme", Role: RoleOperator},
		StartRequest{RunID: "r1", Goal: "refund", Limits: &StartLimits{Parallel: 8}})
	require.NoError(t, err)
	assert.Equal(t, 8, in.Limits.Parallel)

	status, _, body := e.Call("ops", http.MethodPost, "/v1/runs", `{"run_id": "r2", "goal": "refund", "limits": {"parallel": 65}}`)
	assert.Equal(t, http.StatusBadRequest, status, body)
	assert.Contains(t, errorOf(t, body).Message, "limits.parallel 65 is not between 1 and 64")
}
