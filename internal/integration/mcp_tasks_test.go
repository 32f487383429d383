package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/mcptest"
	"github.com/oncerun/oncerun/worker"
	"github.com/oncerun/oncerun/workflows"
)

// setupTasks is a world whose MCP server "ship" is tasks-server.mjs, over
// stdio (each worker's child process) or over HTTP (served for the test);
// w.dir holds its ledger of shipped parcels.
func setupTasks(t *testing.T, stdio bool, tools map[string]any) *mcpWorld {
	t.Helper()
	e := setup(t)
	w := &mcpWorld{env: e, test: t, dir: t.TempDir()}
	node, script := mcptest.Node(t, mcptest.Tasks)
	ledger := filepath.Join(w.dir, "parcels.jsonl")
	server := map[string]any{"name": "ship", "tools": tools}
	if stdio {
		server["transport"], server["command"], server["args"], server["env"] = "stdio", node, []string{script, "stdio"},
			map[string]string{"LEDGER": ledger}
	} else {
		port := mcptest.FreePort(t)
		mcptest.Serve(t, node, []string{script, "http"}, []string{"PORT=" + port, "LEDGER=" + ledger}, mcptest.TasksReady)
		server["transport"], server["url"] = "http", "http://127.0.0.1:"+port+"/mcp"
	}
	w.writeConfig(server)
	return w
}

// setupEverything is a world whose MCP server "every" is the reference
// everything server, over Streamable HTTP.
func setupEverything(t *testing.T, tools map[string]any) *mcpWorld {
	t.Helper()
	e := setup(t)
	w := &mcpWorld{env: e, test: t, dir: t.TempDir()}
	node, script := mcptest.Node(t, mcptest.Everything)
	port := mcptest.FreePort(t)
	mcptest.Serve(t, node, []string{script, "streamableHttp"}, []string{"PORT=" + port}, mcptest.EverythingReady)
	w.writeConfig(map[string]any{"name": "every", "transport": "http", "url": "http://127.0.0.1:" + port + "/mcp", "tools": tools})
	return w
}

// writeConfig writes the MCP configuration of server.
func (w *mcpWorld) writeConfig(server map[string]any) {
	w.t.Helper()
	raw, err := json.Marshal(map[string]any{"servers": []any{server}})
	require.NoError(w.t, err)
	w.config = filepath.Join(w.t.TempDir(), "mcp.json")
	require.NoError(w.t, os.WriteFile(w.config, raw, 0o600))
}

// shipped reads tasks-server's ledger of parcels.
func (w *mcpWorld) shipped() []map[string]any {
	w.t.Helper()
	raw, err := os.ReadFile(filepath.Join(w.dir, "parcels.jsonl"))
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(w.t, err)
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var p map[string]any
		require.NoError(w.t, json.Unmarshal([]byte(line), &p))
		out = append(out, p)
	}
	return out
}

// startParcel starts, as ops through the API, a run whose one step ships
// a parcel for order 1001 in a task that takes seconds.
func startParcel(a *approvalsEnv, runID string, seconds int) {
	a.t.Helper()
	r := a.do(http.MethodPost, "/v1/runs", "ops", map[string]any{"run_id": runID,
		"plan": []map[string]any{{"tool": "ship_ship_parcel", "args": map[string]any{"order_id": "1001", "seconds": seconds}}}})
	require.Equal(a.t, http.StatusCreated, r.status, "body: %s", r.body)
}

// handleOf waits until the step's key records its task, and returns it.
func (w *mcpWorld) handleOf(run string) map[string]any {
	w.t.Helper()
	key := stepKey(w.t, run, 1, "ship_ship_parcel")
	var handle map[string]any
	require.Eventually(w.t, func() bool {
		var raw []byte
		err := w.pool.QueryRow(context.Background(), `SELECT handle FROM idempotency_keys WHERE key = $1 AND handle IS NOT NULL`, key).Scan(&raw)
		return err == nil && json.Unmarshal(raw, &handle) == nil
	}, time.Minute, 50*time.Millisecond, "the task is recorded with the step's key")
	return handle
}

// A call the server runs as a task outlives the worker that made it: the
// task is recorded with the step's key, the worker is SIGKILLed while the
// task runs, and the next worker follows the same task, in the session
// that created it, to its result. The server's own ledger holds one
// parcel: nothing was sent again.
func TestATaskOutlivesTheWorkerThatMadeIt(t *testing.T) {
	t.Parallel()
	w := setupTasks(t, false, map[string]any{"ship_parcel": map[string]any{}})
	out, err := runCLI(w.cliEnv(), "tools", "--json")
	require.NoError(t, err, out)
	var list []worker.ToolInfo
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	var ship worker.ToolInfo
	for _, ti := range list {
		if ti.Name == "ship_ship_parcel" {
			ship = ti
		}
	}
	assert.Equal(t, "required", ship.TaskSupport, "oncerun tools shows the server's task support")
	assert.True(t, ship.Tasks, "and that the calls run as tasks")
	a := w.serveApprovals(func(c *approvals.Config) { c.Tools = w.registry() })
	p := w.worker()
	run := w.id("task")
	startParcel(a, run, 4)

	h := w.handleOf(run)
	assert.Equal(t, "mcp_task", h["kind"])
	assert.NotEmpty(t, h["task_id"])
	assert.NotEmpty(t, h["session"], "the http session that created the task")
	p.kill()
	assert.Empty(t, w.shipped(), "the task still runs")

	w.worker()
	st := w.result("acme", run)
	s := st.Steps[0]
	require.Equal(t, workflows.StepDone, s.State, s.Error)
	parcels := w.shipped()
	require.Len(t, parcels, 1, "one parcel in the server's own ledger")
	assert.Contains(t, string(s.Result), parcels[0]["parcel"].(string), "the step's result is the task's")
	assert.Equal(t, 1, w.count("idempotency_keys", "key = $1 AND state = 'completed' AND handle->>'task_id' = $2",
		stepKey(t, run, 1, "ship_ship_parcel"), h["task_id"]), "completed by the task it recorded")
}

// Over stdio the task belongs to the dead worker's own server process: the
// next worker's process does not know it. Its outcome cannot be read, and
// the step waits in needs_resolution, saying so; nothing is sent again.
func TestATaskWhoseStateCannotBeReadNeedsAPerson(t *testing.T) {
	t.Parallel()
	w := setupTasks(t, true, map[string]any{"ship_parcel": map[string]any{}})
	a := w.serveApprovals(func(c *approvals.Config) { c.Tools = w.registry() })
	p := w.worker()
	run := w.id("lost-task")
	startParcel(a, run, 6)
	w.handleOf(run)
	p.kill()

	w.worker()
	st := w.waitFor("acme", run, "needs_resolution", func(s workflows.Status) bool { return s.State == workflows.RunNeedsResolution })
	r := st.Steps[0].Resolution
	require.NotNil(t, r)
	assert.Contains(t, r.Known, "the server does not know the task")
	assert.LessOrEqual(t, len(w.shipped()), 1, "never sent again: at most the dead worker's own task shipped")
}

// A task that waits for a person's input (the everything server's research
// query of an ambiguous topic) puts its question in the inbox while the
// worker follows it; answered through the API, the task completes with
// the answer.
func TestATasksQuestionIsAnsweredThroughTheInbox(t *testing.T) {
	t.Parallel()
	w := setupEverything(t, map[string]any{"simulate-research-query": map[string]any{}})
	a := w.serveApprovals(func(c *approvals.Config) { c.Tools = w.registry() })
	w.worker()
	run := w.id("research")
	r := a.do(http.MethodPost, "/v1/runs", "ops", map[string]any{"run_id": run,
		"plan": []map[string]any{{"tool": "every_simulate_research_query", "args": map[string]any{"topic": "python", "ambiguous": true}}}})
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)

	it := pendingQuestion(a, run)
	require.NotNil(t, it.Question)
	assert.True(t, it.Question.Live, "asked while the task waits, through the worker following it")
	assert.Contains(t, it.Question.Items[0].Message, `"python" could have multiple interpretations`)
	r = a.do(http.MethodPost, stepPath(run, 1, "answer"), "dana", map[string]any{"action": "accept",
		"content": map[string]any{"interpretation": "snake"}})
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)

	st := w.result("acme", run)
	require.Equal(t, workflows.StepDone, st.Steps[0].State, st.Steps[0].Error)
	assert.Contains(t, string(st.Steps[0].Result), "Research Report: python (snake)")
}
