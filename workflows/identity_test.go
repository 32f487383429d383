package workflows

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/tools"
)

// The tests of step identity play a takeover: the store holds steps made
// by a worker that died before the run recorded them (harness.made), and
// this worker's registry, or the order in which it takes what came
// meanwhile, would leave them out.

// madeBy is what the store holds of call c made as a step.
func madeBy(c activities.PlannedCall) activities.MadeStep {
	return activities.MadeStep{Tool: c.Proposed.Tool, ArgsHash: c.ArgsHash}
}

// refusedHereMade is award_points, which this worker's registry does not
// have, as Plan answers it when the store holds its key completed.
func refusedHereMade() activities.PlannedCall {
	c := call("award_points", `{"customer_id":"c-1","points":50}`, tools.ClassKeyed)
	c.Class, c.Local = "", false
	c.Invalid = `unknown tool "award_points"`
	c.Made = true
	return c
}

func TestACallTheStoreHoldsMadeIsThatStepWhateverThisWorkersRegistrySays(t *testing.T) {
	t.Parallel()
	for _, planner := range []string{"script", "model"} {
		t.Run(planner, func(t *testing.T) {
			t.Parallel()
			award, note := refusedHereMade(), call("add_order_note", `{"order_id":"DH-1","text":"points awarded"}`, tools.ClassKeyed)
			h := setup(t, award, note)
			in := modelRun()
			if planner == "script" {
				in = scripted(award, note)
			}

			st := h.run(t, in)

			require.Len(t, st.Steps, 2)
			assert.Equal(t, []StepState{StepDone, StepDone}, states(st))
			assert.False(t, st.Steps[0].Refused)
			assert.Equal(t, key(t, 1, "award_points"), st.Steps[0].Key)
			assert.Equal(t, key(t, 2, "add_order_note"), st.Steps[1].Key)
			calls := h.toolCalls()
			require.Len(t, calls, 2)
			assert.Equal(t, "award_points", calls[0].In.Tool, "RunTool replays it from the store")
			assert.Equal(t, award.ArgsHash, calls[0].In.ArgsHash)
			assert.Equal(t, []string{key(t, 1, "award_points")}, h.startedIDs("RunTool")[:1],
				"a step of a tool this worker does not know runs as an activity under its key")
		})
	}
}

func TestAMadeCallThatNeedsApprovalHereRunsWithoutAsking(t *testing.T) {
	t.Parallel()
	c := credit("o-1")
	c.Made = true
	h := setup(t, c)

	st := h.run(t, scripted(c))

	assert.Equal(t, []StepState{StepDone}, states(st))
	assert.Nil(t, st.Steps[0].Approval)
	assert.Empty(t, h.approvalRequests(), "a step that was made is never re-approved")
	assert.Len(t, h.toolCalls(), 1)
}

func TestAScriptsRefusalIsRecordedBeforeItsNextLocalStep(t *testing.T) {
	t.Parallel()
	note := call("add_order_note", `{"order_id":"DH-1","text":"hello"}`, tools.ClassKeyed)
	for _, tc := range []struct {
		name   string
		calls  []activities.PlannedCall
		waited time.Duration
	}{
		{"after a refusal", []activities.PlannedCall{invalid("award_points"), note}, time.Millisecond},
		{"with no refusal", []activities.PlannedCall{lookup("o-1"), note}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, tc.calls...)

			st := h.run(t, scripted(tc.calls...))

			require.Len(t, st.Steps, 2)
			calls := h.toolCalls()
			last := calls[len(calls)-1]
			assert.Equal(t, "add_order_note", last.In.Tool)
			// The note's local step waits for the workflow task that
			// recorded the refusal to complete (a timer of 1 ms).
			assert.Equal(t, t0.Add(tc.waited), last.At.UTC())
		})
	}
}

// A refused call of a script is a failed step, and the run says which
// calls were not made rather than that every call of the plan was.
func TestAScriptWithARefusedCallSaysSo(t *testing.T) {
	t.Parallel()
	bad, l := invalid("award_points"), lookup("o-1")
	h := setup(t, bad, l)

	st := h.run(t, scripted(bad, l))

	assert.Equal(t, RunCompleted, st.State)
	assert.Equal(t, []StepState{StepFailed, StepDone}, states(st))
	assert.Equal(t, `every call of the plan was proposed; 1 of 2 steps were not made: step 1 award_points failed: refused: tool "award_points" is not registered`,
		st.Message)
}

// A cancel that reaches the worker taking a run over before the run's
// next calls: the steps a worker made and died before recording are made
// again from the store and named by the receipt; the others are not made.
func TestACancelAppliedFirstInATakeoverRecordsTheStepsAWorkerMade(t *testing.T) {
	t.Parallel()
	note := call("add_order_note", `{"order_id":"DH-1","text":"hello"}`, tools.ClassKeyed)
	c, l := credit("o-1"), lookup("o-2")
	c.NeedsApproval = false
	for _, tc := range []struct {
		name   string
		in     RunInput
		before bool
		want   []StepState
	}{
		{"script", scripted(note, c, l), false, []StepState{StepDone, StepDone}},
		{"model", modelRun(), false, []StepState{StepDone, StepDone}},
		{"script of a run before step identity", scripted(note, c, l), true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, note, c, l)
			h.batch = true
			h.made = map[int64]activities.MadeStep{1: madeBy(note), 2: madeBy(c)}
			if tc.before {
				h.beforeStepIdentity()
			}
			// The cancel is taken while the turn is planned: as a worker
			// that takes the run over applies an update before it replays
			// the turn the dead worker made.
			h.planTime = time.Minute
			h.updateAt(30*time.Second, UpdateCancel, cancelBy("olga", "customer withdrew"))

			st := h.run(t, tc.in)

			assert.Equal(t, RunCancelled, st.State)
			assert.Equal(t, tc.want, states(st))
			require.NotNil(t, st.Receipt)
			var ended []string
			for _, s := range st.Receipt.Steps {
				ended = append(ended, s.Key)
			}
			if tc.before {
				assert.Empty(t, ended)
				return
			}
			assert.Equal(t, []string{key(t, 1, "add_order_note"), key(t, 2, "issue_credit")}, ended,
				"the receipt names every effect that exists")
			assert.Len(t, h.toolCalls(), 2, "the made steps are replayed; the third is not made")
			assert.Len(t, h.planInputs(), 1, "no planner is asked after the cancel")
			for _, s := range st.Steps {
				assert.Empty(t, s.Error, "step %d", s.Step)
			}
		})
	}
}

func TestAPauseAppliedFirstInATakeoverMakesTheStepsAWorkerMadeThenHolds(t *testing.T) {
	t.Parallel()
	note := call("add_order_note", `{"order_id":"DH-1","text":"hello"}`, tools.ClassKeyed)
	l := lookup("o-2")
	h := setup(t, note, l)
	h.made = map[int64]activities.MadeStep{1: madeBy(note)}
	h.planTime = time.Minute
	h.updateAt(30*time.Second, UpdatePause, Control{By: "olga", Reason: "audit"})
	paused := h.queryAt(t, time.Hour)
	h.updateAt(2*time.Hour, UpdateResume, Control{By: "olga"})

	st := h.run(t, scripted(note, l))

	assert.Equal(t, RunPaused, paused.State)
	require.NotEmpty(t, paused.Steps)
	assert.Equal(t, StepDone, paused.Steps[0].State, "the made step is in the record while the run is paused")
	for _, s := range paused.Steps[1:] {
		assert.NotEqual(t, StepDone, s.State, "step %d: nothing else is made while paused", s.Step)
	}
	assert.Equal(t, RunCompleted, st.State)
	assert.Equal(t, []StepState{StepDone, StepDone}, states(st))
	calls := h.toolCalls()
	require.Len(t, calls, 2)
	assert.False(t, calls[1].At.Before(t0.Add(2*time.Hour)), "the second step ran only on resume")
}

// A step approved, whose decision the run recorded, then cancelled before
// it started, by a cancel the worker that took the run over applied
// first: the worker that died had made it, with that approval.
func TestAnApprovedStepCancelledBeforeItStartedIsDoneWhenAWorkerMadeIt(t *testing.T) {
	t.Parallel()
	for _, made := range []bool{false, true} {
		t.Run(map[bool]string{false: "not made", true: "made"}[made], func(t *testing.T) {
			t.Parallel()
			c := credit("o-1")
			h := setup(t, c)
			if made {
				h.made = map[int64]activities.MadeStep{1: madeBy(c)}
			}
			h.resolveTime = time.Minute
			h.signalAt(time.Hour, approve(1, c, "ann"))
			h.updateAt(time.Hour+30*time.Second, UpdateCancel, cancelBy("olga", "customer withdrew"))

			st := h.run(t, modelRun())

			assert.Equal(t, RunCancelled, st.State)
			require.Len(t, st.Steps, 1)
			s := st.Steps[0]
			assert.Equal(t, DecisionApprove, approvalOf(t, s).Decision)
			res := h.approvalResolutions()
			require.Len(t, res, 1)
			assert.Equal(t, activities.ApprovalApproved, res[0].State)
			if !made {
				assert.Equal(t, StepCancelled, s.State)
				assert.Empty(t, h.toolCalls())
				return
			}
			assert.Equal(t, StepDone, s.State, "its effect exists: the record says so")
			assert.Empty(t, s.Error, "nothing of the cancel's 'not started' is left")
			assert.Len(t, h.toolCalls(), 1, "replayed from the store")
			assert.Contains(t, st.Receipt.Steps[0].Ended, "done")
		})
	}
}

// A withdrawn approval's step cannot have been made: nobody had decided
// it. The run reads nothing of the store for it.
func TestACancelledApprovalIsWithdrawnWithoutReadingTheStore(t *testing.T) {
	t.Parallel()
	c := credit("o-1")
	h := setup(t, c)
	h.updateAt(2*time.Hour, UpdateCancel, cancelBy("olga", "customer withdrew"))

	st := h.run(t, modelRun())

	assert.Equal(t, []StepState{StepCancelled}, states(st))
	assert.Empty(t, h.toolCalls())
	res := h.approvalResolutions()
	require.Len(t, res, 1)
	assert.Equal(t, activities.ApprovalCancelled, res[0].State)
	assert.Empty(t, h.storeReads(), "no model is asked again, and nothing was made")
}

// A dead worker ran a read, then made a note; the cancel reaches the
// worker that took the run over first: the read, which has no effect,
// runs again, the note is replayed, and both are in the record.
func TestACancelInATakeoverRecordsAMadeStepAfterARead(t *testing.T) {
	t.Parallel()
	l, note := lookup("o-1"), call("add_order_note", `{"order_id":"o-1","text":"checked"}`, tools.ClassKeyed)
	l2 := lookup("o-2")
	h := setup(t, l, note, l2)
	h.batch = true
	h.made = map[int64]activities.MadeStep{2: madeBy(note)}
	h.planTime = time.Minute
	h.updateAt(30*time.Second, UpdateCancel, cancelBy("olga", "customer withdrew"))

	st := h.run(t, scripted(l, note, l2))

	assert.Equal(t, RunCancelled, st.State)
	assert.Equal(t, []StepState{StepDone, StepDone}, states(st), "the last read, after every made step, is not made")
	assert.Empty(t, st.Steps[1].Error)
	assert.Len(t, h.toolCalls(), 2)
}

func TestARepeatedIntentWhoseOwnKeyWasMadeIsThatStepNotADuplicate(t *testing.T) {
	t.Parallel()
	for _, made := range []bool{false, true} {
		t.Run(map[bool]string{false: "not made", true: "made"}[made], func(t *testing.T) {
			t.Parallel()
			p := payout("o-1")
			p.OncePerRun = true
			h := setup(t, p, p)
			if made {
				h.made = map[int64]activities.MadeStep{2: madeBy(p)}
			}

			st := h.run(t, modelRun())

			if made {
				assert.Equal(t, []StepState{StepDone, StepDone}, states(st))
				assert.Len(t, h.toolCalls(), 2)
				return
			}
			assert.Equal(t, []StepState{StepDone, StepDuplicate}, states(st))
			assert.Len(t, h.toolCalls(), 1)
		})
	}
}

func TestACarryOfANewerFormatFailsTheWorkflowTask(t *testing.T) {
	t.Parallel()
	h := setup(t, lookup("o-1"))
	in := modelRun()
	in.Carry = &Carry{Bundled: true, Identity: true, Format: carryFormat + 1, Generation: 1, StartedAt: t0}

	h.env.ExecuteWorkflow(AgentRun, in)

	err := h.env.GetWorkflowError()
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), fmt.Sprintf("carry is of format %d", carryFormat+1)), "got %v", err)
	assert.Empty(t, h.planInputs(), "the worker took nothing of the generation")
}

// What Continue-As-New carries goes to the next generation whole: the
// fields the first release had and those added since (limits, the pause,
// messages, turns, applied intents, step identity).
func TestACarryKeepsEveryFieldAcrossContinueAsNew(t *testing.T) {
	t.Parallel()
	h := setup(t, lookup("o-1"))
	h.env.SetContinueAsNewSuggested(true)
	in := modelRun()
	carry := &Carry{
		Steps: []Step{{Step: 1, Turn: 1, Tool: "agent_refunds", Key: key(t, 1, "agent_refunds"), State: StepDone, Args: json.RawMessage(`{}`),
			Applied: []Intent{{RunID: testRunID + ".1", Step: 1, Tool: "refund_payment", ArgsHash: strings.Repeat("a", 64)}}}},
		Proposed: 1, Generation: 3, StartedAt: t0.Add(-time.Hour), Bundled: true, Limits: true, Turns: 7, Identity: true,
		Format: carryFormat,
		Messages: []AcceptedMessage{{Message: Message{MessageID: "m-1", Text: "also order 2", By: "olga"}, Position: 1,
			AcceptedAt: t0.Add(-time.Minute), DeliveredTurn: 7}},
	}
	in.Carry = carry

	h.env.ExecuteWorkflow(AgentRun, in)
	next := h.continuedAsNew(t)

	want := *carry
	want.Generation++
	want.History = nil
	got := *next.Carry
	got.History = nil
	assert.Equal(t, want, got)
}

// A paused run's pause goes to the next generation.
func TestACarriedPauseHoldsTheNextGeneration(t *testing.T) {
	t.Parallel()
	h := setup(t, lookup("o-1"))
	in := modelRun()
	in.Carry = &Carry{Bundled: true, Identity: true, Format: carryFormat, Generation: 1, StartedAt: t0,
		Paused: &ControlRecord{By: "olga", Reason: "audit", At: t0}}
	st := h.queryAt(t, time.Hour)
	h.updateAt(2*time.Hour, UpdateResume, Control{By: "olga"})

	end := h.run(t, in)

	assert.Equal(t, RunPaused, st.State)
	assert.Empty(t, st.Steps)
	assert.Equal(t, []StepState{StepDone}, states(end))
}

// A child run's steps of tools that make each intent once claim it in
// their tree, by its first run; a step that another step of the tree made
// is a duplicate naming it.
func TestAChildRunsStepsClaimTheirIntentsInTheTree(t *testing.T) {
	t.Parallel()
	note := call("add_order_note", `{"order_id":"DH-1","text":"hello"}`, tools.ClassKeyed)
	note.OncePerRun = true
	l := lookup("o-1")
	h := setup(t, l, note)
	h.treeDup = func(in activities.ToolInput) *activities.TreeDuplicate {
		if in.Tree == "" {
			return nil
		}
		return &activities.TreeDuplicate{RunID: "root.2", Step: 1, Key: "v1/acme/root.2/1/add_order_note", Result: result(9)}
	}
	in := scripted(l, note)
	in.RunID = "root.1"
	in.Parent = &Parent{RunID: "root", Step: 1, Agent: "notes", Depth: 1, BudgetRun: "root", Lineage: []Hop{{RunID: "root", Step: 1}}}

	st := h.run(t, in)

	calls := h.toolCalls()
	require.Len(t, calls, 2)
	assert.Empty(t, calls[0].In.Tree, "a read claims nothing")
	assert.Equal(t, "root", calls[1].In.Tree, "the tree's first run")
	require.Len(t, st.Steps, 2)
	s := st.Steps[1]
	assert.Equal(t, StepDuplicate, s.State)
	assert.Equal(t, "root.2", s.DuplicateRun)
	assert.Equal(t, int64(1), s.DuplicateOf)
	assert.JSONEq(t, string(result(9)), string(s.Result))
}

func TestARunThatDelegatesNothingClaimsNothing(t *testing.T) {
	t.Parallel()
	p := payout("o-1")
	p.OncePerRun = true
	h := setup(t, p)

	h.run(t, modelRun())

	calls := h.toolCalls()
	require.Len(t, calls, 1)
	assert.Empty(t, calls[0].In.Tree, "no step of another run of its tree can run beside it")
}
