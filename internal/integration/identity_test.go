package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/internal/agents"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/workflows"
)

// The step-identity tests put workers of two builds or configurations on
// one task queue, as a rolling deploy does, and kill the first at a point
// where its run's record lags behind the effects it made: the worker that
// takes the run over, whatever its registry, makes no effect twice, and
// the run's record names every effect (docs/agent-runs.md, "Step
// identity").

// loyalty is examples/loyalty's production command: oncerun with a tool
// of its own, award_points, that oncerun's own binary does not have.
var loyalty struct {
	once sync.Once
	path string
	err  error
}

func buildLoyalty(t *testing.T) string {
	t.Helper()
	loyalty.once.Do(func() {
		dir, err := filepath.Abs("../../examples/loyalty")
		if err != nil {
			loyalty.err = err
			return
		}
		out, err := os.MkdirTemp("", "oncerun-it-")
		if err != nil {
			loyalty.err = err
			return
		}
		binMu.Lock()
		binDirs = append(binDirs, out)
		binMu.Unlock()
		loyalty.path = filepath.Join(out, "loyalty")
		build := exec.Command("go", "build", "-o", loyalty.path, ".")
		build.Dir = dir
		build.Env = append(build.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
		if msg, err := build.CombinedOutput(); err != nil {
			loyalty.err = fmt.Errorf("build examples/loyalty: %w\n%s", err, msg)
		}
	})
	require.NoError(t, loyalty.err)
	return loyalty.path
}

func jsonCall(tool, args string) planner.Call {
	return planner.Call{Tool: tool, Args: json.RawMessage(args)}
}

// keysOf lists the keys of the run's steps that are done.
func keysDone(st workflows.Status) []string {
	var out []string
	for _, s := range st.Steps {
		if s.State == workflows.StepDone {
			out = append(out, s.Key)
		}
	}
	return out
}

// The reproduction of the deploy that adds a tool: worker A (the loyalty
// build, which has award_points) makes both steps of a scripted run in
// its workflow task and dies right after the note commits; worker B
// (oncerun's own build, which does not have award_points) takes the run
// over. The note is written once, and the run's record names both steps,
// by the keys their effects were made under.
func TestATakeoverByAWorkerOfAnotherRegistryMakesNoEffectTwice(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := startCommandWorker(t, e, buildLoyalty(t), settings.EnvCrashAt+"=after-commit:"+shop.ToolAddOrderNote)
	a.logged("worker started")
	run := e.id("dh-mix")
	plan := []planner.Call{
		jsonCall("award_points", `{"customer_id":"c-7","points":50,"reason":"late delivery"}`),
		jsonCall(shop.ToolAddOrderNote, `{"order_id":"DH-1","text":"50 points awarded for the late delivery"}`),
	}
	_, err := e.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Plan: plan})
	require.NoError(t, err)
	a.died("after the step committed")
	points, note := stepKey(t, run, 1, "award_points"), stepKey(t, run, 2, shop.ToolAddOrderNote)
	require.Equal(t, 1, e.count("loyalty_points", "idempotency_key = $1", points), "A made step 1")
	require.Equal(t, 1, e.count("order_notes", "idempotency_key = $1", note), "A made step 2")

	startWorkerProcess(t, e, nil)
	st := e.result("acme", run)

	require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
	require.Len(t, st.Steps, 2)
	assert.Equal(t, []string{points, note}, keysDone(st), "the record names both effects, by their keys")
	assert.True(t, st.Steps[0].Replayed && st.Steps[1].Replayed, "B made nothing: both were replayed from the store")
	assert.Equal(t, 1, e.count("order_notes", "tenant = 'acme' AND order_id = 'DH-1'"), "one note")
	assert.Equal(t, 1, e.count("loyalty_points", "customer_id = 'c-7'"), "one award")
}

// A worker whose approval rule is stricter (a lower credit threshold)
// takes over a run whose credit a worker of the looser rule made: the
// credit is that step, never held for an approval it no longer needs.
func TestAWorkerOfAnotherApprovalRuleNeverAsksAgainForAStepMade(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := startWorkerProcess(t, e, nil, settings.EnvCreditThreshold+"=100000",
		settings.EnvCrashAt+"=after-commit:"+shop.ToolIssueCredit)
	run := e.id("rule-split")
	plan := []planner.Call{
		jsonCall(shop.ToolIssueCredit, `{"order_id":"1001","reason":"damaged","amount_cents":25900,"currency":"EUR"}`),
		jsonCall(shop.ToolAddOrderNote, `{"order_id":"1001","text":"credited 259.00"}`),
	}
	_, err := e.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Plan: plan})
	require.NoError(t, err)
	a.died("after the step committed")

	startWorkerProcess(t, e, nil) // the default threshold: 100.00
	st := e.result("acme", run)

	require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
	assert.Equal(t, []workflows.StepState{workflows.StepDone, workflows.StepDone}, []workflows.StepState{st.Steps[0].State, st.Steps[1].State})
	assert.Nil(t, st.Steps[0].Approval, "the credit was made: it is not asked for again")
	assert.Zero(t, e.count("approvals", "run_id = $1", run), "no card in the inbox")
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND order_id = '1001'"), "one credit")
}

// An optional MCP server down when worker B started: B's registry has no
// desk tools. A (the desk up) opened the ticket and died before Temporal
// heard of it; B takes the step's retry and, for the store holds its key
// completed, replays it rather than failing it. The run's next call of
// the desk, which A's planning turn allowed and the history records so,
// meets only B: after a few attempts left for a worker that has the tool,
// it fails, naming why; the last call is step 3, as on any worker.
func TestAnMCPServerDownAtOneWorkersStartChangesNoStep(t *testing.T) {
	t.Parallel()
	w := setupMCP(t, false, false, ticketDesk(true, true))
	a := w.worker(settings.EnvCrashAt + "=after-commit:desk_open_ticket")
	a.logged("worker started")
	run := w.id("desk-split")
	plan := []planner.Call{
		ticketPlan()[0],
		jsonCall("desk_open_ticket", `{"order_id":"1001","subject":"Second","body":"Another."}`),
		jsonCall(shop.ToolAddOrderNote, `{"order_id":"1001","text":"ticket opened"}`),
	}
	_, err := w.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Plan: plan})
	require.NoError(t, err)
	a.died("after the step committed")
	require.Len(t, w.tickets(), 1)

	down := downMCPConfig(t, ticketDesk(true, true))
	b := startWorkerProcess(t, w.env, nil, settings.EnvMCPConfig+"="+down)
	st := w.result("acme", run)
	b.logged("MCP server down at start")

	require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
	require.Len(t, st.Steps, 3)
	assert.Equal(t, workflows.StepDone, st.Steps[0].State, st.Steps[0].Error)
	assert.True(t, st.Steps[0].Replayed, "replayed from the store by a worker without the tool")
	assert.Equal(t, workflows.StepFailed, st.Steps[1].State)
	assert.False(t, st.Steps[1].Refused, "allowed when planned, as the history says")
	assert.Contains(t, st.Steps[1].Error, `tool "desk_open_ticket" is not registered on this worker`)
	assert.Equal(t, stepKey(t, run, 3, shop.ToolAddOrderNote), st.Steps[2].Key)
	assert.Equal(t, workflows.StepDone, st.Steps[2].State)
	tickets := w.tickets()
	require.Len(t, tickets, 1, "one ticket in the desk's own ledger")
	assert.Equal(t, stepKey(t, run, 1, "desk_open_ticket"), tickets[0].Key)
	assert.Contains(t, st.Message, "step 2 desk_open_ticket failed")
}

// downMCPConfig is an MCP configuration naming the desk, optional, at an
// address where nothing listens.
func downMCPConfig(t *testing.T, tools map[string]any) string {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"servers": []any{map[string]any{
		"name": "desk", "transport": "http", "url": "http://" + freeAddr(t) + "/mcp", "optional": true, "tools": tools,
	}}})
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "mcp-down.json")
	require.NoError(t, os.WriteFile(p, raw, 0o600))
	return p
}

// A cancel sent while no worker runs reaches the worker that takes the
// run over with its first workflow task, and is applied before the run
// replays the turn the dead worker made: the steps that worker made are
// in the run's record and its receipt, done, and nothing after them runs.
func TestACancelAppliedFirstInATakeoverRecordsWhatTheDeadWorkerMade(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := startWorkerProcess(t, e, nil, settings.EnvCrashAt+"=after-commit:"+shop.ToolIssueCredit)
	run := e.id("cancel-takeover")
	plan := []planner.Call{
		jsonCall(shop.ToolAddOrderNote, `{"order_id":"1001","text":"crediting"}`),
		jsonCall(shop.ToolIssueCredit, `{"order_id":"1001","reason":"damaged","amount_cents":2500,"currency":"EUR"}`),
		jsonCall(shop.ToolAddOrderNote, `{"order_id":"1001","text":"credited"}`),
	}
	_, err := e.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Plan: plan})
	require.NoError(t, err)
	a.died("after the step committed")

	// No worker runs: the update waits for the next one.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	answered := make(chan error, 1)
	go func() {
		h, err := e.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID: workflows.WorkflowID("acme", run), UpdateName: workflows.UpdateCancel,
			Args: []any{workflows.Control{By: "olga", Reason: "customer withdrew"}}, WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		if err == nil {
			err = h.Get(ctx, nil)
		}
		answered <- err
	}()
	require.Eventually(t, func() bool {
		d, err := e.tc.DescribeWorkflowExecution(ctx, workflows.WorkflowID("acme", run), "")
		return err == nil && len(d.GetPendingWorkflowTask().String()) > 0
	}, time.Minute, 100*time.Millisecond)
	time.Sleep(time.Second) // the update is admitted while no worker polls

	startWorkerProcess(t, e, nil)
	require.NoError(t, <-answered)
	st := e.result("acme", run)

	require.Equal(t, workflows.RunCancelled, st.State, "%+v", st)
	require.NotNil(t, st.Receipt)
	var done []string
	for _, s := range st.Receipt.Steps {
		if s.State == workflows.StepDone {
			done = append(done, s.Key)
		}
	}
	note, credit := stepKey(t, run, 1, shop.ToolAddOrderNote), stepKey(t, run, 2, shop.ToolIssueCredit)
	assert.Equal(t, []string{note, credit}, done, "the receipt names the two effects that exist")
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND order_id = '1001'"))
	assert.Equal(t, 1, e.count("order_notes", "idempotency_key = $1", note))
	assert.Zero(t, e.count("order_notes", "idempotency_key = $1", stepKey(t, run, 3, shop.ToolAddOrderNote)),
		"nothing after the cancel is made")
}

// A child run whose scripted plan calls a tool outside its grant: the
// call is a refused step of the child, the child says which call was not
// made, and its parent's step fails, naming it, rather than reading done.
func TestAChildsRefusedCallFailsItsParentsStep(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.agents = agents.Config{Agents: []agents.Agent{{Name: "notes", Description: "Looks orders up.", Planner: planner.NameScript,
		Tools: []string{shop.ToolLookupOrder}}}}
	e.startWorker("w1", sdkworker.Options{})
	run := e.id("grant")
	child := []planner.Call{jsonCall(shop.ToolAddOrderNote, `{"order_id":"1001","text":"not mine to write"}`)}
	args, err := json.Marshal(map[string]any{"goal": "note the order", "plan": child})
	require.NoError(t, err)
	_, err = e.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run,
		Plan: []planner.Call{{Tool: agents.ToolPrefix + "notes", Args: args}}})
	require.NoError(t, err)

	st := e.result("acme", run)
	cst := e.result("acme", workflows.ChildRunID(run, 1))

	require.Len(t, cst.Steps, 1)
	assert.Equal(t, workflows.StepFailed, cst.Steps[0].State)
	assert.True(t, cst.Steps[0].Refused)
	assert.Contains(t, cst.Steps[0].Error, "is not granted to this run")
	assert.NotContains(t, cst.Message, "every call of the plan was made")
	require.Len(t, st.Steps, 1)
	assert.Equal(t, workflows.StepFailed, st.Steps[0].State, "the parent's step says the child did not do it")
	assert.True(t, strings.Contains(st.Steps[0].Error, "step 1 add_order_note failed: refused"), st.Steps[0].Error)
	assert.Zero(t, e.count("order_notes", "tenant = 'acme' AND order_id = '1001'"))
}

// Two child runs of one parallel turn and their parent's own step propose
// the same note, and both children the same refund, at the same moment;
// the workers die right after the first note commits and right after the
// provider applies the first refund. Each intent is made once, and the
// other steps are duplicates naming the step that made it.
func TestSiblingsAndTheirParentMakeOneIntentOnceUnderKills(t *testing.T) {
	t.Parallel()
	w := setupExternal(t, 0)
	payment := w.pay("pay_tree_1", 20000)
	note := map[string]any{"order_id": "1001", "text": "one note for the whole tree"}
	refund := map[string]any{"order_id": "1001", "payment_id": payment, "amount_cents": 2500, "currency": "EUR", "reason": "damaged"}
	childPlan := []map[string]any{{"tool": shop.ToolAddOrderNote, "args": note}, {"tool": "refund_payment", "args": refund}}
	const goal = "make good on order 1001, once"
	model := w.serveModel(func(_ int, req modelRequest) []modelCall {
		if reports(req) > 0 || req.Messages[1].Content != goal {
			return nil
		}
		return []modelCall{
			{ID: "call_a", Tool: "agent_fixer", Args: map[string]any{"goal": "first child", "plan": childPlan}},
			{ID: "call_b", Tool: "agent_fixer", Args: map[string]any{"goal": "second child", "plan": childPlan}},
			{ID: "call_c", Tool: shop.ToolAddOrderNote, Args: note},
		}
	})
	agentsFile := filepath.Join(t.TempDir(), "agents.yaml")
	require.NoError(t, os.WriteFile(agentsFile, []byte(`agents:
  - name: fixer
    description: Notes and refunds an order.
    tools: [add_order_note, refund_payment]
    planner: script
`), 0o600))
	env := []string{"OPENAI_BASE_URL=" + model.srv.URL + "/v1", "OPENAI_MODEL=fake-model", settings.EnvAgentsConfig + "=" + agentsFile,
		settings.EnvCrashAt + "=after-commit:" + shop.ToolAddOrderNote + ",after-apply:refund_payment"}
	dying := []*workerProcess{startWorkerProcess(t, w.env, w, env...), startWorkerProcess(t, w.env, w, env...)}
	run := w.id("tree")
	_, err := w.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Goal: goal, Planner: planner.NameOpenAI})
	require.NoError(t, err)
	deaths := 0
	for deaths == 0 {
		select {
		case <-dying[0].exited:
			deaths++
		case <-dying[1].exited:
			deaths++
		case <-time.After(2 * time.Minute):
			t.Fatal("no worker died at a crash point")
		}
	}
	startWorkerProcess(t, w.env, w, env[:3]...)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var st workflows.Status
	require.NoError(t, w.tc.GetWorkflow(ctx, workflows.WorkflowID("acme", run), "").Get(ctx, &st))
	w.saveHistory("acme", run)
	require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
	children := []workflows.Status{w.result("acme", workflows.ChildRunID(run, 1)), w.result("acme", workflows.ChildRunID(run, 2))}

	assert.Equal(t, 1, w.count("order_notes", "tenant = 'acme' AND body = 'one note for the whole tree'"), "one note")
	assert.Len(t, w.refunds(payment), 1, "one refund in the provider's own ledger")

	// Every step that proposed an intent: one made it, the others name it.
	type proposed struct {
		run  string
		step workflows.Step
	}
	var notes, refunds []proposed
	for _, s := range st.Steps {
		if s.Tool == shop.ToolAddOrderNote {
			notes = append(notes, proposed{run, s})
		}
	}
	for i, c := range children {
		for _, s := range c.Steps {
			switch s.Tool {
			case shop.ToolAddOrderNote:
				notes = append(notes, proposed{workflows.ChildRunID(run, int64(i+1)), s})
			case "refund_payment":
				refunds = append(refunds, proposed{workflows.ChildRunID(run, int64(i+1)), s})
			}
		}
	}
	for what, list := range map[string][]proposed{"note": notes, "refund": refunds} {
		var made []proposed
		for _, p := range list {
			if p.step.State == workflows.StepDone {
				made = append(made, p)
			}
		}
		var seen []string
		for _, p := range list {
			seen = append(seen, fmt.Sprintf("%s/%d %s", p.run, p.step.Step, p.step.State))
		}
		require.Len(t, made, 1, "%s: exactly one step made it: %s", what, strings.Join(seen, ", "))
		for _, p := range list {
			if p.step.State == workflows.StepDone {
				continue
			}
			require.Equal(t, workflows.StepDuplicate, p.step.State, "%s: run %s step %d", what, p.run, p.step.Step)
			holder := p.step.DuplicateRun
			if holder == "" {
				holder = p.run
			}
			assert.Equal(t, made[0].run, holder, "%s: run %s step %d names the run that made it", what, p.run, p.step.Step)
			assert.Equal(t, made[0].step.Step, p.step.DuplicateOf)
		}
	}
	assert.Len(t, notes, 3)
	assert.Len(t, refunds, 2)
	var noteKey string
	require.NoError(t, w.pool.QueryRow(context.Background(),
		`SELECT idempotency_key FROM order_notes WHERE body = 'one note for the whole tree'`).Scan(&noteKey))
	for _, p := range notes {
		if p.step.State == workflows.StepDone {
			assert.Equal(t, p.step.Key, noteKey, "the note was made under the key of the step that made it")
		}
	}
}
