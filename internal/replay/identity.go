package replay

import (
	"fmt"
	"slices"
	"strings"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/agents"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// Change is a step of a run, or a call of one of its recorded planning
// turns, whose identity (docs/agent-runs.md, "Step identity") this
// build's registry would change.
type Change struct {
	// Step is the step's number; 0 for a call of a planning turn.
	Step int64 `json:"step,omitempty"`
	// Tool is the step's or the call's tool.
	Tool string `json:"tool"`
	// Why says what the step is doing, what this build's registry says of
	// it, and what would come of that.
	Why string `json:"why"`
	// Event, for a call of a planning turn, is the event that recorded the
	// turn's answer.
	Event int64 `json:"event,omitempty"`
}

// String says "step 3 award_points waits for approval, and this build has
// no tool award_points: once approved it would fail", or for a planning
// turn's call "event 12: a call of award_points was valid when planned ...".
func (c Change) String() string {
	if c.Step == 0 {
		return fmt.Sprintf("event %d: a call of %s %s", c.Event, c.Tool, c.Why)
	}
	return fmt.Sprintf("step %d %s %s", c.Step, c.Tool, c.Why)
}

// waiting are the states of a step that has not ended: what the step is
// doing, and what it does next that needs its tool on this build.
var waiting = map[workflows.StepState]struct{ doing, next string }{
	workflows.StepPendingApproval: {"waits for approval", "once approved it would fail"},
	workflows.StepApproved:        {"is approved and has not run", "when it runs it would fail"},
	workflows.StepRunning:         {"is running", "its next attempt on this build would fail"},
	workflows.StepWaitingForInput: {"waits for a person's answer", "once answered it would fail"},
	workflows.StepNeedsResolution: {"waits for a person's resolution", "a retry on this build would fail"},
}

// stepChanges checks each step of st that has not ended against reg:
// its tool is registered, its arguments pass the tool's schema and hash
// to the step's args hash, and its class is the step's. A delegating step
// is not checked: its child run was decided when it was planned (the
// delegation is in the history), and is a run of its own.
func stepChanges(reg *tools.Registry, st workflows.Status) []Change {
	var out []Change
	for _, s := range st.Steps {
		w, ok := waiting[s.State]
		if !ok || s.Class == activities.ClassDelegate || s.Class == "" {
			// A step with no class is one its run found made in the dedup
			// store when its worker's registry refused the call
			// (activities.PlannedCall.Made): RunTool replays it, whatever
			// this build's registry says.
			continue
		}
		if why := stepProblem(reg, s, w.next); why != "" {
			out = append(out, Change{Step: s.Step, Tool: s.Tool, Why: w.doing + ", and " + why})
		}
	}
	return out
}

// stepProblem says what reg changes of step s, whose next move is next,
// or "" when nothing.
func stepProblem(reg *tools.Registry, s workflows.Step, next string) string {
	t, ok := reg.Lookup(s.Tool)
	if !ok {
		return fmt.Sprintf("this build has no tool %s: %s", s.Tool, next)
	}
	p, err := reg.Prepare(tools.ProposedCall{Tool: s.Tool, Args: s.Args})
	if err != nil {
		return fmt.Sprintf("this build refuses its arguments (%s): %s", err, next)
	}
	if p.ArgsHash != s.ArgsHash {
		return fmt.Sprintf("this build hashes its arguments to %s, not to the step's %s: the dedup store would take its key for another call's (key reuse)",
			short(p.ArgsHash), short(s.ArgsHash))
	}
	if t.Class != s.Class {
		return fmt.Sprintf("this build's %s is of class %s, not %s: its effect would be made once another way", s.Tool, t.Class, s.Class)
	}
	return ""
}

// short is the first 12 characters of a hash.
func short(hash string) string { return hash[:min(12, len(hash))] }

// turnChanges checks again, against reg, each call of the recorded
// planning turns of a run that began before step identity, which numbered
// only the calls its registry accepted: a call recorded valid that reg
// refuses, or recorded refused that reg accepts, would renumber the steps
// after it were its turn planned again. plans are the turns' inputs as the
// replay asked for them, in the same order, from which the calls of a
// compact answer (activities.PlannedCall.Expand) are made whole. It also
// returns what it could not check, and why.
func turnChanges(reg *tools.Registry, turns []turn, plans []activities.PlanInput) (changes []Change, skipped []string) {
	for i, t := range turns {
		if !t.answered {
			continue
		}
		var in activities.PlanInput
		if i < len(plans) {
			in = plans[i]
		}
		for j, c := range t.out.Calls {
			if in.Compact && j < len(in.Plan) {
				c = c.Expand(in.Plan[j])
			}
			tool := c.Proposed.Tool
			if tool == "" {
				skipped = append(skipped, fmt.Sprintf("event %d: call %d of the turn, whose tool the compact answer leaves out and the replay did not show", t.event, j+1))
				continue
			}
			valid := c.Invalid == ""
			reason := ""
			switch {
			case in.Granted && !slices.Contains(in.Grant, tool):
				reason = "it is not granted to this child run"
			case strings.HasPrefix(tool, agents.ToolPrefix) && !valid:
				// A delegation may have been refused for the depth it
				// would reach, which the deployment's bound decides, not
				// the registry.
				skipped = append(skipped, fmt.Sprintf("event %d: call %d of the turn, of %s, refused when planned (%s): a delegation's depth bound is not checked",
					t.event, j+1, tool, c.Invalid))
				continue
			default:
				reason = callProblem(reg, c)
			}
			switch {
			case valid && reason != "":
				changes = append(changes, Change{Tool: tool, Event: t.event, Why: fmt.Sprintf(
					"was valid when planned, and %s: were the turn planned again, the steps after it would be numbered one lower", reason)})
			case !valid && reason == "":
				changes = append(changes, Change{Tool: tool, Event: t.event, Why: fmt.Sprintf(
					"was refused when planned (%s), and this build accepts it: were the turn planned again, it would take a step and the steps after it would be numbered one higher", c.Invalid)})
			}
		}
	}
	return changes, skipped
}

// callProblem says why reg refuses call ("this build has no tool x",
// "this build refuses its arguments (...)"), or "" when it accepts it.
func callProblem(reg *tools.Registry, call activities.PlannedCall) string {
	if _, ok := reg.Lookup(call.Proposed.Tool); !ok {
		return "this build has no tool " + call.Proposed.Tool
	}
	if _, err := reg.Prepare(call.Proposed); err != nil {
		return fmt.Sprintf("this build refuses its arguments (%s)", err)
	}
	return ""
}
