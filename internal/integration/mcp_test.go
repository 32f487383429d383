package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/cli"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/sandbox/desk"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/worker"
	"github.com/oncerun/oncerun/workflows"
)

// mcpWorld is a test's world with a sandbox support desk served as an MCP
// server, and the configuration that points workers at it.
type mcpWorld struct {
	*env
	test *testing.T
	// dir is the desk's data dir: its ledger, which the test reads as the
	// desk's own record.
	dir string
	// config is the ONCERUN_MCP_CONFIG file.
	config string
}

// setupMCP serves a desk over Streamable HTTP (or, with stdio, writes a
// configuration that has each worker run the desk as its child process,
// from the oncerun binary) and writes the MCP configuration with tools,
// the per-tool part of the server's entry.
func setupMCP(t *testing.T, stdio, ignoreKeys bool, tools map[string]any) *mcpWorld {
	t.Helper()
	e := setup(t)
	w := &mcpWorld{env: e, test: t, dir: t.TempDir()}
	server := map[string]any{"name": "desk", "tools": tools}
	if stdio {
		args := []string{"sandbox-desk", "--stdio", "--data-dir", w.dir}
		if ignoreKeys {
			args = append(args, "--ignore-keys")
		}
		server["transport"], server["command"], server["args"] = "stdio", buildDev(t), args
	} else {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		r, err := desk.Serve(ctx, "127.0.0.1:0", desk.Config{DataDir: w.dir, IgnoreKeys: ignoreKeys})
		require.NoError(t, err)
		server["transport"], server["url"] = "http", r.URL()
	}
	raw, err := json.Marshal(map[string]any{"servers": []any{server}})
	require.NoError(t, err)
	w.config = filepath.Join(t.TempDir(), "mcp.json")
	require.NoError(t, os.WriteFile(w.config, raw, 0o600))
	return w
}

// tickets reads the desk's own ledger.
func (w *mcpWorld) tickets() []desk.Ticket {
	w.t.Helper()
	tk, _, err := desk.ReadLedger(w.dir)
	require.NoError(w.t, err)
	return tk
}

func (w *mcpWorld) vouchers() []desk.Voucher {
	w.t.Helper()
	_, v, err := desk.ReadLedger(w.dir)
	require.NoError(w.t, err)
	return v
}

// cliEnv is the CLI's environment of a user whose ONCERUN_MCP_CONFIG
// points at the desk.
func (w *mcpWorld) cliEnv() cli.Env {
	return cli.Env{Getenv: func(k string) string {
		if k == settings.EnvMCPConfig {
			return w.config
		}
		return ""
	}}
}

// worker starts an oncerun worker process pointed at the desk.
func (w *mcpWorld) worker(extra ...string) *workerProcess {
	return startWorkerProcess(w.test, w.env, nil, append([]string{settings.EnvMCPConfig + "=" + w.config}, extra...)...)
}

// ticketDesk is the configuration of a desk whose open_ticket is settled by
// its paired read, or by the key alone.
func ticketDesk(pairedRead, idempotent bool) map[string]any {
	open := map[string]any{"class": "external", "idempotent": idempotent}
	if pairedRead {
		open["paired_read"] = "find_ticket"
	}
	return map[string]any{"open_ticket": open, "find_ticket": map[string]any{"class": "read"}}
}

func ticketPlan() []planner.Call {
	return []planner.Call{{Tool: "desk_open_ticket",
		Args: json.RawMessage(`{"order_id":"1001","subject":"Plate arrived broken","body":"A refund is on its way."}`)}}
}

// TestMCPToolIsAppliedOnceWhenTheWorkerDiesAfterTheServerApplied kills the
// worker after the MCP server opened the ticket and before oncerun
// recorded it: the next worker settles the step without a second ticket,
// over Streamable HTTP by the paired read, over stdio (a new child process
// of the new worker) by sending again under the same key, which the desk
// honours.
func TestMCPToolIsAppliedOnceWhenTheWorkerDiesAfterTheServerApplied(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		stdio, pairedRead bool
	}{
		{"http", false, true},
		{"stdio", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := setupMCP(t, tc.stdio, false, ticketDesk(tc.pairedRead, true))
			p := w.worker(settings.EnvCrashAt + "=after-apply:desk_open_ticket")
			run := w.id("mcp-" + tc.name)
			_, err := w.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Plan: ticketPlan()})
			require.NoError(t, err)

			p.died("after the effect")
			require.Len(t, w.tickets(), 1, "the desk opened the ticket")

			w.worker()
			st := w.result("acme", run)
			s := st.Steps[0]
			require.Equal(t, workflows.StepDone, s.State, s.Error)
			assert.Equal(t, "once", s.Guarantee)
			tickets := w.tickets()
			require.Len(t, tickets, 1, "one ticket in the desk's own ledger")
			assert.Equal(t, stepKey(t, run, 1, "desk_open_ticket"), tickets[0].Key, "opened under the step's key")
			assert.Contains(t, string(s.Result), tickets[0].ID, "the step records the desk's ticket")
			assert.Equal(t, 1, w.count("idempotency_keys", "key = $1 AND state = 'completed'", s.Key))
		})
	}
}

// TestMCPServerThatIgnoresTheKeyIsAtLeastOnce runs the same crash against
// a desk that ignores keys and a configuration that says so: the tool is
// at-least-once, nothing can tell whether the dead worker's call took
// effect, so the step waits for a person; a person who answers not_applied
// sends it again, and the desk's ledger shows the second ticket that
// at-least-once allows.
func TestMCPServerThatIgnoresTheKeyIsAtLeastOnce(t *testing.T) {
	t.Parallel()
	w := setupMCP(t, false, true, ticketDesk(false, false))
	p := w.worker(settings.EnvCrashAt + "=after-apply:desk_open_ticket")
	run := w.id("mcp-ignoring")
	_, err := w.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Plan: ticketPlan()})
	require.NoError(t, err)
	p.died("after the effect")
	require.Len(t, w.tickets(), 1)

	w.worker()
	st := w.waitFor("acme", run, "needs_resolution", func(s workflows.Status) bool { return s.State == workflows.RunNeedsResolution })
	s := st.Steps[0]
	assert.Equal(t, "at-least-once", s.Guarantee, "the status says what the tool promises")
	require.Len(t, w.tickets(), 1, "nothing is sent again on a guess")

	out, err := w.oncerun("status", "--tenant", "acme", "--run-id", run)
	require.NoError(t, err, out)
	assert.Contains(t, out, "(at-least-once)")

	_, err = w.runs.Resolve(context.Background(), w.pool, approvalstore.ResolveRequest{StepRequest: approvalstore.Local("acme", run, 1, "dana"), Outcome: approvalstore.ResolutionNotApplied, Note: "no ticket in the desk's view"})
	require.NoError(t, err)
	st = w.result("acme", run)
	require.Equal(t, workflows.StepDone, st.Steps[0].State, st.Steps[0].Error)
	assert.Len(t, w.tickets(), 2, "a person was wrong: at-least-once, and the docs say so")
}

// TestMCPToolCallWaitsForAnApprovalBoundToItsArguments configures an
// approval above an amount for an MCP tool: the call waits, a decision for
// other arguments is refused, and the approved call makes one voucher.
func TestMCPToolCallWaitsForAnApprovalBoundToItsArguments(t *testing.T) {
	t.Parallel()
	w := setupMCP(t, false, false, map[string]any{
		"issue_voucher": map[string]any{"class": "external", "idempotent": true, "paired_read": "find_voucher",
			"approval": map[string]any{"field": "amount_cents", "above": 5000}},
		"find_voucher": map[string]any{"class": "read"},
	})
	w.worker()
	a := w.serveApprovals(func(c *approvals.Config) { c.Tools = w.registry() })
	run := w.id("mcp-approval")
	args := `{"order_id":"1001","amount_cents":7500,"currency":"EUR"}`
	r := a.do(http.MethodPost, "/v1/runs", "ops", map[string]any{"run_id": run,
		"plan": []map[string]any{{"tool": "desk_issue_voucher", "args": json.RawMessage(args)}}})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	st := w.waitFor("acme", run, "the voucher's approval", func(s workflows.Status) bool { return s.State == workflows.RunWaitingForApproval })
	assert.Empty(t, w.vouchers(), "nothing before the approval")
	assert.Contains(t, st.Steps[0].Approval.Reason, "amount_cents above 5000")

	path := stepPath(run, 1, "approve")
	a.expectError(a.do(http.MethodPost, path, "dana", map[string]any{"args_hash": canonicalHash(t, `{"order_id":"1001","amount_cents":1,"currency":"EUR"}`)}),
		http.StatusConflict, "args_hash_mismatch")
	r = a.do(http.MethodPost, path, "dana", map[string]any{"args_hash": st.Steps[0].ArgsHash})
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	st = w.result("acme", run)
	require.Equal(t, workflows.StepDone, st.Steps[0].State, st.Steps[0].Error)
	v := w.vouchers()
	require.Len(t, v, 1)
	assert.EqualValues(t, 7500, v[0].AmountCents)
	assert.Equal(t, stepKey(t, run, 1, "desk_issue_voucher"), v[0].Key)
}

// registry is the registry a worker of this world builds.
func (w *mcpWorld) registry() *tools.Registry {
	w.t.Helper()
	cfg, closeMCP, err := worker.WithMCP(context.Background(), worker.Config{MCPConfig: w.config, OmitBuiltinTools: false})
	require.NoError(w.t, err)
	w.t.Cleanup(func() { _ = closeMCP() })
	reg, err := worker.Registry(cfg)
	require.NoError(w.t, err)
	return reg
}

// TestMCPServerDownAtStart starts a worker whose MCP server is down: it
// refuses to start, naming the server; with the server optional it starts
// without the server's tools, and its metrics say so.
func TestMCPServerDownAtStart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	write := func(optional bool) string {
		raw, err := json.Marshal(map[string]any{"servers": []any{map[string]any{
			"name": "crm", "transport": "http", "url": "http://" + freeAddr(t) + "/mcp", "optional": optional,
			"tools": map[string]any{"create_case": map[string]any{}},
		}}})
		require.NoError(t, err)
		p := filepath.Join(t.TempDir(), "mcp.json")
		require.NoError(t, os.WriteFile(p, raw, 0o600))
		return p
	}

	p := startWorkerProcess(t, e, nil, settings.EnvMCPConfig+"="+write(false))
	select {
	case err := <-p.exited:
		require.Error(t, err, "the worker refuses to start")
	case <-time.After(time.Minute):
		t.Fatalf("the worker started with its MCP server down:\n%s", p.logs.String())
	}
	assert.Contains(t, p.logs.String(), "crm")

	metricsAddr := freeAddr(t)
	p = startWorkerProcess(t, e, nil, settings.EnvMCPConfig+"="+write(true), "METRICS_ADDR="+metricsAddr)
	p.logged("MCP server down at start")
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return strings.Contains(b.String(), `oncerun_mcp_server_skipped{server="crm"} 1`)
	}, time.Minute, 100*time.Millisecond)
}

// TestToolsCommandListsMCPTools reads `oncerun tools --json` the way a
// script does: every tool with its source and guarantees.
func TestToolsCommandListsMCPTools(t *testing.T) {
	t.Parallel()
	w := setupMCP(t, false, false, map[string]any{
		"open_ticket": map[string]any{"class": "external", "idempotent": true, "paired_read": "find_ticket"},
		"find_ticket": map[string]any{"class": "read"},
		"issue_voucher": map[string]any{"class": "external", "approval": "always", "edits": "no_increase",
			"amounts": []any{map[string]any{"field": "amount_cents", "currency": "currency"}}},
	})
	out, err := runCLI(w.cliEnv(), "tools", "--json")
	require.NoError(t, err, out)
	var list []worker.ToolInfo
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	byName := map[string]worker.ToolInfo{}
	for _, ti := range list {
		byName[ti.Name] = ti
	}
	assert.Equal(t, "built-in", byName["refund_payment"].Source)
	open := byName["desk_open_ticket"]
	hex64 := regexp.MustCompile(`^[0-9a-f]{64}$`)
	for _, ti := range list {
		assert.Regexp(t, hex64, ti.Digest, "%s: its definition's digest", ti.Name)
		assert.Equal(t, open.RegistryDigest, ti.RegistryDigest, "%s: one registry digest on every tool", ti.Name)
	}
	assert.Regexp(t, hex64, open.RegistryDigest)
	assert.NotEqual(t, open.Digest, byName["desk_find_ticket"].Digest, "two definitions, two digests")
	assert.Equal(t, worker.ToolInfo{Name: "desk_open_ticket", Description: open.Description, Source: "mcp", Server: "desk",
		RegistryDigest: open.RegistryDigest, Digest: open.Digest,
		ServerTool: "open_ticket", Transport: "http", Class: "external", Approval: "never", Guarantee: "once",
		ClassFrom: "configuration", ApprovalFrom: "annotation",
		Hints:      map[string]bool{"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false},
		PairedRead: "desk_find_ticket", IdempotencyKey: true, KeyClaim: "unverified", Edits: "allowed", OncePerRun: true}, open)
	voucher := byName["desk_issue_voucher"]
	assert.Equal(t, "at-least-once", voucher.Guarantee, "no key honoured, no paired read")
	assert.Equal(t, "always", voucher.Approval)
	assert.Equal(t, "no-increase", voucher.Edits, "an approver may lower the voucher, never raise it")
	assert.NotContains(t, byName, "desk_find_voucher", "unlisted tools are refused by default")
}

// TestAFalseIdempotencyClaimStopsTheWorkersStart is the negative control of
// a configuration that says idempotent: true of a desk that ignores keys:
// with a probe, the worker's start calls open_ticket twice under one key,
// finds two tickets in two different answers, and refuses to start,
// naming the tool; `oncerun tools`, which probes nothing, shows the claim
// unverified and makes no ticket.
func TestAFalseIdempotencyClaimStopsTheWorkersStart(t *testing.T) {
	t.Parallel()
	tools := ticketDesk(false, true)
	tools["open_ticket"].(map[string]any)["probe"] = map[string]any{
		"args": map[string]any{"order_id": "probe", "subject": "oncerun's probe of the key", "body": "Please close."}}
	w := setupMCP(t, false, true, tools)

	out, err := runCLI(w.cliEnv(), "tools", "--json")
	require.NoError(t, err, out)
	assert.Contains(t, out, `"key_claim": "unverified"`)
	assert.Empty(t, w.tickets(), "listing the tools makes no effect")

	p := w.worker()
	select {
	case err := <-p.exited:
		require.Error(t, err, "the worker refuses to start")
	case <-time.After(time.Minute):
		t.Fatalf("the worker started on a false claim:\n%s", p.logs.String())
	}
	assert.Contains(t, p.logs.String(), `tool "open_ticket" is configured idempotent: true, but the probe at start called it twice under one key`)
	assert.Len(t, w.tickets(), 2, "the probe's two calls made two tickets: the desk ignores the key")
}
