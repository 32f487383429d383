package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/internal/mcptest"
	"github.com/oncerun/oncerun/internal/questions"
	"github.com/oncerun/oncerun/tools"
)

// everything is the reference everything server's configuration: over
// stdio, or served over Streamable HTTP for the test.
func everything(t *testing.T, stdio bool, tools map[string]mcp.ToolConfig) mcp.ServerConfig {
	t.Helper()
	bin, script := mcptest.Node(t, mcptest.Everything)
	if stdio {
		return mcp.ServerConfig{Name: "every", Transport: mcp.TransportStdio, Command: bin, Args: []string{script, "stdio"}, Tools: tools}
	}
	port := mcptest.FreePort(t)
	mcptest.Serve(t, bin, []string{script, "streamableHttp"}, []string{"PORT=" + port}, mcptest.EverythingReady)
	return httpConfig("every", "http://127.0.0.1:"+port+"/mcp", tools)
}

// tasksServer is tasks-server.mjs's configuration, over stdio or HTTP,
// and the ledger it writes each shipped parcel to.
func tasksServer(t *testing.T, stdio bool, tools map[string]mcp.ToolConfig) (mcp.ServerConfig, string) {
	t.Helper()
	bin, script := mcptest.Node(t, mcptest.Tasks)
	ledger := filepath.Join(t.TempDir(), "parcels.jsonl")
	if stdio {
		return mcp.ServerConfig{Name: "ship", Transport: mcp.TransportStdio, Command: bin, Args: []string{script, "stdio"},
			Env: map[string]string{"LEDGER": ledger}, Tools: tools}, ledger
	}
	port := mcptest.FreePort(t)
	mcptest.Serve(t, bin, []string{script, "http"}, []string{"PORT=" + port, "LEDGER=" + ledger}, mcptest.TasksReady)
	return httpConfig("ship", "http://127.0.0.1:"+port+"/mcp", tools), ledger
}

// parcels reads the parcels a task server's ledger holds.
func parcels(t *testing.T, ledger string) []map[string]any {
	t.Helper()
	raw, err := os.ReadFile(ledger)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var p map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &p))
		out = append(out, p)
	}
	return out
}

// A tool that the server runs as a task (the everything server's research
// query: execution.taskSupport required, tasks declared for tools/call)
// is called as one and followed to its result, over stdio and over HTTP;
// oncerun tools says so.
func TestAToolThatRunsAsATaskIsFollowedToItsResult(t *testing.T) {
	t.Parallel()
	for _, stdio := range []bool{true, false} {
		t.Run(map[bool]string{true: "stdio", false: "http"}[stdio], func(t *testing.T) {
			t.Parallel()
			d := load(t, everything(t, stdio, map[string]mcp.ToolConfig{"simulate-research-query": {}}))
			tool := toolOf(t, d, "every_simulate_research_query")
			src := d.Sources[tool.Name]
			assert.Equal(t, "required", src.TaskSupport)
			assert.True(t, src.Tasks, "its calls run as tasks")
			assert.NotNil(t, tool.Resume, "a task an attempt leaves is followed by the next")
			assert.Equal(t, tools.DefaultTimeout+mcp.DefaultLiveWait+mcp.DefaultTaskWait, tool.Timeout)
			var report string
			require.NoError(t, run(t, tool, callOf(t, tool.Name, 1, `{"topic":"plates"}`), &report))
			assert.Contains(t, report, "# Research Report: plates", "the task's result")
		})
	}
}

// A task that waits for a person's input (the research query of an
// ambiguous topic) asks its question through the call following it: over
// HTTP on the stream of the tasks/result oncerun posts itself, over stdio
// on the session; the answer goes back and the task completes with it.
func TestATasksQuestionGoesToAPerson(t *testing.T) {
	t.Parallel()
	for _, stdio := range []bool{true, false} {
		t.Run(map[bool]string{true: "stdio", false: "http"}[stdio], func(t *testing.T) {
			t.Parallel()
			d := load(t, everything(t, stdio, map[string]mcp.ToolConfig{"simulate-research-query": {}}))
			tool := toolOf(t, d, "every_simulate_research_query")
			var asked []questions.Asked
			var mu sync.Mutex
			ask := func(_ context.Context, a questions.Asked) (questions.Answers, error) {
				mu.Lock()
				asked = append(asked, a)
				mu.Unlock()
				return questions.Answers{questions.LiveItem: {Action: questions.ActionAccept, Content: json.RawMessage(`{"interpretation":"snake"}`)}}, nil
			}
			var report string
			require.NoError(t, run(t, tool, callOf(t, tool.Name, 1, `{"topic":"python","ambiguous":true}`), &report,
				questions.WithLive(context.Background(), ask)))
			assert.Contains(t, report, "# Research Report: python (snake)", "the person's answer reached the task")
			require.Len(t, asked, 1)
			assert.Contains(t, asked[0].Items[0].Message, `The research query "python" could have multiple interpretations`)
			assert.Contains(t, string(asked[0].Items[0].Schema), "Python snake species")
		})
	}
}

// A task that ends failed is a definite failure: permanent, and not
// applied.
func TestATaskThatEndsFailedIsADefiniteFailure(t *testing.T) {
	t.Parallel()
	cfg, _ := tasksServer(t, true, map[string]mcp.ToolConfig{"failing_job": {}})
	d := load(t, cfg)
	err := run(t, toolOf(t, d, "ship_failing_job"), callOf(t, "ship_failing_job", 1, `{}`), nil)
	require.Error(t, err)
	assert.True(t, permanent(err))
	assert.ErrorIs(t, err, tools.ErrNotApplied)
	assert.Contains(t, err.Error(), "ended failed")
	assert.Contains(t, err.Error(), "the warehouse refused the job")
}

// A task cancelled at the server, by somebody other than oncerun, may
// have done part of its work: its outcome is unknown, for the paired read
// or a person, never a definite failure that frees the key.
func TestATaskCancelledBySomebodyElseHasAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	cfg, _ := tasksServer(t, true, map[string]mcp.ToolConfig{"cancelled_job": {}})
	d := load(t, cfg)
	err := run(t, toolOf(t, d, "ship_cancelled_job"), callOf(t, "ship_cancelled_job", 1, `{}`), nil)
	require.Error(t, err)
	assert.ErrorIs(t, err, tools.ErrHandleLost)
	assert.NotErrorIs(t, err, tools.ErrNotApplied, "what it did before it was cancelled is unknown")
	assert.False(t, permanent(err))
	assert.Contains(t, err.Error(), "was cancelled (cancelled at the warehouse), by somebody other than oncerun")
}

// Each tasks/get is bounded by the call's timeout: a server that stops
// answering about its task ends the attempt when the timeout passes, not
// when the step's whole attempt (the call's timeout and task_wait) does.
func TestEachReadOfATaskIsBoundedByTheCallsTimeout(t *testing.T) {
	t.Parallel()
	cfg, _ := tasksServer(t, false, map[string]mcp.ToolConfig{"stalling_job": {Timeout: mcp.Duration(2 * time.Second)}})
	d := load(t, cfg)
	tool := toolOf(t, d, "ship_stalling_job")
	require.Greater(t, tool.Timeout, time.Hour, "the step's attempt follows its task for task_wait")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := tool.Run(ctx, callOf(t, tool.Name, 1, `{}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "tasks/get took longer than the call's timeout (2s)")
	assert.NoError(t, ctx.Err(), "the attempt's own deadline did not end it")
	assert.NotErrorIs(t, err, tools.ErrNotApplied, "the task may still run")
}

// A task the server no longer knows cannot be followed: the error says
// the handle is lost, for the paired read or a person.
func TestATaskTheServerForgetsIsLost(t *testing.T) {
	t.Parallel()
	cfg, _ := tasksServer(t, true, map[string]mcp.ToolConfig{"forgetful_job": {}})
	d := load(t, cfg)
	err := run(t, toolOf(t, d, "ship_forgetful_job"), callOf(t, "ship_forgetful_job", 1, `{}`), nil)
	require.Error(t, err)
	assert.ErrorIs(t, err, tools.ErrHandleLost)
	assert.NotErrorIs(t, err, tools.ErrNotApplied, "what became of it is unknown")
	assert.Contains(t, err.Error(), "the server does not know the task")
}

// The call records its task with the step's key; another worker (another
// session) follows the recorded task to its result over HTTP, in the
// session that created it, and the server ships one parcel. Over stdio,
// the task belongs to the process of the worker that made the call: the
// next worker's process does not know it, and it is lost (while the old
// process may still finish it).
func TestATaskIsResumedByItsHandle(t *testing.T) {
	t.Parallel()
	for _, stdio := range []bool{false, true} {
		t.Run(map[bool]string{true: "stdio", false: "http"}[stdio], func(t *testing.T) {
			t.Parallel()
			cfg, ledger := tasksServer(t, stdio, map[string]mcp.ToolConfig{"ship_parcel": {}})
			first := load(t, cfg)
			tool := toolOf(t, first, "ship_ship_parcel")
			call := callOf(t, tool.Name, 1, `{"order_id":"1001","seconds":2}`)
			var handle json.RawMessage
			ctx := idempotency.RecordingTo(context.Background(), func(_ context.Context, h json.RawMessage) error {
				handle = h
				return nil
			})
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, err := tool.Run(ctx, call)
			require.Error(t, err, "the worker stops following before the task ends")
			require.NotEmpty(t, handle, "the task was recorded")
			var h struct {
				Kind, Server, Tool, TaskID, Session string
			}
			require.NoError(t, json.Unmarshal(handle, &struct {
				Kind    *string `json:"kind"`
				Server  *string `json:"server"`
				Tool    *string `json:"tool"`
				TaskID  *string `json:"task_id"`
				Session *string `json:"session"`
			}{&h.Kind, &h.Server, &h.Tool, &h.TaskID, &h.Session}))
			assert.Equal(t, "mcp_task", h.Kind)
			assert.Equal(t, "ship", h.Server)
			assert.Equal(t, "ship_parcel", h.Tool)
			assert.NotEmpty(t, h.TaskID)
			assert.Equal(t, !stdio, h.Session != "", "an http session is recorded")

			if !stdio {
				// The first worker stops: the session of a task that may not
				// have ended is left open (a dead worker closes none either).
				require.NoError(t, first.Close())
			}
			// Another worker follows the task.
			second := load(t, cfg)
			res, err := toolOf(t, second, tool.Name).Resume(context.Background(), call, handle)
			if stdio {
				require.ErrorIs(t, err, tools.ErrHandleLost, "a new process knows nothing of the old one's task")
				// The old process may still finish its task: what became of
				// it is for the paired read or a person, never a resend.
				require.Eventually(t, func() bool { return len(parcels(t, ledger)) == 1 }, 10*time.Second, 100*time.Millisecond)
				return
			}
			require.NoError(t, err)
			raw, _ := json.Marshal(res)
			assert.Contains(t, string(raw), `"order_id":"1001"`)
			shipped := parcels(t, ledger)
			require.Len(t, shipped, 1, "one parcel: the call was not sent again")
			assert.Contains(t, string(raw), shipped[0]["parcel"].(string))
		})
	}
}

// Recording a task's handle is tried again when the database fails; a
// lease lost meanwhile ends the attempt, leaving the key to the worker
// that holds it.
func TestATasksHandleIsRecordedThroughFailuresButNotPastALostLease(t *testing.T) {
	t.Parallel()
	cfg, _ := tasksServer(t, true, map[string]mcp.ToolConfig{"ship_parcel": {}})
	d := load(t, cfg)
	tool := toolOf(t, d, "ship_ship_parcel")

	var tries int
	var recorded json.RawMessage
	flaky := idempotency.RecordingTo(context.Background(), func(_ context.Context, h json.RawMessage) error {
		if tries++; tries < 3 {
			return errors.New("connection reset by peer")
		}
		recorded = h
		return nil
	})
	require.NoError(t, run(t, tool, callOf(t, tool.Name, 1, `{"order_id":"1","seconds":0.3}`), nil, flaky))
	assert.Equal(t, 3, tries)
	assert.Contains(t, string(recorded), `"kind":"mcp_task"`)

	lost := idempotency.RecordingTo(context.Background(), func(context.Context, json.RawMessage) error {
		return fmt.Errorf("record the handle: %w", idempotency.ErrLeaseLost)
	})
	err := run(t, tool, callOf(t, tool.Name, 2, `{"order_id":"2","seconds":0.3}`), nil, lost)
	require.ErrorIs(t, err, idempotency.ErrLeaseLost)
	assert.NotErrorIs(t, err, tools.ErrNotApplied, "the task was created: what it does is for the key's holder to learn")
}

// task: never refuses a tool the server says must run as a task; task:
// always is checked with the configuration, and so is task_wait.
func TestTheTaskConfigurationIsChecked(t *testing.T) {
	t.Parallel()
	msg := loadErr(t, everything(t, true, map[string]mcp.ToolConfig{"simulate-research-query": {Task: mcp.TaskNever}}))
	assert.Contains(t, msg, "requires its calls to run as tasks (execution.taskSupport required), and the configuration says task: never")
	err := mcp.Config{Servers: []mcp.ServerConfig{{Name: "s", Transport: mcp.TransportStdio, Command: "/bin/x",
		Tools: map[string]mcp.ToolConfig{"a": {Task: "sometimes", TaskWait: mcp.Duration(-time.Second)}}}}}.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `task "sometimes": want auto, always or never`)
	assert.Contains(t, err.Error(), "task_wait -1s: negative")
}
