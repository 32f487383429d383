package replay

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// credit is a step of issue_credit in state, as the run recorded it.
func credit(t *testing.T, state workflows.StepState) workflows.Step {
	t.Helper()
	args := json.RawMessage(`{"amount_cents":25900,"currency":"EUR","order_id":"1001","reason":"damaged"}`)
	p, err := registry(t).Prepare(tools.ProposedCall{Tool: shop.ToolIssueCredit, Args: args})
	require.NoError(t, err)
	return workflows.Step{Step: 3, Tool: shop.ToolIssueCredit, Class: tools.ClassNatural, Args: p.Args, ArgsHash: p.ArgsHash, State: state}
}

func TestStepChanges(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		without []string
		step    func(workflows.Step) workflows.Step
		want    string // "" when the step is unchanged
	}{
		{"a step this build has", nil, func(s workflows.Step) workflows.Step { return s }, ""},
		{"no tool", []string{shop.ToolIssueCredit}, func(s workflows.Step) workflows.Step { return s },
			"waits for approval, and this build has no tool issue_credit: once approved it would fail"},
		{"arguments the schema refuses", nil, func(s workflows.Step) workflows.Step {
			s.Args = json.RawMessage(`{"order_id":"1001"}`)
			return s
		}, "waits for approval, and this build refuses its arguments (arguments of issue_credit do not match its schema"},
		{"another hash", nil, func(s workflows.Step) workflows.Step {
			s.ArgsHash = "0123456789abcdef"
			return s
		}, "this build hashes its arguments to "},
		{"another class", nil, func(s workflows.Step) workflows.Step {
			s.Class = tools.ClassKeyed
			return s
		}, "waits for approval, and this build's issue_credit is of class natural, not keyed"},
		{"running", []string{shop.ToolIssueCredit}, func(s workflows.Step) workflows.Step {
			s.State = workflows.StepRunning
			return s
		}, "is running, and this build has no tool issue_credit: its next attempt on this build would fail"},
		{"approved", []string{shop.ToolIssueCredit}, func(s workflows.Step) workflows.Step {
			s.State = workflows.StepApproved
			return s
		}, "is approved and has not run, and this build has no tool issue_credit: when it runs it would fail"},
		{"waiting for an answer", []string{shop.ToolIssueCredit}, func(s workflows.Step) workflows.Step {
			s.State = workflows.StepWaitingForInput
			return s
		}, "waits for a person's answer"},
		{"waiting for a resolution", []string{shop.ToolIssueCredit}, func(s workflows.Step) workflows.Step {
			s.State = workflows.StepNeedsResolution
			return s
		}, "waits for a person's resolution"},
		{"ended", []string{shop.ToolIssueCredit}, func(s workflows.Step) workflows.Step {
			s.State = workflows.StepDone
			return s
		}, ""},
		{"a delegation", nil, func(s workflows.Step) workflows.Step {
			s.Tool, s.Class = "agent_refunds", activities.ClassDelegate
			return s
		}, ""},
		{"made, though its worker's registry refused it", []string{shop.ToolIssueCredit}, func(s workflows.Step) workflows.Step {
			s.State, s.Class = workflows.StepRunning, ""
			return s
		}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := tt.step(credit(t, workflows.StepPendingApproval))

			got := stepChanges(registry(t, tt.without...), workflows.Status{Steps: []workflows.Step{s}})

			if tt.want == "" {
				assert.Empty(t, got)
				return
			}
			require.Len(t, got, 1)
			assert.Equal(t, int64(3), got[0].Step)
			assert.Equal(t, s.Tool, got[0].Tool)
			assert.Contains(t, got[0].Why, tt.want)
		})
	}
}

func TestTurnChanges(t *testing.T) {
	t.Parallel()
	note := tools.ProposedCall{Tool: shop.ToolAddOrderNote, Args: json.RawMessage(`{"order_id":"1001","text":"hi"}`)}
	badNote := tools.ProposedCall{Tool: shop.ToolAddOrderNote, Args: json.RawMessage(`{"order_id":"1001"}`)}
	lookup := tools.ProposedCall{Tool: shop.ToolLookupOrder, Args: json.RawMessage(`{"order_id":"1001"}`)}
	for _, tt := range []struct {
		name    string
		without []string
		calls   []activities.PlannedCall
		in      activities.PlanInput
		changes []string
		skipped []string
	}{
		{"as recorded", nil, []activities.PlannedCall{{Proposed: lookup}, {Proposed: badNote, Invalid: "no text"}},
			activities.PlanInput{}, nil, nil},
		{"valid then, refused now", []string{shop.ToolAddOrderNote}, []activities.PlannedCall{{Proposed: lookup}, {Proposed: note}},
			activities.PlanInput{}, []string{"event 12: a call of add_order_note was valid when planned, and this build has no tool add_order_note: " +
				"were the turn planned again, the steps after it would be numbered one lower"}, nil},
		{"refused then, valid now", nil, []activities.PlannedCall{{Proposed: note, Invalid: `unknown tool "add_order_note"`}},
			activities.PlanInput{}, []string{`event 12: a call of add_order_note was refused when planned (unknown tool "add_order_note"), ` +
				"and this build accepts it: were the turn planned again, it would take a step and the steps after it would be numbered one higher"}, nil},
		{"a compact answer made whole from the turn's input", []string{shop.ToolAddOrderNote}, []activities.PlannedCall{{}, {}},
			activities.PlanInput{Compact: true, Plan: []tools.ProposedCall{lookup, note}},
			[]string{"event 12: a call of add_order_note was valid when planned"}, nil},
		{"a compact answer with no input", nil, []activities.PlannedCall{{}},
			activities.PlanInput{}, nil, []string{"event 12: call 1 of the turn, whose tool the compact answer leaves out"}},
		{"outside a child's grant", nil, []activities.PlannedCall{{Proposed: note, Invalid: "not granted"}},
			activities.PlanInput{Granted: true, Grant: []string{shop.ToolLookupOrder}}, nil, nil},
		{"a delegation refused", nil, []activities.PlannedCall{{Proposed: tools.ProposedCall{Tool: "agent_refunds"}, Invalid: "too deep"}},
			activities.PlanInput{}, nil, []string{"event 12: call 1 of the turn, of agent_refunds, refused when planned (too deep)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			turns := []turn{{event: 12, answered: true, out: activities.PlanOutput{Calls: tt.calls}}, {event: 20}}

			changes, skipped := turnChanges(registry(t, tt.without...), turns, []activities.PlanInput{tt.in})

			require.Len(t, changes, len(tt.changes))
			for i, want := range tt.changes {
				assert.Contains(t, changes[i].String(), want)
				assert.Equal(t, int64(12), changes[i].Event)
				assert.Zero(t, changes[i].Step)
			}
			require.Len(t, skipped, len(tt.skipped))
			for i, want := range tt.skipped {
				assert.Contains(t, skipped[i], want)
			}
		})
	}
}
