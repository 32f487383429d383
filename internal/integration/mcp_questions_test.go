package integration

import (
	"encoding/json"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/sandbox/desk"
	"github.com/oncerun/oncerun/workflows"
)

// replacementDesk is the configuration of the desk's ship_replacement,
// which asks a person which size, with its paired read when pairedRead.
func replacementDesk(pairedRead bool) map[string]any {
	ship := map[string]any{"class": "external"}
	tools := map[string]any{"ship_replacement": ship}
	if pairedRead {
		ship["paired_read"] = "find_replacement"
		tools["find_replacement"] = map[string]any{}
	}
	return tools
}

// replacements reads the desk's own ledger of replacements.
func (w *mcpWorld) replacements() []desk.Replacement {
	w.t.Helper()
	r, err := desk.ReadReplacements(w.dir)
	require.NoError(w.t, err)
	return r
}

// kill kills the worker process with SIGKILL and waits for it to die.
func (p *workerProcess) kill() {
	p.t.Helper()
	require.NoError(p.t, p.cmd.Process.Signal(syscall.SIGKILL))
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.t.Fatal("the worker did not die")
	}
}

// startReplacement starts, as ops through the API, a run whose one step
// ships a replacement for order 1001.
func startReplacement(a *approvalsEnv, runID string) {
	a.t.Helper()
	r := a.do(http.MethodPost, "/v1/runs", "ops", map[string]any{"run_id": runID, "goal": "replace the broken plate",
		"plan": []map[string]any{{"tool": "desk_ship_replacement", "args": map[string]any{"order_id": "1001"}}}})
	require.Equal(a.t, http.StatusCreated, r.status, "body: %s", r.body)
}

// pendingQuestion waits until the pending list holds a question of runID,
// and returns it.
func pendingQuestion(a *approvalsEnv, runID string) approvals.Item {
	a.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		var list approvals.ApprovalList
		r := a.do(http.MethodGet, "/v1/approvals?state=pending", "dana", nil)
		require.Equal(a.t, http.StatusOK, r.status, "body: %s", r.body)
		r.json(a.t, &list)
		for _, it := range list.Approvals {
			if it.RunID == runID && it.Kind == approvals.KindQuestion {
				return it
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.t.Fatalf("no question of run %s was listed", runID)
	return approvals.Item{}
}

// answerSize answers the size question of step 1 of runID as dana.
func answerSize(a *approvalsEnv, runID, size string) response {
	a.t.Helper()
	return a.do(http.MethodPost, stepPath(runID, 1, "answer"), "dana",
		map[string]any{"action": "accept", "content": map[string]any{"size": size}, "note": "the customer wears " + size})
}

// A server that answers the call with its question (the desk over stdio,
// the 2026-07-28 protocol) has the step wait in the inbox, durably: the
// worker that made the call dies, a person answers through the API, the
// next worker sends the answer under the step's key, and the desk ships
// one replacement of the size answered.
func TestAServersQuestionWaitsInTheInboxAcrossAWorkerDeath(t *testing.T) {
	t.Parallel()
	w := setupMCP(t, true, false, replacementDesk(true))
	a := w.serveApprovals(func(c *approvals.Config) { c.Tools = w.registry() })
	p := w.worker()
	run := w.id("asked")
	startReplacement(a, run)
	st := w.waitFor("acme", run, "the question", func(s workflows.Status) bool { return s.State == workflows.RunWaitingForInput })
	require.Equal(t, workflows.StepWaitingForInput, st.Steps[0].State)

	it := pendingQuestion(a, run)
	q := it.Question
	require.NotNil(t, q)
	assert.Equal(t, "desk", q.Server)
	assert.False(t, q.Live, "asked in the call's answer: it waits durably")
	assert.Equal(t, "any approver or operator of acme", q.MayAnswer)
	require.Len(t, q.Items, 1)
	assert.Equal(t, desk.SizeQuestion, q.Items[0].Message)
	var schema struct {
		Properties struct {
			Size struct {
				Enum []string `json:"enum"`
			} `json:"size"`
		} `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(q.Items[0].Schema, &schema))
	assert.Equal(t, []string{"S", "M", "L", "XL"}, schema.Properties.Size.Enum, "the server's schema for the answer")
	assert.Equal(t, "replace the broken plate", it.Goal)
	assert.Empty(t, w.replacements(), "nothing shipped before the answer")

	p.kill()
	w.worker()
	r := answerSize(a, run, "M")
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)

	st = w.result("acme", run)
	s := st.Steps[0]
	require.Equal(t, workflows.StepDone, s.State, s.Error)
	shipped := w.replacements()
	require.Len(t, shipped, 1, "one replacement in the desk's own ledger")
	assert.Equal(t, "M", shipped[0].Size, "of the size the person answered")
	assert.Equal(t, stepKey(t, run, 1, "desk_ship_replacement"), shipped[0].Key, "under the step's key")
	assert.Contains(t, string(s.Result), shipped[0].ID)
	require.Len(t, s.Questions, 1)
	assert.Equal(t, workflows.QuestionAnswered, s.Questions[0].State)
	assert.Equal(t, "dana", s.Questions[0].Answerer)
	assert.Equal(t, 1, w.count("questions", "run_id = $1 AND state = 'answered' AND answered_by = 'dana'", run))
	assert.Equal(t, 1, w.count("question_answers", "run_id = $1 AND outcome = 'accepted'", run), "the answer is audited")
	w.saveHistory("acme", run)
}

// A server of an earlier protocol (the desk over Streamable HTTP,
// 2025-11-25) asks over its live session, mid-call: the question waits in
// the inbox while the worker that holds the session lives, and the
// answer reaches the server through it.
func TestALiveQuestionIsAnsweredThroughTheInboxWhileItsWorkerLives(t *testing.T) {
	t.Parallel()
	w := setupMCP(t, false, false, replacementDesk(false))
	a := w.serveApprovals(func(c *approvals.Config) { c.Tools = w.registry() })
	w.worker()
	run := w.id("live")
	startReplacement(a, run)

	it := pendingQuestion(a, run)
	require.NotNil(t, it.Question)
	assert.True(t, it.Question.Live)
	assert.Equal(t, desk.SizeQuestion, it.Question.Items[0].Message)
	r := answerSize(a, run, "L")
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)

	st := w.result("acme", run)
	require.Equal(t, workflows.StepDone, st.Steps[0].State, st.Steps[0].Error)
	shipped := w.replacements()
	require.Len(t, shipped, 1)
	assert.Equal(t, "L", shipped[0].Size)
	assert.Equal(t, 1, w.count("questions", "run_id = $1 AND live AND state = 'answered'", run))
}

// A live question cannot outlive the worker that holds the session: when
// it dies, the question is lost (an answer after is refused), and the
// step's outcome is unknown, for a person; answered not applied, the step
// is sent again, the server asks again, and one replacement ships.
func TestALiveQuestionIsLostWithItsWorker(t *testing.T) {
	t.Parallel()
	w := setupMCP(t, false, false, replacementDesk(false))
	a := w.serveApprovals(func(c *approvals.Config) { c.Tools = w.registry() })
	p := w.worker()
	run := w.id("lost")
	startReplacement(a, run)
	pendingQuestion(a, run)

	p.kill()
	w.worker()
	st := w.waitFor("acme", run, "needs_resolution", func(s workflows.Status) bool { return s.State == workflows.RunNeedsResolution })
	require.NotNil(t, st.Steps[0].Resolution)
	assert.Equal(t, 1, w.count("questions", "run_id = $1 AND state = 'lost'", run), "the question is lost with its worker")
	a.expectError(answerSize(a, run, "S"), http.StatusNotFound, "not_found", "the round is lost")
	assert.Empty(t, w.replacements())

	r := a.do(http.MethodPost, stepPath(run, 1, "resolve"), "dana", map[string]any{"outcome": "not_applied", "note": "nothing at the desk"})
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
	var asked approvals.Item
	require.Eventually(t, func() bool {
		var list approvals.ApprovalList
		a.do(http.MethodGet, "/v1/approvals?state=pending", "dana", nil).json(t, &list)
		for _, it := range list.Approvals {
			if it.RunID == run && it.Kind == approvals.KindQuestion && it.Question.Round == 2 {
				asked = it
				return true
			}
		}
		return false
	}, time.Minute, 100*time.Millisecond, "the server asks again")
	assert.True(t, asked.Question.Live)
	r = a.do(http.MethodPost, stepPath(run, 1, "answer"), "dana", map[string]any{"round": 2, "action": "accept",
		"content": json.RawMessage(`{"size":"S"}`)})
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)

	st = w.result("acme", run)
	require.Equal(t, workflows.StepDone, st.Steps[0].State, st.Steps[0].Error)
	shipped := w.replacements()
	require.Len(t, shipped, 1)
	assert.Equal(t, "S", shipped[0].Size)
	w.saveHistory("acme", run)
}

// A person answers a server's question in the inbox, in a real browser:
// the card says what the server asks and draws its schema as a form whose
// every control is labelled, laid out at a phone's width and a laptop's;
// picking a size and sending it completes the step, and the desk ships
// one replacement of that size.
func TestAQuestionIsAnsweredInTheBrowser(t *testing.T) {
	t.Parallel()
	ctx := headless(t, 3*time.Minute)
	w := setupMCP(t, true, false, replacementDesk(true))
	a := w.serveApprovals(func(c *approvals.Config) { c.Tools = w.registry() })
	w.worker()
	run := w.id("browser-asked")
	startReplacement(a, run)
	pendingQuestion(a, run)

	card := `article[data-kind="question"][data-run="` + run + `"]`
	a.logIn(ctx, "dana", card)
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(card)))
	require.NoError(t, err)
	assert.Contains(t, text, "desk_ship_replacement — step 1 of run "+run+" asks a person")
	assert.Contains(t, text, desk.SizeQuestion)
	assert.Contains(t, text, "May answer: any approver or operator of acme")
	unlabelled, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll(
		'input:not([type=hidden]), textarea, select')).filter(el => el.labels.length === 0).map(el => el.outerHTML)`))
	require.NoError(t, err)
	assert.Empty(t, unlabelled, "form controls without a label")
	dir := screenshotDir(t)
	checkLayoutAtBothSizes(t, ctx, dir, card, "question")

	require.NoError(t, chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS(card+` select`), "L"),
		chromedp.Click(chromedp.CSS(card+` button[value=accept]`)),
		chromedp.WaitVisible(chromedp.CSS(`.flash`)),
	))
	flash, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`.flash`)))
	require.NoError(t, err)
	assert.Contains(t, flash, "Answered step 1 of run "+run+" (round 1)")

	st := w.result("acme", run)
	require.Equal(t, workflows.StepDone, st.Steps[0].State, st.Steps[0].Error)
	shipped := w.replacements()
	require.Len(t, shipped, 1)
	assert.Equal(t, "L", shipped[0].Size)
	assert.Equal(t, 1, w.count("question_answers", "run_id = $1 AND outcome = 'accepted' AND via = 'inbox'", run))
}
