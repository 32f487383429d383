package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/internal/cli"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/workflows"
)

// oncerun runs the CLI as a user would, against the test's world.
func (e *env) oncerun(args ...string) (string, error) {
	return runCLI(cli.Env{Temporal: e.tc, TaskQueue: e.queue, DatabaseURL: e.pool.Config().ConnString(), User: "dana"}, args...)
}

// runCLI runs the CLI with env and returns what it printed.
func runCLI(env cli.Env, args ...string) (string, error) {
	cmd := cli.NewRoot(env)
	var out bytes.Buffer
	cmd.SetArgs(args)
	err := cli.Execute(context.Background(), cmd, &out, &out)
	return out.String(), err
}

func TestCLIStartApproveStatus(t *testing.T) {
	t.Parallel()
	e := setup(t)
	run := e.id("r1")
	e.startWorker("w1", worker.Options{})
	plan := filepath.Join("..", "..", "examples", "refund.json")

	out, err := e.oncerun("start", "--tenant", "acme", "--run-id", run, "--plan", plan)
	require.NoError(t, err, out)
	assert.Contains(t, out, "started run "+run+" of tenant acme")
	e.waitFor("acme", run, "the credit's approval", func(s workflows.Status) bool {
		return s.State == workflows.RunWaitingForApproval
	})

	out, err = e.oncerun("approvals", "--tenant", "acme", "--json")
	require.NoError(t, err, out)
	var pending []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &pending), out)
	require.Len(t, pending, 1)
	for _, field := range []string{"tenant", "run_id", "step", "tool", "args", "args_hash", "requested_at", "deadline"} {
		assert.Contains(t, pending[0], field)
	}
	assert.Equal(t, "issue_credit", pending[0]["tool"])
	assert.EqualValues(t, 3, pending[0]["step"])

	out, err = e.oncerun("approvals")
	require.NoError(t, err, out)
	assert.Regexp(t, `(?m)^TENANT\s+RUN\s+STEP\s+TOOL`, out)
	assert.Regexp(t, `(?m)^acme\s+`+run+`\s+3\s+issue_credit`, out)

	out, err = e.oncerun("approve", "--tenant", "acme", "--run-id", run, "--step", "1")
	require.ErrorContains(t, err, "not pending", out)

	out, err = e.oncerun("approve", "--tenant", "acme", "--run-id", run, "--step", "3", "--args-hash", strings.Repeat("0", 64))
	require.ErrorContains(t, err, "is not the pending step's", out)

	out, err = e.oncerun("approve", "--tenant", "acme", "--run-id", run, "--step", "3", "--comment", "damaged parcel")
	require.NoError(t, err, out)
	assert.Contains(t, out, "approved step 3 (issue_credit) of run "+run+" as dana")
	e.result("acme", run)

	out, err = e.oncerun("status", "--tenant", "acme", "--run-id", run, "--json")
	require.NoError(t, err, out)
	var st struct {
		Tenant, RunID, State string
		Steps                []map[string]any
	}
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	assert.Equal(t, "completed", st.State)
	require.Len(t, st.Steps, 4)
	for _, s := range st.Steps {
		for _, field := range []string{"step", "tool", "args_hash", "state", "result"} {
			assert.Contains(t, s, field)
		}
		assert.Equal(t, "done", s["state"])
	}

	out, err = e.oncerun("status", "--tenant", "acme", "--run-id", run)
	require.NoError(t, err, out)
	assert.Contains(t, out, "run "+run+" of tenant acme: completed")
	assert.Regexp(t, `(?m)^3\s+issue_credit\s+done`, out)

	out, err = e.oncerun("start", "--tenant", "acme", "--run-id", run, "--plan", plan)
	require.NoError(t, err, out)
	assert.Contains(t, out, "already started")
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme'"))
}

func TestCLIRefusesBadInput(t *testing.T) {
	t.Parallel()
	e := setup(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown tool", []string{"start", "--tenant", "acme", "--run-id", "x", "--plan",
			write("unknown.json", `{"steps":[{"tool":"drop_tables","args":{}}]}`)}, `unknown tool "drop_tables"`},
		{"malformed plan", []string{"start", "--tenant", "acme", "--run-id", "x", "--plan",
			write("bad.json", `{"steps":[`)}, "is not a valid plan file"},
		{"args against schema", []string{"start", "--tenant", "acme", "--run-id", "x", "--plan",
			write("schema.json", `{"steps":[{"tool":"issue_credit","args":{"order_id":"1"}}]}`)}, "step 1: arguments of issue_credit do not match its schema"},
		{"empty plan", []string{"start", "--tenant", "acme", "--run-id", "x", "--plan",
			write("empty.json", `{"steps":[]}`)}, "has no steps"},
		{"no plan or goal", []string{"start", "--tenant", "acme", "--run-id", "x"}, "give --plan FILE or --goal TEXT"},
		{"missing plan file", []string{"start", "--tenant", "acme", "--run-id", "x", "--plan", filepath.Join(dir, "nope.json")}, "no such file"},
		{"unknown run", []string{"status", "--tenant", "acme", "--run-id", "nobody"}, "not found"},
		{"unknown run approve", []string{"approve", "--tenant", "acme", "--run-id", "nobody", "--step", "1"}, "not found"},
		{"step zero", []string{"reject", "--tenant", "acme", "--run-id", "x", "--step", "0"}, "numbered from 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := e.oncerun(c.args...)
			require.Error(t, err, out)
			assert.True(t, strings.Contains(err.Error(), c.want), "error %q does not say %q", err, c.want)
		})
	}
}

// oncerunVia runs the CLI as an approver on another machine would: with
// only ONCERUN_API and ONCERUN_TOKEN.
func (a *approvalsEnv) oncerunVia(who string, args ...string) (string, error) {
	return runCLI(cli.Env{APIURL: a.srv.URL, Token: a.tokens[who]}, args...)
}

func TestCLIThroughTheAPI(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", worker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("cli-api")
	plan := filepath.Join("..", "..", "examples", "refund.json")

	out, err := a.oncerunVia("ops", "start", "--run-id", run, "--plan", plan)
	require.NoError(t, err, out)
	assert.Contains(t, out, "started run "+run+" of tenant acme")
	out, err = a.oncerunVia("ops", "start", "--run-id", run, "--plan", plan)
	require.NoError(t, err, out)
	assert.Contains(t, out, "already started with this input")
	out, err = a.oncerunVia("ops", "start", "--run-id", run, "--goal", "other")
	require.Error(t, err)
	assert.Contains(t, out, "HTTP 422")
	e.waitFor("acme", run, "the credit's approval", func(s workflows.Status) bool {
		return s.State == workflows.RunWaitingForApproval
	})

	out, err = a.oncerunVia("dana", "approvals")
	require.NoError(t, err, out)
	assert.Regexp(t, `(?m)^RUN\s+STEP\s+TOOL`, out)
	assert.Regexp(t, `(?m)^`+run+`\s+3\s+issue_credit\s.*pending`, out)
	out, err = a.oncerunVia("dana", "approvals", "--json")
	require.NoError(t, err, out)
	var items []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &items), out)
	require.Len(t, items, 1)
	assert.Equal(t, "issue_credit", items[0]["tool"])

	// The tenant and the approver come from the token.
	out, err = a.oncerunVia("dana", "approve", "--tenant", "globex", "--run-id", run, "--step", "3")
	require.ErrorContains(t, err, "--tenant", out)
	out, err = a.oncerunVia("dana", "approve", "--as", "root", "--run-id", run, "--step", "3")
	require.ErrorContains(t, err, "--as", out)
	out, err = a.oncerunVia("vic", "approve", "--run-id", run, "--step", "3")
	require.ErrorContains(t, err, "HTTP 403", out)
	out, err = a.oncerunVia("dana", "approve", "--run-id", run, "--step", "2")
	require.ErrorContains(t, err, "no step 2 waiting", out)
	out, err = a.oncerunVia("gus", "approve", "--run-id", run, "--step", "3")
	require.ErrorContains(t, err, "no step 3 waiting", out)

	out, err = a.oncerunVia("dana", "approve", "--run-id", run, "--step", "3", "--comment", "ok from the CLI")
	require.NoError(t, err, out)
	assert.Contains(t, out, "approved step 3 of run "+run+" as dana")
	st := e.result("acme", run)
	assert.Equal(t, workflows.RunCompleted, st.State)
	assert.Equal(t, "ok from the CLI", st.Steps[2].Approval.Comment)

	out, err = a.oncerunVia("dana", "reject", "--run-id", run, "--step", "3", "--args-hash", st.Steps[2].ArgsHash)
	require.ErrorContains(t, err, "HTTP 409", out)
	out, err = a.oncerunVia("vic", "status", "--run-id", run)
	require.NoError(t, err, out)
	assert.Contains(t, out, "run "+run+" of tenant acme: completed")
	out, err = a.oncerunVia("vic", "approvals", "--state", "decided")
	require.NoError(t, err, out)
	assert.Regexp(t, `(?m)^`+run+`\s+3\s+issue_credit\s.*approved`, out)

	// Without a token the CLI says what is missing.
	out, err = runCLI(cli.Env{APIURL: a.srv.URL}, "approvals")
	require.ErrorContains(t, err, "ONCERUN_TOKEN", out)
}

// TestCLIEscapesWhatItPrints: text from a run (a goal an earlier release
// accepted, a tool's result read from a business table, a planner's words)
// reaches the terminal with its control and format characters escaped, in
// the tables and in --json, which stays JSON with the same meaning.
func TestCLIEscapesWhatItPrints(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", worker.Options{})
	ctx := context.Background()
	_, err := e.pool.Exec(ctx, `INSERT INTO orders (tenant, order_id, customer, status, total_cents, currency, placed_at)
VALUES ('acme', 'evil', E'Mallory\x1b]2;pwned\x07\x1b[2J', 'delivered', 100, 'EUR', now())`)
	require.NoError(t, err)
	run := e.id("escapes")
	// Started as an earlier release would have: today's edge refuses this
	// goal.
	goal := "refund\x1b[31m\u202egnp.exe\nstep 9 done"
	_, err = e.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.WorkflowID("acme", run), TaskQueue: e.queue},
		workflows.AgentRun, workflows.RunInput{Tenant: "acme", RunID: run, Goal: goal, Plan: []planner.Call{
			call(shop.ToolLookupOrder, `{"order_id":"evil"}`),
			call(shop.ToolIssueCredit, `{"order_id":"evil","reason":"r\u202e\u200b","amount_cents":25900,"currency":"EUR"}`),
		}})
	require.NoError(t, err)
	e.waitFor("acme", run, "the credit's approval", func(s workflows.Status) bool { return s.State == workflows.RunWaitingForApproval })

	for _, args := range [][]string{
		{"status", "--tenant", "acme", "--run-id", run},
		{"status", "--tenant", "acme", "--run-id", run, "--json"},
		{"approvals"},
		{"approvals", "--json"},
	} {
		out, err := e.oncerun(args...)
		require.NoError(t, err, out)
		for _, raw := range []string{"\x1b", "\x07", "\u202e", "\u200b", "\r"} {
			assert.NotContains(t, out, raw, "%v prints %q raw", args, raw)
		}
		if args[len(args)-1] == "--json" {
			var v any
			require.NoError(t, json.Unmarshal([]byte(out), &v), "%v stays JSON: %s", args, out)
			assert.Contains(t, out, `\u202e`)
		}
	}
	out, err := e.oncerun("status", "--tenant", "acme", "--run-id", run)
	require.NoError(t, err, out)
	assert.Contains(t, out, `goal: refund\u001b[31m\u202egnp.exe\nstep 9 done`+"\n", "the goal stays on its line, escaped")
	assert.Contains(t, out, `"customer":"Mallory\u001b]2;pwne`, "a business table's text in a tool's result")

	var st workflows.Status
	out, err = e.oncerun("status", "--tenant", "acme", "--run-id", run, "--json")
	require.NoError(t, err, out)
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	assert.Equal(t, goal, st.Goal, "--json keeps the goal's meaning")
}

// TestCLIStartRefusesWhatCouldWedgeARun: the CLI checks what it starts
// with the same rules as the API.
func TestCLIStartRefusesWhatCouldWedgeARun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	plan := filepath.Join("..", "..", "examples", "refund.json")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--run-id", "..", "--plan", plan}, `run_id ".." cannot be used`},
		{[]string{"--run-id", "r\u200b1", "--plan", plan}, "U+200B"},
		{[]string{"--run-id", "r1", "--goal", "refund\x1b[2J"}, "goal holds the control character U+001B"},
		{[]string{"--run-id", "r1", "--goal", "refund \xff"}, "goal is not valid UTF-8"},
		{[]string{"--run-id", "r1", "--plan", plan, "--max-steps", "100000"}, "limits.max_steps 100000 is more than 10000"},
	} {
		out, err := e.oncerun(append([]string{"start", "--tenant", "acme"}, tc.args...)...)
		require.Error(t, err, out)
		assert.Contains(t, err.Error(), tc.want)
	}
}
