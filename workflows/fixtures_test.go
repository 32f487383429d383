package workflows

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/tools"
)

// modelRun is a run of a model's planner, which the harness plays by
// proposing its calls: a model is told the goal and every earlier outcome
// each turn, so the tests see all of what a planner is told.
func modelRun() RunInput {
	return RunInput{Tenant: testTenant, RunID: testRunID, Goal: "refund order 1", Planner: planner.NameOpenAI}
}

// scripted is a scripted run of calls.
func scripted(calls ...activities.PlannedCall) RunInput {
	in := RunInput{Tenant: testTenant, RunID: testRunID, Goal: "refund order 1", Planner: planner.NameScript}
	for _, c := range calls {
		in.Plan = append(in.Plan, c.Proposed)
	}
	return in
}

// credit is an issue_credit call for order, which needs an approval.
func credit(order string) activities.PlannedCall {
	c := call("issue_credit", fmt.Sprintf(`{"amount":"150.00","order_id":%q}`, order), tools.ClassNatural)
	c.NeedsApproval = true
	c.ApprovalReason = "amount above 100.00"
	return c
}

// lookup is a lookup_order call for order, which needs no approval.
func lookup(order string) activities.PlannedCall {
	return call("lookup_order", fmt.Sprintf(`{"order_id":%q}`, order), tools.ClassRead)
}

// invalid is a call the tool registry refused.
func invalid(tool string) activities.PlannedCall {
	return activities.PlannedCall{
		Proposed: planner.Call{Tool: tool, Args: json.RawMessage(`{}`)},
		Invalid:  fmt.Sprintf("tool %q is not registered", tool),
	}
}

func call(tool, args string, class tools.Class) activities.PlannedCall {
	hash, err := keys.ArgsHash([]byte(args))
	if err != nil {
		panic(err)
	}
	return activities.PlannedCall{
		Proposed: planner.Call{Tool: tool, Args: json.RawMessage(args)},
		Args:     json.RawMessage(args),
		ArgsHash: hash,
		Class:    class,
		Timeout:  30 * time.Second,
		// The fixtures' reads are lookups in the database.
		Local: class != tools.ClassExternal,
	}
}

// approve and reject are decisions on step n of c, for c's arguments.
func approve(n int64, c activities.PlannedCall, approver string) Approval {
	return Approval{Step: n, Decision: DecisionApprove, Approver: approver, ArgsHash: c.ArgsHash}
}

func reject(n int64, c activities.PlannedCall, approver string) Approval {
	return Approval{Step: n, Decision: DecisionReject, Approver: approver, ArgsHash: c.ArgsHash}
}

// key is the idempotency key of step n calling tool in the test run.
func key(t *testing.T, n int64, tool string) string {
	t.Helper()
	k, err := keys.New(testTenant, testRunID, n, tool)
	require.NoError(t, err)
	return k.String()
}

func result(step int64) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"ok":true,"step":%d}`, step))
}

// approvalOf returns what s records about its approval, which it must have.
func approvalOf(t *testing.T, s Step) StepApproval {
	t.Helper()
	require.NotNil(t, s.Approval, "step %d has no approval", s.Step)
	return *s.Approval
}

// states lists the state of each step.
func states(st Status) []StepState {
	var out []StepState
	for _, s := range st.Steps {
		out = append(out, s.State)
	}
	return out
}

// outcomes lists the outcome of each observation.
func outcomes(h []planner.Observation) []planner.Outcome {
	var out []planner.Outcome
	for _, o := range h {
		out = append(out, o.Outcome)
	}
	return out
}
