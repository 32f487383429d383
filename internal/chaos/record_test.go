package chaos

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/oncerun/oncerun/workflows"
)

func TestTheRecordCheckFindsEffectsTheRecordsLeaveOutAndStepsWithoutEffects(t *testing.T) {
	t.Parallel()
	step := func(run string, n int64, tool string, state workflows.StepState) recorded {
		return recorded{runID: run, step: workflows.Step{Step: n, Tool: tool, State: state, Key: "v1/acme/" + run + "/" + string(rune('0'+n)) + "/" + tool}}
	}
	recs := map[string]recorded{}
	for _, r := range []recorded{
		step("r1", 1, "add_order_note", workflows.StepDone),
		step("r1", 2, "award_points", workflows.StepFailed), // refused here, made by another registry
		step("r1", 3, "refund_payment", workflows.StepDone), // done, its refund nowhere
		step("r1", 4, "lookup_order", workflows.StepDone),   // a read: nothing to find
	} {
		recs[r.step.Key] = r
	}
	found := []landed{
		{"note", "v1/acme/r1/1/add_order_note"},
		{"note", "v1/acme/r1/1/add_order_note"},     // twice under one key
		{"points", "v1/acme/r1/2/award_points"},     // recorded failed
		{"ticket", "v1/acme/r9/1/desk_open_ticket"}, // in no record
	}

	rc := compareRecords(found, recs)

	assert.Equal(t, 2, rc.missing)
	assert.Equal(t, 1, rc.twice)
	assert.Equal(t, 1, rc.absent)
	assert.Equal(t, []string{
		"note under key v1/acme/r1/1/add_order_note: made twice",
		"points under key v1/acme/r1/2/award_points exists, but run r1 records step 2 failed: ",
		"run r1 step 3 refund_payment is recorded done, but no refund is under its key v1/acme/r1/3/refund_payment",
		"ticket under key v1/acme/r9/1/desk_open_ticket: in no step of run r9's record",
	}, rc.violations)
}

func TestARegistryLeavesOutTheCrashPointsOfToolsItLacks(t *testing.T) {
	t.Parallel()
	r := registry{lacks: []string{deskVoucher, "agent_refunds"}}
	assert.Equal(t, "after-commit:issue_credit,after-commit:desk_open_ticket",
		r.crashSet("after-commit:issue_credit,child-start:agent_refunds,after-commit:desk_open_ticket,after-apply:desk_issue_voucher"))
	assert.Equal(t, "", r.crashSet(""))
}

func TestRecordedDoneReadsADelegatedEffectFromTheChild(t *testing.T) {
	t.Parallel()
	end := runEnd{
		status: workflows.Status{Steps: []workflows.Step{
			{Step: 1, State: workflows.StepDone},
			{Step: 2, State: workflows.StepDone, Child: "r1.2"},
			{Step: 3, State: workflows.StepFailed, Refused: true},
		}},
		children: map[int64]workflows.Status{2: {Steps: []workflows.Step{{Step: 1, State: workflows.StepRejected}}}},
	}
	assert.Equal(t, 1, recordedDone(end, 1))
	assert.Equal(t, 0, recordedDone(end, 2), "the child's step was rejected")
	assert.Equal(t, 0, recordedDone(end, 3))
	assert.Equal(t, 0, recordedDone(end, 4))
	assert.True(t, namesChild(end, 2, "r1.2"))
	assert.False(t, namesChild(end, 3, "r1.3"), "a refused delegation started no child")
}
