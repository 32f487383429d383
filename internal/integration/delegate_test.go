package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/agents"
	"github.com/oncerun/oncerun/workflows"
)

// reports counts the tool messages of req: the outcomes of the calls the
// model proposed before.
func reports(req modelRequest) int {
	n := 0
	for _, m := range req.Messages {
		if m.Role == "tool" {
			n++
		}
	}
	return n
}

// delegatingModel answers the parent run's goal with one turn of two
// delegations, each child's goal with one credit, and every later turn
// with done.
func delegatingModel(parentGoal string, children map[string]modelCall) func(int, modelRequest) []modelCall {
	return func(_ int, req modelRequest) []modelCall {
		goal := req.Messages[1].Content
		if reports(req) > 0 {
			return nil // the turn after the calls: done
		}
		if goal == parentGoal {
			return []modelCall{
				{ID: "call_refunds", Tool: "agent_refunds", Args: map[string]any{"goal": "credit the shipping"}},
				{ID: "call_goodwill", Tool: "agent_goodwill", Args: map[string]any{"goal": "a goodwill credit"}},
			}
		}
		if c, ok := children[goal]; ok {
			return []modelCall{c}
		}
		return nil
	}
}

// A parent delegates to two sub-agents in one turn; each child proposes a
// credit that needs approval; both wait in the tenant's inbox with their
// lineage and the parent's goal; one is approved and one rejected; the
// parent learns both outcomes, and exactly one credit exists.
func TestAParentDelegatesToTwoChildrenWhoseApprovalsShareTheInbox(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.agents = agents.Config{Agents: []agents.Agent{
		{Name: "refunds", Description: "Refunds and credits for shipping problems.", Tools: []string{"issue_credit", "lookup_order"},
			Model: "fake-refunds-model"},
		{Name: "goodwill", Description: "Goodwill gestures.", Tools: []string{"issue_credit"}},
	}}
	const parentGoal = "make good on order 1001"
	model := e.serveModel(delegatingModel(parentGoal, map[string]modelCall{
		"credit the shipping": creditCall("call_ship", "shipping"),
		"a goodwill credit":   creditCall("call_gw", "goodwill"),
	}))
	e.startWorker("w1", sdkworker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("delegate")
	a.startModelRun(run, parentGoal)
	refunds, goodwill := workflows.ChildRunID(run, 1), workflows.ChildRunID(run, 2)

	e.waitFor("acme", run, "both children wait for approval", func(workflows.Status) bool {
		return e.count("approvals", "tenant = 'acme' AND run_id IN ($1, $2) AND state = 'pending'", refunds, goodwill) == 2
	})
	var list struct {
		Approvals []approvals.Item `json:"approvals"`
	}
	a.do(http.MethodGet, "/v1/approvals", "dana", nil).json(t, &list)
	require.Len(t, list.Approvals, 2, "both children's credits are in the one inbox")
	byRun := map[string]approvals.Item{}
	for _, it := range list.Approvals {
		byRun[it.RunID] = it
	}
	for i, child := range []string{refunds, goodwill} {
		it, ok := byRun[child]
		require.True(t, ok, "child %s's credit is listed", child)
		assert.Equal(t, "issue_credit", it.Tool)
		assert.Equal(t, []approvals.Hop{{RunID: run, Step: int64(i + 1)}}, it.Lineage, "the card names its lineage")
		assert.Equal(t, parentGoal, it.ParentGoal, "the parent's goal beside the child's")
	}
	approve := a.do(http.MethodPost, stepPath(refunds, 1, "approve"), "dana",
		approvals.DecideRequest{ArgsHash: byRun[refunds].ArgsHash, Comment: "shipping was late"})
	require.Equal(t, http.StatusAccepted, approve.status, "%s", approve.body)
	reject := a.do(http.MethodPost, stepPath(goodwill, 1, "reject"), "dana",
		approvals.DecideRequest{ArgsHash: byRun[goodwill].ArgsHash, Comment: "no goodwill this time"})
	require.Equal(t, http.StatusAccepted, reject.status, "%s", reject.body)

	final := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, final.State, "error: %s", final.Error)
	require.Len(t, final.Steps, 2)
	shipped, refused := final.Steps[0], final.Steps[1]
	assert.Equal(t, refunds, shipped.Child, "the status carries the tree")
	assert.Equal(t, goodwill, refused.Child)
	assert.Equal(t, workflows.StepDone, shipped.State, shipped.Error)
	var out workflows.Delegated
	require.NoError(t, json.Unmarshal(shipped.Result, &out))
	assert.Equal(t, refunds, out.RunID)
	require.Len(t, out.Effects, 1)
	assert.Equal(t, "issue_credit", out.Effects[0].Tool)
	assert.Equal(t, string(workflows.StepDone), out.Effects[0].State)
	assert.Equal(t, stepKey(t, refunds, 1, "issue_credit"), out.Effects[0].Key, "the child's step is keyed under its own run id")
	assert.Equal(t, workflows.StepFailed, refused.State, "a rejected child ends its step failed")
	assert.Contains(t, refused.Error, "rejected by dana (no goodwill this time)")

	assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND order_id = '1001' AND reason IN ('shipping', 'goodwill')"),
		"exactly one credit")
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND order_id = '1001' AND reason = 'shipping'"))

	e.saveHistoryOf(workflows.WorkflowID("acme", run), t.Name()+"-parent")
	e.saveHistoryOf(workflows.WorkflowID("acme", refunds), t.Name()+"-approved-child")
	e.saveHistoryOf(workflows.WorkflowID("acme", goodwill), t.Name()+"-rejected-child")
	child := e.result("acme", goodwill)
	require.NotNil(t, child.Parent)
	assert.Equal(t, run, child.Parent.RunID)
	assert.Equal(t, "goodwill", child.Parent.Agent)

	// The parent's planner learned both outcomes: its second turn carries
	// a tool message for each delegation.
	var second *modelRequest
	for _, req := range model.seen() {
		if req.Messages[1].Content == parentGoal && len(req.Messages) > 2 {
			second = &req
		}
	}
	require.NotNil(t, second, "the parent planned again")
	models := map[string]string{}
	for _, req := range model.seen() {
		models[req.Messages[1].Content] = req.Model
	}
	assert.Equal(t, map[string]string{parentGoal: "fake-model", "credit the shipping": "fake-refunds-model", "a goodwill credit": "fake-model"},
		models, "a sub-agent that names a model is planned by it; the others by the worker's")
	var reports []string
	for _, m := range second.Messages {
		if m.Role == "tool" {
			reports = append(reports, m.Content)
		}
	}
	require.Len(t, reports, 2)
	assert.Contains(t, reports[0], refunds)
	assert.Contains(t, reports[1], "rejected by dana")
}

// A child asking for a tool outside its grant is refused (a refused step
// of the child, which its parent's step lists among the child's effects),
// and its planner is told why; the parent's own tools are not the
// child's.
func TestAChildMayUseOnlyTheToolsItIsGranted(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.agents = agents.Config{Agents: []agents.Agent{
		{Name: "goodwill", Description: "Goodwill gestures.", Tools: []string{"lookup_order"}},
	}}
	const parentGoal = "look into order 1001"
	model := e.serveModel(func(_ int, req modelRequest) []modelCall {
		if reports(req) > 0 {
			return nil
		}
		if req.Messages[1].Content == parentGoal {
			return []modelCall{{ID: "call_gw", Tool: "agent_goodwill", Args: map[string]any{"goal": "credit them"}}}
		}
		return []modelCall{creditCall("call_credit", "sneaky")}
	})
	e.startWorker("w1", sdkworker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("grant")
	a.startModelRun(run, parentGoal)

	final := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, final.State, "error: %s", final.Error)
	child := e.result("acme", workflows.ChildRunID(run, 1))
	require.Len(t, child.Steps, 1)
	assert.Equal(t, workflows.StepFailed, child.Steps[0].State, "the credit is a refused step of the child, which never ran")
	assert.True(t, child.Steps[0].Refused)
	assert.Contains(t, string(final.Steps[0].Result), `refused: tool \"issue_credit\" is not granted to this run`,
		"the parent learns, in its child's effects, what its child was refused")
	assert.Zero(t, e.count("credits", "tenant = 'acme' AND reason = 'sneaky'"))
	assert.Zero(t, e.count("approvals", "tenant = 'acme' AND run_id = $1", workflows.ChildRunID(run, 1)))
	var told bool
	for _, req := range model.seen() {
		for _, m := range req.Messages {
			told = told || (req.Messages[1].Content == "credit them" && strings.Contains(m.Content, `tool \"issue_credit\" is not granted`)) ||
				(req.Messages[1].Content == "credit them" && strings.Contains(m.Content, `tool "issue_credit" is not granted`))
		}
	}
	assert.True(t, told, "the child's planner was told the tool is not granted")
}

// Fan-out is bounded: past max_children a delegation ends its step failed
// with the reason, and starts no child.
func TestDelegationsPastTheFanOutBoundStartNoChild(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.agents = agents.Config{MaxChildren: 1, Agents: []agents.Agent{
		{Name: "refunds", Description: "Refunds.", Tools: []string{"lookup_order"}},
		{Name: "goodwill", Description: "Goodwill.", Tools: []string{"lookup_order"}},
	}}
	const parentGoal = "look twice"
	lookup := modelCall{ID: "call_look", Tool: "lookup_order", Args: map[string]any{"order_id": "1001"}}
	e.serveModel(delegatingModel(parentGoal, map[string]modelCall{"credit the shipping": lookup, "a goodwill credit": lookup}))
	e.startWorker("w1", sdkworker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("fanout")
	a.startModelRun(run, parentGoal)

	final := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, final.State, "error: %s", final.Error)
	require.Len(t, final.Steps, 2)
	assert.Equal(t, workflows.StepDone, final.Steps[0].State, final.Steps[0].Error)
	assert.Equal(t, workflows.StepFailed, final.Steps[1].State)
	assert.Contains(t, final.Steps[1].Error, "has started 1 child runs, the bound")
	assert.Empty(t, final.Steps[1].Child, "no child was started")
	_, err := e.tc.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID("acme", workflows.ChildRunID(run, 2)), "")
	assert.Error(t, err, "Temporal has no second child")
}

// A child's amounts count against its parent's run budget: the parent's
// budget of 100.00 EUR holds one credit of 60.00 made by its child, and
// the child's second waits at the limit, naming the run's budget.
func TestAChildsAmountsCountAgainstItsParentsBudget(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.agents = agents.Config{Agents: []agents.Agent{
		{Name: "refunds", Description: "Refunds.", Tools: []string{"issue_credit"}},
	}}
	const parentGoal = "credit twice"
	credit := func(id, reason string) modelCall {
		return modelCall{ID: id, Tool: "issue_credit", Args: map[string]any{
			"order_id": "1001", "reason": reason, "amount_cents": 6000, "currency": "EUR"}}
	}
	e.serveModel(func(_ int, req modelRequest) []modelCall {
		if reports(req) > 0 {
			return nil
		}
		if req.Messages[1].Content == parentGoal {
			return []modelCall{{ID: "call_refunds", Tool: "agent_refunds", Args: map[string]any{"goal": "two credits"}}}
		}
		return []modelCall{credit("call_a", "budget-a"), credit("call_b", "budget-b")}
	})
	e.startWorker("w1", sdkworker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("budget")
	r := a.do(http.MethodPost, "/v1/runs", "ops", map[string]any{"run_id": run, "goal": parentGoal, "planner": "openai",
		"limits": map[string]any{"spend": map[string]int64{"EUR": 10000}}})
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	child := workflows.ChildRunID(run, 1)

	e.waitFor("acme", child, "the child's second credit waits at the parent's budget", func(workflows.Status) bool {
		return e.count("approvals", "tenant = 'acme' AND run_id = $1 AND state = 'pending' AND kind = 'limit'", child) == 1
	})
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND reason IN ('budget-a', 'budget-b')"), "one credit fits the budget")
	assert.Equal(t, 1, e.count("approvals", "tenant = 'acme' AND run_id = $1 AND reason LIKE 'over the run''s budget: 60.00 of 100.00 EUR spent%'", child))
	assert.Equal(t, 1, e.count("spend_entries", "tenant = 'acme' AND run_id = $1 AND budget_run = $2", child, run),
		"the child's credit is counted against the parent's run")
}

// A child's card in the inbox names its lineage and its parent's goal, and
// the run pages show the tree, at a phone's width and a laptop's.
func TestAChildsCardAndTheTreeInTheBrowser(t *testing.T) {
	t.Parallel()
	ctx := headless(t, 3*time.Minute)
	e := setup(t)
	e.agents = agents.Config{Agents: []agents.Agent{
		{Name: "refunds", Description: "Refunds and credits for shipping problems.", Tools: []string{"issue_credit"}},
	}}
	const parentGoal = "make good on order 1001 for a customer whose parcel came a week late"
	e.serveModel(func(_ int, req modelRequest) []modelCall {
		if reports(req) > 0 {
			return nil
		}
		if req.Messages[1].Content == parentGoal {
			return []modelCall{{ID: "call_refunds", Tool: "agent_refunds", Args: map[string]any{"goal": "credit the shipping"}}}
		}
		return []modelCall{creditCall("call_ship", "shipping")}
	})
	e.startWorker("w1", sdkworker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("tree")
	a.startModelRun(run, parentGoal)
	child := workflows.ChildRunID(run, 1)
	// The inbox lists what is pending when the page loads: wait for the
	// child's credit to be recorded first.
	e.waitFor("acme", child, "the child's credit waits", func(workflows.Status) bool {
		return e.count("approvals", "tenant = 'acme' AND run_id = $1 AND state = 'pending'", child) == 1
	})

	card := `article[data-run="` + child + `"][data-step="1"]`
	a.logIn(ctx, "dana", card)
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(card)))
	require.NoError(t, err)
	assert.Contains(t, text, "Delegated: run "+run+" › step 1 › "+child+" step 1")
	assert.Contains(t, text, "Parent run's goal: "+parentGoal)
	assert.Contains(t, text, "Goal: credit the shipping")
	dir := screenshotDir(t)
	checkLayoutAtBothSizes(t, ctx, dir, card, "child-card")

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(a.srv.URL+"/runs/"+run),
		chromedp.WaitVisible(chromedp.CSS(`p.child-run[data-child="`+child+`"]`))))
	parent, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`main`)))
	require.NoError(t, err)
	assert.Contains(t, parent, "Delegated to child run "+child)
	checkLayoutAtBothSizes(t, ctx, dir, `p.child-run`, "run-parent")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`p.child-run a`)),
		chromedp.WaitVisible(chromedp.CSS(`p.parent-run[data-parent="`+run+`"]`))))
	up, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`p.parent-run`)))
	require.NoError(t, err)
	assert.Contains(t, up, "Child run of "+run+" step 1, as sub-agent refunds, whose goal is: "+parentGoal)
	checkLayoutAtBothSizes(t, ctx, dir, `p.parent-run`, "run-child")
}

// A pause, a resume and a cancel of the parent go down to its running
// child: the child pauses and resumes with it, and the cancel withdraws
// the child's approval; nothing is credited.
func TestPauseAndCancelGoDownToTheChildren(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.agents = agents.Config{Agents: []agents.Agent{
		{Name: "refunds", Description: "Refunds.", Tools: []string{"issue_credit"}},
	}}
	const parentGoal = "credit the shipping, maybe"
	e.serveModel(delegatingModel(parentGoal, map[string]modelCall{
		"credit the shipping": creditCall("call_ship", "down"),
		"a goodwill credit":   creditCall("call_gw", "down-too"),
	}))
	e.startWorker("w1", sdkworker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("down")
	a.startModelRun(run, parentGoal)
	child := workflows.ChildRunID(run, 1)
	e.waitFor("acme", child, "the child's credit waits", func(s workflows.Status) bool {
		return len(s.Steps) == 1 && s.Steps[0].State == workflows.StepPendingApproval
	})

	r := a.do(http.MethodPost, "/v1/runs/"+run+"/pause", "ops", map[string]any{"reason": "audit"})
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	paused := e.waitFor("acme", child, "the child is paused with its parent", func(s workflows.Status) bool { return s.Paused != nil })
	assert.Equal(t, "ops", paused.Paused.By)
	r = a.do(http.MethodPost, "/v1/runs/"+run+"/resume", "ops", map[string]any{"reason": "audit done"})
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	e.waitFor("acme", child, "the child is resumed with its parent", func(s workflows.Status) bool { return s.Paused == nil })

	r = a.do(http.MethodPost, "/v1/runs/"+run+"/cancel", "ops", map[string]any{"reason": "customer withdrew"})
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	final := e.result("acme", run)
	assert.Equal(t, workflows.RunCancelled, final.State)
	e.saveHistoryOf(workflows.WorkflowID("acme", run), t.Name()+"-parent")
	e.saveHistoryOf(workflows.WorkflowID("acme", child), t.Name()+"-child")
	ended := e.result("acme", child)
	assert.Equal(t, workflows.RunCancelled, ended.State, "the child is cancelled with its parent")
	assert.Equal(t, workflows.StepCancelled, ended.Steps[0].State)
	for _, c := range []string{child, workflows.ChildRunID(run, 2)} {
		assert.Zero(t, e.count("approvals", "tenant = 'acme' AND run_id = $1 AND state = 'pending'", c), "%s's approvals are withdrawn", c)
	}
	assert.Zero(t, e.count("credits", "tenant = 'acme' AND reason IN ('down', 'down-too')"))
}

// A tool that makes each intent once per run makes it once per run tree:
// a child does not repeat a note its parent made, and the parent does not
// repeat one its child made.
func TestOncePerRunHoldsAcrossTheRunTree(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.agents = agents.Config{Agents: []agents.Agent{
		{Name: "notes", Description: "Notes.", Tools: []string{"add_order_note"}},
	}}
	const parentGoal = "note it all"
	note := func(id, text string) modelCall {
		return modelCall{ID: id, Tool: "add_order_note", Args: map[string]any{"order_id": "1001", "text": text}}
	}
	e.serveModel(func(_ int, req modelRequest) []modelCall {
		reports := reports(req)
		if req.Messages[1].Content != parentGoal {
			if reports > 0 {
				return nil
			}
			return []modelCall{note("call_c1", "tree: parent's"), note("call_c2", "tree: child's")}
		}
		switch reports {
		case 0:
			return []modelCall{note("call_p1", "tree: parent's")}
		case 1:
			return []modelCall{{ID: "call_notes", Tool: "agent_notes", Args: map[string]any{"goal": "write the notes"}}}
		case 2:
			return []modelCall{note("call_p3", "tree: child's")}
		}
		return nil
	})
	e.startWorker("w1", sdkworker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("tree-once")
	a.startModelRun(run, parentGoal)

	final := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, final.State, "error: %s", final.Error)
	require.Len(t, final.Steps, 3)
	child := workflows.ChildRunID(run, 2)
	cs := e.result("acme", child)
	require.Len(t, cs.Steps, 2)
	assert.Equal(t, workflows.StepDuplicate, cs.Steps[0].State, "the child does not repeat its parent's note")
	assert.Equal(t, run, cs.Steps[0].DuplicateRun)
	assert.Equal(t, int64(1), cs.Steps[0].DuplicateOf)
	assert.Equal(t, workflows.StepDone, cs.Steps[1].State)
	assert.Equal(t, workflows.StepDuplicate, final.Steps[2].State, "the parent does not repeat its child's note")
	assert.Equal(t, child, final.Steps[2].DuplicateRun)
	assert.Equal(t, 1, e.count("order_notes", "tenant = 'acme' AND body = $1", "tree: parent's"))
	assert.Equal(t, 1, e.count("order_notes", "tenant = 'acme' AND body = $1", "tree: child's"))
}
