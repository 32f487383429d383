package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/payments"
	"github.com/oncerun/oncerun/workflows"
)

// refundOf is refund_payment's arguments for cents of payment.
func refundOf(payment string, cents int) string {
	return fmt.Sprintf(`{"order_id":"1001","payment_id":%q,"amount_cents":%d,"currency":"EUR","reason":"damaged"}`, payment, cents)
}

// canonicalHash is the args hash of raw's canonical JSON.
func canonicalHash(t *testing.T, raw string) string {
	t.Helper()
	c, err := keys.Canonicalize([]byte(raw))
	require.NoError(t, err)
	h, err := keys.ArgsHash(c)
	require.NoError(t, err)
	return h
}

// TestEditedRefundRunsOnceWithTheEditedAmount drives an edit the way an
// approver's client does, through the API: edits the tool refuses leave the
// step pending, a stale hash is a 409, and the accepted edit makes exactly
// one refund, of the edited amount, in the provider's own ledger; the audit
// row and the approvals row hold both hashes, and the run's status the
// lineage.
func TestEditedRefundRunsOnceWithTheEditedAmount(t *testing.T) {
	t.Parallel()
	w := setupExternal(t, 0)
	w.startWorker("w", worker.Options{})
	a := w.serveApprovals(nil)
	payment := w.pay("pay_"+w.id("edit"), 50000)
	run := w.id("edit")
	proposed := refundOf(payment, 25900)
	r := a.do(http.MethodPost, "/v1/runs", "ops", map[string]any{"run_id": run,
		"plan": []map[string]any{{"tool": payments.RefundPayment, "args": json.RawMessage(proposed)}}})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	w.waitFor("acme", run, "the refund's approval", func(s workflows.Status) bool { return s.State == workflows.RunWaitingForApproval })

	var list struct {
		Approvals []struct {
			RunID       string `json:"run_id"`
			ArgsHash    string `json:"args_hash"`
			SecondsLeft int64  `json:"seconds_left"`
			OnExpiry    string `json:"on_expiry"`
		} `json:"approvals"`
	}
	a.do(http.MethodGet, "/v1/approvals", "dana", nil).json(t, &list)
	require.Len(t, list.Approvals, 1)
	item := list.Approvals[0]
	assert.Equal(t, canonicalHash(t, proposed), item.ArgsHash)
	assert.Greater(t, item.SecondsLeft, int64(0))
	assert.Equal(t, "expire", item.OnExpiry)

	path := stepPath(run, 1, "edit")
	editBody := func(hash, args string) map[string]any {
		return map[string]any{"args_hash": hash, "args": json.RawMessage(args), "comment": "only the broken plate"}
	}
	a.expectError(a.do(http.MethodPost, path, "dana", editBody(item.ArgsHash, refundOf(payment, 30000))),
		http.StatusUnprocessableEntity, "edit_refused", "amount_cents may not increase")
	a.expectError(a.do(http.MethodPost, path, "dana", editBody(item.ArgsHash,
		`{"order_id":"1001","payment_id":"`+payment+`","amount_cents":"lots","currency":"EUR","reason":"damaged"}`)),
		http.StatusUnprocessableEntity, "edit_refused", "/amount_cents")
	a.expectError(a.do(http.MethodPost, path, "dana", editBody(canonicalHash(t, refundOf(payment, 1)), refundOf(payment, 100))),
		http.StatusConflict, "args_hash_mismatch")
	a.expectError(a.do(http.MethodPost, path, "vic", editBody(item.ArgsHash, refundOf(payment, 100))),
		http.StatusForbidden, "forbidden")
	st, err := w.runs.Status(context.Background(), "acme", run)
	require.NoError(t, err)
	require.Equal(t, workflows.StepPendingApproval, st.Steps[0].State, "refused edits leave the step pending")

	edited := refundOf(payment, 15000)
	editedHash := canonicalHash(t, edited)
	r = a.do(http.MethodPost, path, "dana", editBody(item.ArgsHash, edited))
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	var res struct {
		Decision struct {
			Decision       string `json:"decision"`
			ArgsHash       string `json:"args_hash"`
			EditedArgsHash string `json:"edited_args_hash"`
		} `json:"decision"`
	}
	r.json(t, &res)
	assert.Equal(t, "edit", res.Decision.Decision)
	assert.Equal(t, item.ArgsHash, res.Decision.ArgsHash)
	assert.Equal(t, editedHash, res.Decision.EditedArgsHash)
	again := a.do(http.MethodPost, path, "dana", editBody(item.ArgsHash, edited))
	assert.Equal(t, http.StatusOK, again.status, "the same edit again is a repeat: %s", again.body)

	st = w.result("acme", run)
	s := st.Steps[0]
	require.Equal(t, workflows.StepDone, s.State, s.Error)
	assert.Equal(t, editedHash, s.ArgsHash)
	require.NotNil(t, s.Edit)
	assert.Equal(t, item.ArgsHash, s.Edit.OriginalArgsHash)
	assert.Equal(t, editedHash, s.Edit.ArgsHash)
	assert.Equal(t, "dana", s.Edit.EditedBy)
	assert.Equal(t, "only the broken plate", s.Edit.Comment)

	ledger := w.refunds(payment)
	require.Len(t, ledger, 1, "one refund in the provider's ledger")
	assert.EqualValues(t, 15000, ledger[0].Amount, "of the edited amount")
	assert.Equal(t, stepKey(t, run, 1, payments.RefundPayment), ledger[0].IdempotencyKey)

	assert.Equal(t, 1, w.count("approval_decisions",
		"run_id = $1 AND decision = 'edit' AND outcome = 'accepted' AND args_hash = $2 AND edited_args_hash = $3",
		run, item.ArgsHash, editedHash), "the audit row holds both hashes")
	assert.Equal(t, 2, w.count("approval_decisions", "run_id = $1 AND decision = 'edit' AND outcome = 'invalid'", run))
	assert.Equal(t, 1, w.count("approvals", "run_id = $1 AND state = 'approved' AND args_hash = $2 AND edited_args_hash = $3",
		run, item.ArgsHash, editedHash))
	assert.Equal(t, 1, w.count("idempotency_keys", "key = $1 AND args_hash = $2",
		stepKey(t, run, 1, payments.RefundPayment), editedHash), "the key holds the hash of what ran")
}

// TestReplannedRefundIsADuplicate runs a plan that proposes the same refund
// twice, as a model that re-plans does: the second call is recorded as a
// duplicate of the first, with its result, and the provider's ledger shows
// one refund.
func TestReplannedRefundIsADuplicate(t *testing.T) {
	t.Parallel()
	w := setupExternal(t, 0)
	w.startWorker("w", worker.Options{})
	a := w.serveApprovals(nil)
	payment := w.pay("pay_"+w.id("dup"), 10000)
	run := w.id("dup")
	args := json.RawMessage(refundOf(payment, 2500))
	r := a.do(http.MethodPost, "/v1/runs", "ops", map[string]any{"run_id": run, "plan": []map[string]any{
		{"tool": payments.RefundPayment, "args": args},
		{"tool": "lookup_order", "args": map[string]any{"order_id": "1001"}},
		{"tool": payments.RefundPayment, "args": args},
	}})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))

	st := w.result("acme", run)
	require.Len(t, st.Steps, 3)
	assert.Equal(t, workflows.StepDone, st.Steps[0].State, st.Steps[0].Error)
	dup := st.Steps[2]
	assert.Equal(t, workflows.StepDuplicate, dup.State)
	assert.EqualValues(t, 1, dup.DuplicateOf)
	assert.JSONEq(t, string(st.Steps[0].Result), string(dup.Result))
	assert.Len(t, w.refunds(payment), 1, "one refund in the provider's ledger")
	assert.Equal(t, 0, w.count("idempotency_keys", "key = $1", stepKey(t, run, 3, payments.RefundPayment)),
		"the duplicate never claimed a key")
}

// TestCLIApprovesWithEditedArguments edits a pending credit with
// `oncerun approve --args FILE`, through the approvals service and
// directly, and reads the outcome from the credits table and `oncerun
// status`.
func TestCLIApprovesWithEditedArguments(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w", worker.Options{})
	a := e.serveApprovals(nil)
	argsFile := func(cents int) string {
		p := filepath.Join(t.TempDir(), "args.json")
		require.NoError(t, os.WriteFile(p, fmt.Appendf(nil,
			`{"order_id":"1001","reason":"damaged_in_transit","amount_cents":%d,"currency":"EUR"}`, cents), 0o600))
		return p
	}

	viaAPI := e.id("cli-edit-api")
	a.startPending("ops", viaAPI)
	out, err := a.oncerunVia("dana", "approve", "--run-id", viaAPI, "--step", "2", "--args", argsFile(30000))
	require.Error(t, err, out)
	assert.Contains(t, out+err.Error(), "amount_cents may not increase")
	out, err = a.oncerunVia("dana", "approve", "--run-id", viaAPI, "--step", "2", "--args", argsFile(12000),
		"--comment", "half the plate", "--json")
	require.NoError(t, err, out)
	var res struct {
		Decision struct {
			Decision       string `json:"decision"`
			EditedArgsHash string `json:"edited_args_hash"`
		} `json:"decision"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	assert.Equal(t, "edit", res.Decision.Decision)
	st := e.result("acme", viaAPI)
	assert.Equal(t, res.Decision.EditedArgsHash, st.Steps[1].ArgsHash)
	assert.Equal(t, 1, e.count("credits", "order_id = '1001' AND amount_cents = 12000 AND tenant = 'acme' AND reason = 'damaged_in_transit'"))
	out, err = a.oncerunVia("dana", "status", "--run-id", viaAPI)
	require.NoError(t, err, out)
	assert.Contains(t, out, "edited by dana")
	assert.Regexp(t, `proposed\s+\S+\s+\{.*"amount_cents":25900`, out)
	assert.Regexp(t, `ran\s+\S+\s+\{.*"amount_cents":12000`, out)
}

// TestCLIEditsDirectly edits with the database's and Temporal's
// credentials (no ONCERUN_API): the same checks, the same audit row.
func TestCLIEditsDirectly(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w", worker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("cli-edit-direct")
	a.startPending("ops", run)
	p := filepath.Join(t.TempDir(), "args.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"order_id":"1001","reason":"damaged_in_transit","amount_cents":"x","currency":"EUR"}`), 0o600))
	out, err := e.oncerun("approve", "--tenant", "acme", "--run-id", run, "--step", "2", "--args", p, "--as", "carol")
	require.Error(t, err, out)
	assert.Contains(t, err.Error(), "/amount_cents")
	require.NoError(t, os.WriteFile(p, []byte(`{"order_id":"1001","reason":"damaged_in_transit","amount_cents":9000,"currency":"EUR"}`), 0o600))
	out, err = e.oncerun("approve", "--tenant", "acme", "--run-id", run, "--step", "2", "--args", p, "--as", "carol")
	require.NoError(t, err, out)
	assert.Contains(t, out, "edited and approved step 2")
	e.result("acme", run)
	assert.Equal(t, 1, e.count("approval_decisions",
		"run_id = $1 AND decision = 'edit' AND outcome = 'accepted' AND via = 'cli' AND approver = 'carol' AND edited_args_hash <> ''", run))
	assert.Equal(t, 1, e.count("approval_decisions", "run_id = $1 AND decision = 'edit' AND outcome = 'invalid'", run))
}
