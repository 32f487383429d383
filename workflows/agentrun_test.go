package workflows

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/tools"
)

func TestAgentRunInvalidCallIsARefusedStep(t *testing.T) {
	t.Parallel()
	bad, l := invalid("refund_everything"), lookup("o-1")
	h := setup(t, bad, l)

	st := h.run(t, modelRun())

	require.Len(t, st.Steps, 2)
	r := st.Steps[0]
	assert.Equal(t, int64(1), r.Step)
	assert.Equal(t, StepFailed, r.State)
	assert.True(t, r.Refused)
	assert.Equal(t, RefusedPrefix+bad.Invalid, r.Error)
	assert.Equal(t, key(t, 1, "refund_everything"), r.Key, "a refused call's key is its place's, though nothing runs under it")
	assert.Equal(t, key(t, 2, "lookup_order"), st.Steps[1].Key, "the next call is step 2, whatever the registry said of step 1")
	tools := h.toolCalls()
	require.Len(t, tools, 1, "a refused call never runs")
	assert.Equal(t, int64(2), tools[0].In.Step)
	plans := h.planInputs()
	require.Len(t, plans, 3)
	assert.Equal(t, []int64{1, 2, 3}, []int64{plans[0].FirstStep, plans[1].FirstStep, plans[2].FirstStep})
	assert.Equal(t, []planner.Observation{{
		Step: 1, Turn: 1, Call: planner.Call{Tool: bad.Proposed.Tool, Args: bad.Proposed.Args, ID: "call_1_1"},
		Outcome: planner.OutcomeInvalid, Error: bad.Invalid,
	}}, plans[1].History)
	assert.Equal(t, []planner.Outcome{planner.OutcomeInvalid, planner.OutcomeDone}, outcomes(plans[2].History))
}

func TestAgentRunInvalidCallGetsNoStepInARunBeforeStepIdentity(t *testing.T) {
	t.Parallel()
	bad, l := invalid("refund_everything"), lookup("o-1")
	h := setup(t, bad, l)
	h.beforeStepIdentity()

	st := h.run(t, modelRun())

	require.Len(t, st.Steps, 1)
	assert.Equal(t, int64(1), st.Steps[0].Step)
	assert.Equal(t, key(t, 1, "lookup_order"), st.Steps[0].Key)
	tools := h.toolCalls()
	require.Len(t, tools, 1)
	assert.Equal(t, int64(1), tools[0].In.Step)
	assert.Equal(t, "lookup_order", tools[0].In.Tool)
	plans := h.planInputs()
	require.Len(t, plans, 3)
	assert.Equal(t, 1, plans[1].Proposed)
	assert.Zero(t, plans[1].FirstStep)
	assert.Equal(t, []planner.Observation{{
		Turn: 1, Call: bad.Proposed, Outcome: planner.OutcomeInvalid, Error: bad.Invalid,
	}}, plans[1].History)
	assert.Equal(t, []planner.Outcome{planner.OutcomeInvalid, planner.OutcomeDone}, outcomes(plans[2].History))
}

func TestAgentRunStepsRunUnderTheirKeys(t *testing.T) {
	t.Parallel()
	l1, bad, c, l2 := lookup("o-1"), invalid("nope"), credit("o-1"), lookup("o-2")
	h := setup(t, l1, bad, c, l2)
	h.signalAt(time.Hour, approve(3, c, "alice"))

	st := h.run(t, modelRun())

	want := []string{key(t, 1, "lookup_order"), key(t, 2, "nope"), key(t, 3, "issue_credit"), key(t, 4, "lookup_order")}
	assert.Equal(t, []string{want[0], want[2], want[3]}, h.stepKeys(t), "the refused step 2 runs nothing")
	var got []string
	for i, s := range st.Steps {
		assert.Equal(t, int64(i+1), s.Step)
		got = append(got, s.Key)
	}
	assert.Equal(t, want, got)
	assert.Contains(t, want[0], "acme%2Feu/run%207%2Fretry", "tenant and run id are escaped")
}

func TestAgentRunRecordsToolResult(t *testing.T) {
	t.Parallel()
	for _, replayed := range []bool{false, true} {
		t.Run(fmt.Sprintf("replayed=%t", replayed), func(t *testing.T) {
			t.Parallel()
			l := lookup("o-1")
			h := setup(t, l)
			h.toolTime = time.Minute
			h.replayed = replayed

			st := h.run(t, modelRun())

			require.Len(t, st.Steps, 1)
			s := st.Steps[0]
			assert.Equal(t, StepDone, s.State)
			assert.JSONEq(t, string(result(1)), string(s.Result))
			assert.Empty(t, s.Summary, "the run keeps no summary of its own")
			v, err := h.env.QueryWorkflow(QueryStatus)
			require.NoError(t, err)
			var q Status
			require.NoError(t, v.Get(&q))
			assert.Equal(t, string(result(1)), q.Steps[0].Summary, "the status query answers with each result's summary")
			assert.Equal(t, replayed, s.Replayed)
			assert.Equal(t, t0, s.StartedAt)
			assert.Equal(t, t0.Add(time.Minute), s.FinishedAt)
		})
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", summaryLen-1) + "é" // é straddles the cut
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"short", "short"},
		{strings.Repeat("a", summaryLen), strings.Repeat("a", summaryLen)},
		{strings.Repeat("a", summaryLen+1), strings.Repeat("a", summaryLen) + "…"},
		{long + "tail", strings.Repeat("a", summaryLen-1) + "…"},
	} {
		assert.Equal(t, tc.want, summarize(tc.in), "summarize(%q)", tc.in)
	}
}

func TestAgentRunToolTimeoutIsTheToolsTimeout(t *testing.T) {
	t.Parallel()
	l := lookup("o-1")
	l.Timeout = 45 * time.Second
	h := setup(t, l)

	h.run(t, modelRun())

	infos := h.startedInfos("RunTool")
	require.Len(t, infos, 1)
	assert.Equal(t, 45*time.Second, infos[0].StartToCloseTimeout)
}

func TestAgentRunStopsAtLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		call      activities.PlannedCall
		batch     bool // all calls in one turn
		wantSteps int
		wantPlans int // valid or not, at most 2×MaxSteps calls are proposed
		wantMsg   string
	}{
		{"valid calls stop at max steps", lookup("o-1"), false, 3, 3, "stopped at the limit of 3 steps"},
		{"one turn past max steps", lookup("o-1"), true, 3, 1, "stopped at the limit of 3 steps"},
		{"refused calls are steps and stop at max steps", invalid("nope"), false, 3, 3, "stopped at the limit of 3 steps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			calls := make([]activities.PlannedCall, 20)
			for i := range calls {
				calls[i] = tc.call
			}
			h := setup(t, calls...)
			h.batch = tc.batch
			in := modelRun()
			in.Limits.MaxSteps = 3

			st := h.run(t, in)

			assert.Len(t, st.Steps, tc.wantSteps)
			ran := tc.wantSteps
			if tc.call.Invalid != "" {
				ran = 0
			}
			assert.Len(t, h.toolCalls(), ran)
			assert.Len(t, h.planInputs(), tc.wantPlans)
			assert.Equal(t, RunCompleted, st.State)
			assert.Equal(t, tc.wantMsg, st.Message)
		})
	}
}

// In a run that began before step identity, invalid calls get no step,
// and twice MaxSteps proposals end the run.
func TestAgentRunBeforeStepIdentityStopsInvalidCallsAtTwiceMaxSteps(t *testing.T) {
	t.Parallel()
	calls := make([]activities.PlannedCall, 20)
	for i := range calls {
		calls[i] = invalid("nope")
	}
	h := setup(t, calls...)
	h.beforeStepIdentity()
	in := modelRun()
	in.Limits.MaxSteps = 3

	st := h.run(t, in)

	assert.Empty(t, st.Steps)
	assert.Empty(t, h.toolCalls())
	assert.Len(t, h.planInputs(), 6)
	assert.Equal(t, "stopped after 6 proposed calls, 6 of them invalid", st.Message)
}

func TestAgentRunFailedToolDoesNotStopRun(t *testing.T) {
	t.Parallel()
	l1, l2 := lookup("o-1"), lookup("o-2")
	h := setup(t, l1, l2)
	h.onTool = func(_ *testsuite.TestWorkflowEnvironment, in activities.ToolInput) error {
		if in.Step == 1 {
			return temporal.NewNonRetryableApplicationError("x", activities.ErrTypeKeyReuse, nil)
		}
		return nil
	}

	st := h.run(t, modelRun())

	assert.Equal(t, RunCompleted, st.State)
	require.Equal(t, []StepState{StepFailed, StepDone}, states(st))
	assert.Contains(t, st.Steps[0].Error, "x")
	assert.Len(t, h.toolCalls(), 2, "a non-retryable failure is not retried")
	plans := h.planInputs()
	require.Len(t, plans, 3)
	require.Len(t, plans[1].History, 1)
	assert.Equal(t, planner.OutcomeFailed, plans[1].History[0].Outcome)
	assert.Equal(t, st.Steps[0].Error, plans[1].History[0].Error)
}

func TestAgentRunEndsWhenPlannerStops(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		silent bool
		want   string
	}{
		{"planner says done", false, "all done"},
		{"planner proposes nothing", true, "nothing more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := lookup("o-1")
			h := setup(t, l)
			h.silent = tc.silent

			st := h.run(t, modelRun())

			assert.Equal(t, RunCompleted, st.State)
			assert.Equal(t, tc.want, st.Message)
			assert.Equal(t, []StepState{StepDone}, states(st))
			assert.Len(t, h.planInputs(), 2)
		})
	}
}

func TestAgentRunFailsWhenPlannerFails(t *testing.T) {
	t.Parallel()
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(testLogger(t))
	env := suite.NewTestWorkflowEnvironment()
	env.OnActivity(a.Plan, mock.Anything, mock.Anything).Return(activities.PlanOutput{},
		temporal.NewNonRetryableApplicationError("bad api key", activities.ErrTypePlanner, nil))

	env.ExecuteWorkflow(AgentRun, modelRun())

	require.True(t, env.IsWorkflowCompleted())
	err := env.GetWorkflowError()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "plan turn 1")
	env.AssertActivityNumberOfCalls(t, "Plan", 1)
	v, err := env.QueryWorkflow(QueryStatus)
	require.NoError(t, err)
	var st Status
	require.NoError(t, v.Get(&st))
	assert.Equal(t, RunFailed, st.State)
	assert.Contains(t, st.Error, "bad api key")
}

func TestAgentRunRefusesInvalidInput(t *testing.T) {
	t.Parallel()
	valid := scripted(lookup("o-1"))
	for _, tc := range []struct {
		name   string
		change func(in *RunInput)
	}{
		{"empty tenant", func(in *RunInput) { in.Tenant = "" }},
		{"empty run id", func(in *RunInput) { in.RunID = "" }},
		{"script without plan", func(in *RunInput) { in.Plan = nil }},
		{"openai without goal", func(in *RunInput) { in.Planner, in.Goal = planner.NameOpenAI, "" }},
		{"unknown planner", func(in *RunInput) { in.Planner = "oracle" }},
		{"plan step without tool", func(in *RunInput) { in.Plan = []planner.Call{{}} }},
		{"negative max steps", func(in *RunInput) { in.Limits.MaxSteps = -1 }},
		{"deadline too long", func(in *RunInput) { in.Limits.ApprovalDeadline = MaxApprovalDeadline + time.Hour }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t)
			in := valid
			tc.change(&in)

			h.env.ExecuteWorkflow(AgentRun, in)

			require.True(t, h.env.IsWorkflowCompleted())
			var appErr *temporal.ApplicationError
			require.True(t, errors.As(h.env.GetWorkflowError(), &appErr), "got %v", h.env.GetWorkflowError())
			assert.Equal(t, "InvalidInput", appErr.Type())
			assert.True(t, appErr.NonRetryable())
			assert.Empty(t, h.planInputs())
		})
	}
}

// Steps, planning turns and deliveries heartbeat: a worker that dies is
// noticed after the short heartbeat timeout, not after the attempt's whole
// StartToClose timeout.
func TestActivitiesOfARunHaveAShortHeartbeatTimeout(t *testing.T) {
	t.Parallel()
	h := setup(t, lookup("o-1"), refund("o-1"))
	withResolutions(h)
	h.followUps = []activities.FollowUpMessage{{Seq: 1, Tool: "send_email", Key: key(t, 1, "send_email.1")}}
	h.run(t, modelRun())
	for _, typ := range []string{"Plan", "RunTool", "Deliver"} {
		infos := h.startedInfos(typ)
		require.NotEmpty(t, infos, typ)
		for _, info := range infos {
			if info.IsLocalActivity {
				continue // no heartbeat: its worker holds the workflow task
			}
			assert.Equal(t, heartbeatTimeout, info.HeartbeatTimeout, "%s attempt %d", typ, info.Attempt)
			assert.Less(t, activities.HeartbeatEvery*3, info.HeartbeatTimeout, "room for a heartbeat to be late")
		}
	}
}

// The steps of database tools (read, natural, keyed) run as local
// activities, in the workflow task; an external tool's step is an activity
// whose ID is its key.
func TestDatabaseStepsRunAsLocalActivities(t *testing.T) {
	t.Parallel()
	note := call("add_order_note", `{"order_id":"o-1","text":"wet"}`, tools.ClassKeyed)
	remoteRead := call("get_refund", `{"order_id":"o-1"}`, tools.ClassRead)
	remoteRead.Local = false // a read that calls a provider
	h := setup(t, lookup("o-1"), note, credit("o-2"), refund("o-1"), remoteRead)
	h.signalAt(time.Hour, approve(3, credit("o-2"), "alice"))
	withResolutions(h)

	st := h.run(t, modelRun())

	assert.Equal(t, []StepState{StepDone, StepDone, StepDone, StepDone, StepDone}, states(st))
	var local, remote []string
	for _, info := range h.startedInfos("RunTool") {
		if info.IsLocalActivity {
			local = append(local, info.ActivityType.Name)
			continue
		}
		remote = append(remote, info.ActivityID)
	}
	assert.Len(t, local, 3, "the lookup, the note and the approved credit")
	assert.Equal(t, []string{key(t, 4, "refund_payment"), key(t, 5, "get_refund")}, remote,
		"the refund and the read that calls out are activities under their keys")
	assert.Equal(t, []string{key(t, 1, "lookup_order"), key(t, 2, "add_order_note"), key(t, 3, "issue_credit"),
		key(t, 4, "refund_payment"), key(t, 5, "get_refund")}, h.stepKeys(t))
}

// A script's turns run as local activities, with no round trip through the
// server; a model's stay regular activities.
func TestScriptedTurnsRunAsLocalActivities(t *testing.T) {
	t.Parallel()
	for _, scriptedRun := range []bool{true, false} {
		t.Run(map[bool]string{true: "script", false: "model"}[scriptedRun], func(t *testing.T) {
			t.Parallel()
			calls := []activities.PlannedCall{lookup("o-1"), lookup("o-2")}
			h := setup(t, calls...)
			var mu sync.Mutex
			local := 0
			h.env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
				mu.Lock()
				defer mu.Unlock()
				if info.ActivityType.Name == "Plan" {
					local++
				}
			})
			in := modelRun()
			if scriptedRun {
				in = scripted(calls...)
			}
			st := h.run(t, in)
			require.Len(t, st.Steps, 2)
			mu.Lock()
			defer mu.Unlock()
			if scriptedRun {
				assert.Equal(t, 2, local, "one turn for both calls, and the turn that ends the plan")
				assert.Empty(t, h.startedInfos("Plan"))
			} else {
				assert.Zero(t, local)
				assert.Len(t, h.startedInfos("Plan"), 3)
			}
		})
	}
}
