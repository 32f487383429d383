package chaos

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/agents"
	"github.com/oncerun/oncerun/internal/payments"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/workflows"
)

func TestCompareCountsDuplicatesLossesAndWrongAmounts(t *testing.T) {
	var c Counts
	c.compare("refund", "pay_a", 1, tally{n: 1, sum: 2500}, 2500)
	assert.Empty(t, c.violations, "once, with the planned amount")
	c.compare("refund", "pay_b", 1, tally{n: 2, sum: 5000}, 2500)
	c.compare("credit", "o-c", 1, tally{}, 3000)
	c.compare("credit", "o-d", 0, tally{n: 1, sum: 3000}, 3000)
	c.compare("credit", "o-e", 1, tally{n: 1, sum: 2999}, 3000)
	assert.Equal(t, 2, c.Duplicates, "a second refund, and a credit that was rejected")
	assert.Equal(t, 1, c.Lost)
	assert.Equal(t, 3, c.Effects, "the effects that landed as they should: pay_a, one of pay_b's, o-e")
	require.Len(t, c.violations, 4)
	assert.Contains(t, c.violations[0], "refund for pay_b: 2, want 1")
	assert.Contains(t, c.violations[1], "credit for o-c: none")
	assert.Contains(t, c.violations[3], "amount 2999, want 3000")
}

func TestConfigNamesWhatIsWrong(t *testing.T) {
	cfg := Full()
	cfg.Binary, cfg.DatabaseURL, cfg.Dir = "oncerun", "postgres://x", "/tmp/x"
	cfg.RestartCommand = []string{"true"}
	require.NoError(t, cfg.validate())

	cfg.CrashWorkers = cfg.Workers
	cfg.FaultRate = 1.5
	cfg.PGRestart = "reboot"
	err := cfg.validate()
	require.Error(t, err)
	assert.ErrorContains(t, err, "--crash-workers 4: want 0 to 3")
	assert.ErrorContains(t, err, "--fault-rate 1.5")
	assert.ErrorContains(t, err, `--pg-restart "reboot"`)
}

func TestPlansAskForApprovalAboveTheThreshold(t *testing.T) {
	ps := plans("t", 7, 1, rand.New(rand.NewPCG(1, 2)))
	require.Len(t, ps, 7)
	assert.True(t, ps[0].needsApproval(stepCredit))
	assert.False(t, ps[1].needsApproval(stepCredit))
	assert.True(t, ps[3].needsApproval(stepRefund))
	assert.False(t, ps[4].needsApproval(stepRefund))
	assert.False(t, ps[0].needsApproval(stepNote))
	assert.Len(t, ps[0].calls(), 3)
}

func TestCrashPointsAreReadFromTheWorkersLogs(t *testing.T) {
	log := filepath.Join(t.TempDir(), "worker-0.log")
	require.NoError(t, os.WriteFile(log, []byte(strings.Join([]string{
		`{"level":"warn","msg":"fault injection on: this worker will kill itself","point":"after-commit"}`,
		`{"level":"warn","msg":"fault injection: killing this worker after the step committed","point":"after-commit"}`,
		`{"level":"warn","msg":"fault injection: killing this worker during the effect","point":"during-effect"}`,
		`{"level":"warn","msg":"fault injection: killing this worker after the step committed","point":"after-commit"}`,
		`not json at all`,
	}, "\n")), 0o644))
	h := &harness{workers: []*supervised{{proc: &proc{logPath: log}}, {proc: &proc{logPath: log + ".missing"}}}}
	assert.Equal(t, map[string]int{"after-commit": 2, "during-effect": 1}, h.crashPoints())
}

// A delegating run hands its credit and its refund each to a sub-agent of
// the processes' configuration, whose one step waits for an approval; the
// check finds the effects in the child runs' steps.
func TestDelegatingPlansCallTheHarnessesSubAgents(t *testing.T) {
	ps := plans("t", 3, 1, rand.New(rand.NewPCG(1, 2)))
	p := ps[2]
	require.True(t, p.delegate)
	assert.False(t, ps[1].delegate)
	path := filepath.Join(t.TempDir(), "agents.yaml")
	require.NoError(t, os.WriteFile(path, []byte(agentsConfig), 0o600))
	cfg, err := agents.Load(path)
	require.NoError(t, err)
	set, err := agents.New(cfg, func(tool string) bool { return tool == shop.ToolIssueCredit || tool == payments.RefundPayment })
	require.NoError(t, err)

	calls := p.calls()
	require.Len(t, calls, 3)
	assert.Equal(t, shop.ToolAddOrderNote, calls[0].Tool)
	for step, want := range map[int64]string{stepCredit: shop.ToolIssueCredit, stepRefund: payments.RefundPayment} {
		c := calls[step-1]
		ag, ok := set.Lookup(c.Tool)
		require.True(t, ok, "step %d calls a sub-agent: %s", step, c.Tool)
		assert.Equal(t, []string{want}, ag.Tools)
		prepared, err := set.Prepare(c)
		require.NoError(t, err)
		var args struct{ Plan []planner.Call }
		require.NoError(t, json.Unmarshal(prepared.Args, &args))
		require.Len(t, args.Plan, 1)
		assert.Equal(t, want, args.Plan[0].Tool)
		assert.True(t, p.needsApproval(step), "each child's step waits for an approval")
		assert.Equal(t, stepRef{workflows.ChildRunID(p.runID, step), 1}, p.effect(step))
		assert.Equal(t, workflows.ChildRunID(p.runID, step), p.children()[step])
	}
	assert.Equal(t, stepRef{p.runID, stepNote}, p.effect(stepNote))
	assert.Equal(t, stepRef{ps[0].runID, stepCredit}, ps[0].effect(stepCredit))
}

// The crash workers' sets hold every point of ONCERUN_CRASH_AT.
func TestTheCrashSetsHoldEveryPoint(t *testing.T) {
	have := map[string]bool{}
	for _, set := range crashSets {
		for entry := range strings.SplitSeq(set, ",") {
			point, _, _ := strings.Cut(entry, ":")
			have[point] = true
		}
	}
	for _, p := range settings.Points {
		assert.True(t, have[p], "no crash worker carries %s", p)
	}
}

// The check of a delegating run's steps holds each child to its parent:
// named by the step, under that parent, with its one step as decided; a
// rejected child's step fails its parent's step.
func TestTheCheckHoldsEachChildToItsParentsStep(t *testing.T) {
	p := runPlan{runID: "r-p", delegate: true}
	credit, refund := workflows.ChildRunID("r-p", stepCredit), workflows.ChildRunID("r-p", stepRefund)
	want := func(step int64) int {
		if step == stepRefund {
			return 0 // the refund's child was rejected
		}
		return 1
	}
	child := func(id string, step int64, state workflows.StepState) workflows.Status {
		return workflows.Status{RunID: id, State: workflows.RunCompleted, Parent: &workflows.Parent{RunID: "r-p", Step: step},
			Steps: []workflows.Step{{Step: 1, State: state}}}
	}
	good := runEnd{
		status: workflows.Status{RunID: "r-p", State: workflows.RunCompleted, Steps: []workflows.Step{
			{Step: stepNote, State: workflows.StepDone},
			{Step: stepCredit, State: workflows.StepDone, Child: credit},
			{Step: stepRefund, State: workflows.StepFailed, Child: refund},
		}},
		children: map[int64]workflows.Status{
			stepCredit: child(credit, stepCredit, workflows.StepDone),
			stepRefund: child(refund, stepRefund, workflows.StepRejected),
		},
	}
	var c Counts
	c.checkSteps(p, good, want)
	assert.Empty(t, c.violations)
	assert.Equal(t, 2, c.Children)

	bad := good
	bad.children = map[int64]workflows.Status{
		stepCredit: child(credit, stepRefund, workflows.StepDone),
		stepRefund: child(refund, stepRefund, workflows.StepDone),
	}
	bad.status.Steps = append([]workflows.Step(nil), good.status.Steps...)
	bad.status.Steps[2].State = workflows.StepDone
	c = Counts{}
	c.checkSteps(p, bad, want)
	assert.Len(t, c.violations, 3, "%q", c.violations)
	assert.Contains(t, strings.Join(c.violations, "\n"), "does not name run r-p step 2 as its parent")
	assert.Contains(t, strings.Join(c.violations, "\n"), "step 3 (")
	assert.Contains(t, strings.Join(c.violations, "\n"), "want one rejected")

	missing := good
	missing.children = map[int64]workflows.Status{stepCredit: good.children[stepCredit]}
	c = Counts{}
	c.checkSteps(p, missing, want)
	assert.Equal(t, []string{"child run r-p.3 of run r-p step 3: not found"}, c.violations)
}
