package workflows

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/tools"
)

// refundSchema is the schema of the test registry's refund tools.
const refundSchema = `{"type":"object","properties":{
	"order_id":{"type":"string"},
	"amount_cents":{"type":"integer","minimum":1},
	"currency":{"type":"string","pattern":"^[A-Z]{3}$"}},
	"required":["order_id","amount_cents","currency"],"additionalProperties":false}`

// editRegistry holds refund (edits may lower the amount, never raise it),
// refund_any (any edit) and refund_fixed (no edits).
func editRegistry(t *testing.T) *tools.Registry {
	t.Helper()
	run := func(context.Context, tools.Call) (any, error) { return map[string]bool{"ok": true}, nil }
	amounts := []tools.Amount{{Field: "amount_cents", Currency: "currency"}}
	reg, err := tools.NewRegistry(tools.RegistryConfig{},
		tools.Tool{Name: "refund", Schema: json.RawMessage(refundSchema), Class: tools.ClassNatural, Run: run,
			Edits: tools.EditNoIncrease, Amounts: amounts},
		tools.Tool{Name: "refund_any", Schema: json.RawMessage(refundSchema), Class: tools.ClassNatural, Run: run,
			Amounts: amounts},
		tools.Tool{Name: "refund_fixed", Schema: json.RawMessage(refundSchema), Class: tools.ClassNatural, Run: run,
			Edits: tools.EditForbidden},
	)
	require.NoError(t, err)
	return reg
}

// edited is a call of tool for amount cents of EUR on order o-1, which
// needs approval.
func edited(tool string, cents int) activities.PlannedCall {
	args, err := keys.Canonicalize([]byte(`{"order_id":"o-1","currency":"EUR","amount_cents":` + strconv.Itoa(cents) + `}`))
	if err != nil {
		panic(err)
	}
	c := call(tool, string(args), tools.ClassNatural)
	c.NeedsApproval = true
	c.ApprovalReason = "amount_cents above 10000"
	return c
}

// edit is an edit of step n of c, reviewed with c's hash, to args.
func edit(n int64, c activities.PlannedCall, approver, args string) Approval {
	return Approval{Step: n, Decision: DecisionEdit, Approver: approver, ArgsHash: c.ArgsHash, Args: json.RawMessage(args)}
}

func TestEditedStepRunsOnceWithTheEditedArguments(t *testing.T) {
	t.Parallel()
	c := edited("refund", 25900)
	h := setup(t, c)
	h.edits = editRegistry(t)
	e := edit(1, c, "alice", `{"amount_cents": 15000, "order_id": "o-1", "currency": "EUR"}`)
	e.Comment = "only the damaged item"
	h.signalAt(day, e)

	st := h.run(t, modelRun())

	want := edited("refund", 15000)
	tc := h.toolCalls()
	require.Len(t, tc, 1, "the step runs once")
	assert.JSONEq(t, string(want.Args), string(tc[0].In.Args), "with the edited arguments")
	assert.Equal(t, want.ArgsHash, tc[0].In.ArgsHash, "under the edited arguments' canonical hash")
	assert.Equal(t, key(t, 1, "refund"), h.stepKeys(t)[0], "under the step's own key")

	s := st.Steps[0]
	assert.Equal(t, StepDone, s.State)
	assert.Equal(t, want.ArgsHash, s.ArgsHash)
	require.NotNil(t, s.Edit)
	assert.Equal(t, StepEdit{
		OriginalArgs: c.Args, OriginalArgsHash: c.ArgsHash, Args: want.Args, ArgsHash: want.ArgsHash,
		EditedBy: "alice", EditedAt: t0.Add(day), Comment: "only the damaged item",
	}, *s.Edit)
	ap := approvalOf(t, s)
	assert.Equal(t, DecisionEdit, ap.Decision)
	assert.Equal(t, "alice", ap.Approver)

	res := h.approvalResolutions()
	require.Len(t, res, 1)
	assert.Equal(t, activities.ApprovalApproved, res[0].State)
	assert.Equal(t, want.ArgsHash, res[0].EditedArgsHash, "the approvals table records the edit")
	assert.JSONEq(t, string(want.Args), string(res[0].EditedArgs))

	// The planner hears that a person changed its call, and what ran.
	plans := h.planInputs()
	require.Len(t, plans, 2)
	require.Len(t, plans[1].History, 1)
	obs := plans[1].History[0]
	assert.JSONEq(t, string(c.Args), string(obs.Args), "the call as the planner proposed it")
	require.NotNil(t, obs.Edit)
	assert.JSONEq(t, string(want.Args), string(obs.Edit.Args), "and what ran")
	assert.Equal(t, "alice", obs.Edit.By)
	assert.Equal(t, planner.OutcomeDone, obs.Outcome)
}

func TestRefusedEditLeavesTheStepPending(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, tool, args, why string
	}{
		{"schema", "refund", `{"order_id":"o-1","currency":"EUR","amount_cents":"lots"}`, "/amount_cents"},
		{"amount raised", "refund", `{"order_id":"o-1","currency":"EUR","amount_cents":30000}`, "amount_cents may not increase"},
		{"currency changed", "refund", `{"order_id":"o-1","currency":"USD","amount_cents":100}`, "currency may not change"},
		{"tool forbids edits", "refund_fixed", `{"order_id":"o-1","currency":"EUR","amount_cents":100}`, "does not allow edits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := edited(tc.tool, 25900)
			h := setup(t, c)
			h.edits = editRegistry(t)
			e := edit(1, c, "alice", tc.args)
			e.EditedArgsHash = strings.Repeat("e", 64)
			h.signalAt(day, e)
			mid := h.queryAt(t, day+time.Hour)
			h.signalAt(2*day, approve(1, c, "bob"))

			st := h.run(t, modelRun())

			s := approvalOf(t, mid.Steps[0])
			assert.Equal(t, StepPendingApproval, mid.Steps[0].State, "the refused edit leaves the step pending")
			assert.Contains(t, s.EditRefused, tc.why)
			assert.Nil(t, mid.Steps[0].Edit)
			h.mu.Lock()
			off := h.editsOff
			h.mu.Unlock()
			require.Len(t, off, 1, "the refused edit is taken off the decision of record")
			assert.Equal(t, activities.EditRefusal{Tenant: testTenant, RunID: testRunID, Step: 1,
				EditedArgsHash: e.EditedArgsHash, Why: s.EditRefused}, off[0])

			tcs := h.toolCalls()
			require.Len(t, tcs, 1)
			assert.Equal(t, c.ArgsHash, tcs[0].In.ArgsHash, "the later approval runs the proposed arguments")
			assert.Equal(t, "bob", approvalOf(t, st.Steps[0]).Approver)
			assert.Empty(t, approvalOf(t, st.Steps[0]).EditRefused)
		})
	}
}

func TestEditForOtherArgumentsIsIgnored(t *testing.T) {
	t.Parallel()
	c := edited("refund_any", 25900)
	h := setup(t, c)
	h.edits = editRegistry(t)
	stale := edit(1, edited("refund_any", 99), "alice", `{"order_id":"o-1","currency":"EUR","amount_cents":100}`)
	h.signalAt(day, stale)
	h.signalAt(2*day, approve(1, c, "bob"))

	st := h.run(t, modelRun())

	assert.Nil(t, st.Steps[0].Edit)
	assert.Equal(t, c.ArgsHash, h.toolCalls()[0].In.ArgsHash)
}

func TestEditIsBoundToTheHashItCarries(t *testing.T) {
	t.Parallel()
	c := edited("refund_any", 25900)
	h := setup(t, c)
	h.edits = editRegistry(t)
	e := edit(1, c, "alice", `{"order_id":"o-1","currency":"EUR","amount_cents":100}`)
	e.EditedArgsHash = edited("refund_any", 200).ArgsHash
	h.signalAt(day, e)
	mid := h.queryAt(t, day+time.Minute)
	h.signalAt(2*day, approve(1, c, "bob"))

	h.run(t, modelRun())

	assert.Contains(t, approvalOf(t, mid.Steps[0]).EditRefused, "is not the hash of its arguments")
	assert.Equal(t, c.ArgsHash, h.toolCalls()[0].In.ArgsHash)
}

// once is a call of tool with args whose tool makes each intent once per
// run.
func once(tool, args string) activities.PlannedCall {
	c := call(tool, args, tools.ClassExternal)
	c.OncePerRun = true
	return c
}

func TestRepeatedIntentIsADuplicateOfTheAppliedStep(t *testing.T) {
	t.Parallel()
	pay := once("refund_payment", `{"amount_cents":1500,"payment_id":"pay-1"}`)
	h := setup(t, pay, lookup("o-1"), pay, once("refund_payment", `{"amount_cents":1000,"payment_id":"pay-1"}`))

	st := h.run(t, modelRun())

	assert.Equal(t, []StepState{StepDone, StepDone, StepDuplicate, StepDone}, states(st))
	assert.Equal(t, []string{key(t, 1, "refund_payment"), key(t, 2, "lookup_order"), key(t, 4, "refund_payment")},
		h.stepKeys(t), "the repeated refund never runs; other arguments do")
	dup := st.Steps[2]
	assert.EqualValues(t, 1, dup.DuplicateOf)
	assert.JSONEq(t, string(result(1)), string(dup.Result), "it carries step 1's result")

	plans := h.planInputs()
	last := plans[len(plans)-1].History
	require.Len(t, last, 4)
	assert.Equal(t, planner.OutcomeDuplicate, last[2].Outcome)
	assert.Equal(t, 1, last[2].DuplicateOf)
	assert.JSONEq(t, string(result(1)), string(last[2].Result))
}

func TestRepeatableToolRunsTheSameCallAgain(t *testing.T) {
	t.Parallel()
	remind := call("send_email", `{"to":"a@example.com"}`, tools.ClassExternal) // OncePerRun false: the tool opted out
	h := setup(t, remind, remind)

	st := h.run(t, modelRun())

	assert.Equal(t, []StepState{StepDone, StepDone}, states(st))
	assert.Len(t, h.toolCalls(), 2)
}

func TestIntentEditedDownIsNotRunAgainAtTheProposedAmount(t *testing.T) {
	t.Parallel()
	c := edited("refund", 25900)
	c.OncePerRun = true
	h := setup(t, c, c)
	h.edits = editRegistry(t)
	h.signalAt(day, edit(1, c, "alice", `{"order_id":"o-1","currency":"EUR","amount_cents":15000}`))

	st := h.run(t, modelRun())

	assert.Equal(t, []StepState{StepDone, StepDuplicate}, states(st))
	assert.Len(t, h.toolCalls(), 1)
	assert.Len(t, h.approvalRequests(), 1, "a duplicate asks nobody")
}

func TestDuplicateIntentIsFoundAcrossContinueAsNew(t *testing.T) {
	t.Parallel()
	pay := once("refund_payment", `{"amount_cents":1500,"payment_id":"pay-1"}`)
	calls := []activities.PlannedCall{pay, lookup("o-1"), lookup("o-2"), pay}
	in := modelRun()
	in.Limits.HistoryLimit = 20

	h := setup(t, calls...)
	h.onTool = func(env *testsuite.TestWorkflowEnvironment, in activities.ToolInput) error {
		env.SetCurrentHistoryLength(int(7 * in.Step))
		return nil
	}
	h.env.ExecuteWorkflow(AgentRun, in)
	next := h.continuedAsNew(t)
	require.Len(t, next.Carry.Steps, 3)

	h2 := setup(t, calls...)
	st := h2.run(t, next)

	assert.Equal(t, []StepState{StepDone, StepDone, StepDone, StepDuplicate}, states(st))
	assert.Empty(t, h2.stepKeys(t), "the second generation runs nothing")
	assert.EqualValues(t, 1, st.Steps[3].DuplicateOf)
}

func TestDeadlineWarningsComeOnceEachBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	c := credit("o-1")
	h := setup(t, c)
	h.warnBefore = []time.Duration{24 * time.Hour, time.Hour}

	st := h.run(t, modelRun())

	deadline := t0.Add(DefaultApprovalDeadline)
	w := h.warningsSent()
	require.Len(t, w, 2, "one warning per point")
	assert.Equal(t, deadline.Add(-24*time.Hour), w[0].At.UTC())
	assert.Equal(t, deadline.Add(-time.Hour), w[1].At.UTC())
	assert.Equal(t, activities.DeadlineWarning{Tenant: testTenant, RunID: testRunID, Step: 1, Tool: "issue_credit",
		Deadline: deadline, Before: 24 * time.Hour, OnExpiry: ExpiryExpire}, w[0].In)
	assert.Equal(t, time.Hour, w[1].In.Before)
	assert.Equal(t, StepExpired, st.Steps[0].State)
	assert.Equal(t, []string{"24h0m0s", "1h0m0s"}, approvalOf(t, st.Steps[0]).Warned)
}

func TestDeadlineWarningsStopOnceDecidedAndSkipPassedPoints(t *testing.T) {
	t.Parallel()
	c := credit("o-1")
	h := setup(t, c)
	// A point further off than the deadline itself is already passed
	// when the step begins to wait.
	h.warnBefore = []time.Duration{30 * day, 24 * time.Hour, time.Hour}
	h.signalAt(DefaultApprovalDeadline-12*time.Hour, approve(1, c, "alice"))

	st := h.run(t, modelRun())

	w := h.warningsSent()
	require.Len(t, w, 1)
	assert.Equal(t, 24*time.Hour, w[0].In.Before)
	assert.Equal(t, StepDone, st.Steps[0].State)
}

func TestExpiryChoiceRejectRejectsAtTheDeadline(t *testing.T) {
	t.Parallel()
	c := credit("o-1")
	h := setup(t, c)
	in := modelRun()
	in.OnApprovalExpiry = ExpiryReject

	st := h.run(t, in)

	s := st.Steps[0]
	assert.Equal(t, StepRejected, s.State)
	ap := approvalOf(t, s)
	assert.Equal(t, DecisionReject, ap.Decision)
	assert.Equal(t, DeadlineApprover, ap.Approver)
	assert.Equal(t, ExpiryReject, ap.OnExpiry)
	assert.Contains(t, s.Error, "rejected at the deadline")
	assert.Empty(t, h.toolCalls())
	assert.Equal(t, ExpiryReject, h.approvalRequests()[0].OnExpiry)
	res := h.approvalResolutions()
	require.Len(t, res, 1)
	assert.Equal(t, activities.ApprovalRejected, res[0].State)
	assert.Equal(t, DeadlineApprover, res[0].DecidedBy)
	plans := h.planInputs()
	assert.Equal(t, []planner.Outcome{planner.OutcomeRejected}, outcomes(plans[len(plans)-1].History))
}

func TestExpiryChoiceIsCheckedWhereRunsStart(t *testing.T) {
	t.Parallel()
	in := modelRun()
	in.OnApprovalExpiry = "approve"
	err := in.Validate()
	require.ErrorIs(t, err, ErrInvalidInput)
	assert.Contains(t, err.Error(), `on_approval_expiry "approve" is not expire or reject`)
}

func (h *harness) warningsSent() []warning {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]warning(nil), h.warnings...)
}

func TestEditIntoAnAppliedCallIsADuplicate(t *testing.T) {
	t.Parallel()
	small := edited("refund", 10000)
	small.OncePerRun, small.NeedsApproval = true, false
	big := edited("refund", 25900)
	big.OncePerRun = true
	h := setup(t, small, big)
	h.edits = editRegistry(t)
	h.signalAt(day, edit(2, big, "alice", `{"order_id":"o-1","currency":"EUR","amount_cents":10000}`))

	st := h.run(t, modelRun())

	assert.Equal(t, []StepState{StepDone, StepDuplicate}, states(st))
	assert.EqualValues(t, 1, st.Steps[1].DuplicateOf)
	assert.Len(t, h.toolCalls(), 1, "the edited call equals step 1's, which is not made twice")
}
