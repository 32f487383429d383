package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/mail/mailtest"
	"github.com/oncerun/oncerun/internal/payments"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/internal/sandbox/desk"
	sandbox "github.com/oncerun/oncerun/internal/sandbox/payments"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/workflows"
)

// tracedWorld is a test's world for traces: an OTLP receiver, a sandbox
// provider, a database, a task queue and an approvals tokens file of its
// own, which `oncerun worker` processes share.
type tracedWorld struct {
	t          testing.TB
	bin        string
	recv       *otlpReceiver
	provider   *sandbox.Running
	dbURL      string
	queue      string
	tokensFile string
	ops, dna   *approvals.Client
	opsToken   string
	danaToken  string
	// deskDir is the MCP desk's data dir, and mcpConfig the workers'
	// ONCERUN_MCP_CONFIG naming it.
	deskDir   string
	mcpConfig string
	// mailbox is the SMTP server the credit's e-mail goes to.
	mailbox *mailtest.Server
}

func newTracedWorld(t testing.TB) *tracedWorld {
	t.Helper()
	w := &tracedWorld{t: t, bin: buildOncerun(t), recv: startOTLPReceiver(t), dbURL: pgtest.NewEmptyDB(t).URL,
		queue: fmt.Sprintf("oncerun-traced-%d", queues.Add(1)), tokensFile: filepath.Join(t.TempDir(), "tokens.json")}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var err error
	w.provider, err = sandbox.Start(ctx, sandbox.Config{Addr: "127.0.0.1:0", DataDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.provider.Close() })
	require.NoError(t, w.provider.SeedPayment(sandbox.Payment{ID: "pay_1001", Amount: 25900, Currency: "eur"}))
	w.mailbox, err = mailtest.Start(mailtest.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.mailbox.Close() })
	w.deskDir = t.TempDir()
	d, err := desk.Serve(ctx, "127.0.0.1:0", desk.Config{DataDir: w.deskDir})
	require.NoError(t, err)
	raw, err := json.Marshal(map[string]any{"servers": []any{map[string]any{"name": "desk", "transport": "http", "url": d.URL(),
		"tools": ticketDesk(true, false)}}})
	require.NoError(t, err)
	w.mcpConfig = filepath.Join(t.TempDir(), "mcp.json")
	require.NoError(t, os.WriteFile(w.mcpConfig, raw, 0o600))
	token := func(id approvals.Identity) string {
		tok, entry, err := approvals.NewToken(id)
		require.NoError(t, err)
		require.NoError(t, approvals.AppendToken(w.tokensFile, entry))
		return tok
	}
	w.opsToken = token(approvals.Identity{Name: "ops", Tenant: "acme", Role: approvals.RoleOperator})
	w.danaToken = token(approvals.Identity{Name: "dana", Tenant: "acme", Role: approvals.RoleApprover})
	return w
}

// tracedWorker is an `oncerun worker` process of a tracedWorld: it exports
// its traces to the world's receiver, serves the approvals service and
// refunds at the world's provider.
type tracedWorker struct {
	t      testing.TB
	cmd    *exec.Cmd
	logs   *syncBuffer
	exited chan error
}

// start starts a worker with env added to the world's; the world's API
// clients then talk to it.
func (w *tracedWorld) start(env ...string) *tracedWorker {
	t := w.t
	t.Helper()
	p := &tracedWorker{t: t, logs: &syncBuffer{}, exited: make(chan error, 1)}
	apAddr := freeAddr(t)
	p.cmd = exec.Command(w.bin, "worker")
	p.cmd.Env = append(append(localEnv(t, p.cmd.Environ()),
		"TEMPORAL_ADDRESS="+frontend, "TEMPORAL_NAMESPACE="+namespace, "TEMPORAL_TASK_QUEUE="+w.queue,
		"DATABASE_URL="+w.dbURL, "METRICS_ADDR="+freeAddr(t),
		"APPROVALS_ADDR="+apAddr, "APPROVALS_TOKENS_FILE="+w.tokensFile,
		"PAYMENTS_BASE_URL="+w.provider.URL(), "PAYMENTS_API_KEY="+sandbox.DefaultAPIKey,
		settings.EnvMCPConfig+"="+w.mcpConfig,
		settings.EnvSMTPAddr+"="+w.mailbox.Addr(), settings.EnvSMTPFrom+"=support@"+mailDomain,
		"OTEL_EXPORTER_OTLP_ENDPOINT="+w.recv.URL(), "OTEL_SERVICE_NAME=oncerun-traced",
		// Export within a fifth of a second, not the default five: a
		// worker that is killed loses only what it had not sent.
		"OTEL_BSP_SCHEDULE_DELAY=200",
	), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	require.NoError(t, p.cmd.Start())
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	w.ops = &approvals.Client{BaseURL: "http://" + apAddr, Token: w.opsToken}
	w.dna = &approvals.Client{BaseURL: "http://" + apAddr, Token: w.danaToken}
	require.Eventually(t, func() bool {
		_, err := w.ops.Approvals(context.Background(), approvals.ViewPending)
		return err == nil
	}, time.Minute, 100*time.Millisecond, "the worker serves the approvals API:\n%s", p.logs)
	return p
}

// stop stops the worker with SIGTERM, which exports what it holds.
func (p *tracedWorker) stop() {
	p.t.Helper()
	require.NoError(p.t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.exited:
		require.NoError(p.t, err, "the worker exits 0 on SIGTERM:\n%s", p.logs)
	case <-time.After(time.Minute):
		p.t.Fatalf("the worker did not stop on SIGTERM:\n%s", p.logs)
	}
}

// await waits for run's status to satisfy cond, asking the API.
func (w *tracedWorld) await(run, what string, cond func(workflows.Status) bool) workflows.Status {
	w.t.Helper()
	var st workflows.Status
	require.Eventually(w.t, func() bool {
		var err error
		st, err = w.ops.Status(context.Background(), run)
		return err == nil && cond(st)
	}, time.Minute, 100*time.Millisecond, "%s", what)
	return st
}

// tracedPlan looks order 1001 up, credits it 259.00 EUR (which waits for
// approval), refunds 5.00 EUR of payment pay_1001 at the provider and
// opens a ticket at the MCP desk.
var tracedPlan = append([]planner.Call{
	call(shop.ToolLookupOrder, `{"order_id":"1001"}`),
	call(shop.ToolIssueCredit, `{"order_id":"1001","reason":"damaged","amount_cents":25900,"currency":"EUR"}`),
	call(payments.RefundPayment, `{"order_id":"1001","payment_id":"pay_1001","amount_cents":500,"currency":"EUR","reason":"damaged"}`),
}, ticketPlan()...)

// startAndApprove starts run with tracedPlan through the API and approves
// its credit as dana.
func (w *tracedWorld) startAndApprove(run string) {
	w.t.Helper()
	ctx := context.Background()
	_, code, err := w.ops.Start(ctx, approvals.StartRequest{RunID: run, Plan: tracedPlan})
	require.NoError(w.t, err)
	require.Equal(w.t, http.StatusCreated, code)
	st := w.await(run, "the credit waits for approval", func(s workflows.Status) bool { return s.State == workflows.RunWaitingForApproval })
	_, _, err = w.dna.Decide(ctx, run, 2, workflows.DecisionApprove, approvals.DecideRequest{ArgsHash: st.Steps[1].ArgsHash, Comment: "photos"})
	require.NoError(w.t, err)
}

// trace returns the trace of run's step spans, checking that they share
// one, and the spans by tool.
func (w *tracedWorld) trace(run string) (string, map[string][]receivedSpan) {
	w.t.Helper()
	steps := w.recv.named("oncerun.step ", map[string]string{"oncerun.run_id": run})
	require.NotEmpty(w.t, steps, "step spans of run %s", run)
	trace := steps[0].TraceID
	byTool := map[string][]receivedSpan{}
	for _, s := range steps {
		assert.Equal(w.t, trace, s.TraceID, "step span %s is in the run's trace", s.Name)
		byTool[s.Attrs["oncerun.tool"]] = append(byTool[s.Attrs["oncerun.tool"]], s)
	}
	return trace, byTool
}

// inTrace returns the spans of trace whose name starts with prefix.
func (w *tracedWorld) inTrace(trace, prefix string) []receivedSpan {
	var out []receivedSpan
	for _, s := range w.recv.Spans() {
		if s.TraceID == trace && strings.HasPrefix(s.Name, prefix) {
			out = append(out, s)
		}
	}
	return out
}

// providerJoins checks that the provider's one refund came with a
// traceparent of trace (in its HTTP headers), and the desk's one ticket too
// (in the MCP request's _meta).
func (w *tracedWorld) providerJoins(trace string) {
	w.t.Helper()
	refunds := w.provider.Refunds()
	require.Len(w.t, refunds, 1, "one refund at the provider")
	parts := strings.Split(refunds[0].Traceparent, "-")
	require.Len(w.t, parts, 4, "the provider received a traceparent: %q", refunds[0].Traceparent)
	assert.Equal(w.t, trace, parts[1], "the provider's refund belongs to the run's trace")
	tickets, _, err := desk.ReadLedger(w.deskDir)
	require.NoError(w.t, err)
	require.Len(w.t, tickets, 1, "one ticket at the desk")
	parts = strings.Split(tickets[0].Traceparent, "-")
	require.Len(w.t, parts, 4, "the desk received a traceparent in _meta: %q", tickets[0].Traceparent)
	assert.Equal(w.t, trace, parts[1], "the desk's ticket belongs to the run's trace")
}

// TestOneTraceFollowsARun: a run started through the API, with a credit
// that waits for an approver and a refund at the provider, is one trace at
// an OTLP receiver: the API's start request, the workflow, each step's span
// with its key, class and outcome, the database's queries, the approval's
// wait with its approver, and the provider's side, which got our
// traceparent with the refund.
func TestOneTraceFollowsARun(t *testing.T) {
	t.Parallel()
	w := newTracedWorld(t)
	p := w.start()
	run := "r-" + w.queue
	w.startAndApprove(run)
	st := w.await(run, "the run completes", func(s workflows.Status) bool { return s.State == workflows.RunCompleted })
	p.stop()

	trace, byTool := w.trace(run)
	require.Len(t, byTool, 4, "a span per step: %v", byTool)
	for tool, spans := range byTool {
		require.Len(t, spans, 1, tool)
		s := spans[0]
		assert.Equal(t, "executed", s.Attrs["oncerun.outcome"], tool)
		assert.Equal(t, "acme", s.Attrs["oncerun.tenant"])
		assert.NotEmpty(t, s.Attrs["oncerun.args_hash"])
	}
	assert.Equal(t, st.Steps[1].Key, byTool[shop.ToolIssueCredit][0].Attrs["oncerun.key"])
	assert.Equal(t, "natural", byTool[shop.ToolIssueCredit][0].Attrs["oncerun.class"])
	assert.Equal(t, "external", byTool[payments.RefundPayment][0].Attrs["oncerun.class"])
	assert.Equal(t, "read", byTool[shop.ToolLookupOrder][0].Attrs["oncerun.class"])

	assert.NotEmpty(t, w.inTrace(trace, "StartWorkflow:AgentRun"), "the API's start of the run is in its trace")
	runSpans := w.inTrace(trace, "RunWorkflow:AgentRun")
	require.NotEmpty(t, runSpans, "the workflow is in its trace")
	assert.Equal(t, run, runSpans[0].Attrs["oncerun.run_id"], "the run's span names the run")
	assert.Equal(t, "acme", runSpans[0].Attrs["oncerun.tenant"])
	assert.NotEmpty(t, w.inTrace(trace, "RunActivity:RunTool"), "the activities are in its trace")
	assert.NotEmpty(t, w.inTrace(trace, "oncerun.plan script"), "the planning turns are in its trace")
	assert.NotEmpty(t, w.inTrace(trace, "oncerun.do"), "the credit's transaction is in its trace")
	assert.NotEmpty(t, w.inTrace(trace, "oncerun.external "+payments.RefundPayment), "the provider's call is in its trace")
	var root []receivedSpan
	for _, s := range w.recv.Spans() {
		if s.TraceID == trace && s.ParentID == "" {
			root = append(root, s)
		}
	}
	require.Len(t, root, 1, "one root: the API's start request")
	assert.Equal(t, "approvals", root[0].Name)
	assert.Equal(t, "POST", root[0].Attrs["http.request.method"])

	approval := w.inTrace(trace, "oncerun.approval")
	require.Len(t, approval, 1, "the wait for a decision is one span of the run's trace")
	assert.Equal(t, "dana", approval[0].Attrs["oncerun.approver"])
	assert.Equal(t, "approved", approval[0].Attrs["oncerun.decision"])
	assert.Less(t, approval[0].Start, approval[0].End)
	// dana's decision is a request of its own, linked to the run's trace
	// where the run asked.
	var decisions []receivedSpan
	for _, s := range w.recv.Spans() {
		if s.Name == "approvals" && s.TraceID != trace && strings.Contains(s.Attrs["url.path"], "/v1/runs/"+run+"/steps/2/") {
			decisions = append(decisions, s)
		}
	}
	require.Len(t, decisions, 1, "dana's decision is one request")
	require.Len(t, decisions[0].Links, 1, "the decision's request links to the run")
	asked := strings.Split(decisions[0].Links[0], "/")
	assert.Equal(t, trace, asked[0], "the decision links to the run's trace")
	var requested bool
	for _, s := range w.inTrace(trace, "RunActivity:RequestApproval") {
		requested = requested || s.SpanID == asked[1]
	}
	assert.True(t, requested, "the link names the run's request for approval")

	// The credit's e-mail to the customer is delivered in the run's trace,
	// under the follow-up's key.
	require.Len(t, st.Steps[1].FollowUps, 1)
	fu := st.Steps[1].FollowUps[0]
	deliver := w.inTrace(trace, "oncerun.deliver")
	require.Len(t, deliver, 1, "the e-mail's delivery is one span of the run's trace")
	assert.Equal(t, fu.Key, deliver[0].Attrs["oncerun.key"])
	assert.Equal(t, "delivered", deliver[0].Attrs["oncerun.delivery"])
	require.Len(t, w.mailbox.Messages(), 1)

	var queries int
	for _, s := range w.recv.Spans() {
		if s.TraceID == trace && s.Attrs["db.system.name"]+s.Attrs["db.system"] != "" {
			queries++
		}
	}
	assert.Positive(t, queries, "the steps' database work is in the run's trace")
	w.providerJoins(trace)
	// The worker's log lines about the steps carry the trace.
	var logged int
	for _, line := range strings.Split(p.logs.String(), "\n") {
		if strings.Contains(line, "tool call completed") && strings.Contains(line, run) {
			assert.Contains(t, line, `"trace_id":"`+trace+`"`, line)
			logged++
		}
	}
	assert.Equal(t, 4, logged, "a log line per step:\n%s", p.logs)
}

// TestOneTraceAcrossContinueAsNew: a run whose history passes its limit
// continues as new, twice or more; its generations and all their steps are
// one trace, whose only root is the first generation's.
func TestOneTraceAcrossContinueAsNew(t *testing.T) {
	t.Parallel()
	w := newTracedWorld(t)
	p := w.start()
	run := "r-" + w.queue
	var plan []planner.Call
	// Steps of a database tool run as local activities, a marker each in
	// the history: at a limit of 16 events a generation holds about 12.
	for i := range 30 {
		plan = append(plan, call(shop.ToolLookupOrder, fmt.Sprintf(`{"order_id":"%d"}`, 1001+i%2)))
	}
	rc := &runs.Client{Temporal: temporalClient, TaskQueue: w.queue}
	_, err := rc.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Plan: plan,
		Limits: workflows.Limits{HistoryLimit: workflows.MinHistoryLimit}})
	require.NoError(t, err)
	w.await(run, "the run completes", func(s workflows.Status) bool { return s.State == workflows.RunCompleted })
	p.stop()

	trace, byTool := w.trace(run)
	require.Len(t, byTool[shop.ToolLookupOrder], 30, "a span per step, across generations")
	generations := w.inTrace(trace, "RunWorkflow:AgentRun")
	require.GreaterOrEqual(t, len(generations), 3, "the run continued as new at least twice, each generation in the run's trace")
	for _, g := range generations {
		assert.Equal(t, run, g.Attrs["oncerun.run_id"], "each generation's span names the run")
	}
	var roots []string
	for _, s := range w.recv.Spans() {
		if s.TraceID == trace && s.ParentID == "" {
			roots = append(roots, s.Name)
		}
	}
	assert.Equal(t, []string{"RunWorkflow:AgentRun"}, roots, "one root: the first generation")
}

// TestOneTraceSurvivesACrashAndADroppedAnswer: the worker is SIGKILLed
// after the approved credit commits, and another takes the run over; the
// provider applies the refund and drops its answer, and the paired read
// settles it. The run is still one trace: the credit's retry is marked
// replayed, the refund resolved, and the provider's refund carries the
// trace.
func TestOneTraceSurvivesACrashAndADroppedAnswer(t *testing.T) {
	t.Parallel()
	w := newTracedWorld(t)
	first := w.start("ONCERUN_CRASH_AT=after-commit:" + shop.ToolIssueCredit)
	require.NoError(t, w.provider.SetFault(sandbox.FaultDropAfterApply, 1))
	run := "r-" + w.queue
	w.startAndApprove(run)
	select {
	case <-first.exited:
	case <-time.After(time.Minute):
		t.Fatalf("the worker did not crash after the credit committed:\n%s", first.logs)
	}
	second := w.start()
	w.await(run, "the run completes on the second worker", func(s workflows.Status) bool { return s.State == workflows.RunCompleted })
	second.stop()

	trace, byTool := w.trace(run)
	credit := byTool[shop.ToolIssueCredit]
	require.NotEmpty(t, credit)
	last := credit[len(credit)-1]
	assert.Equal(t, "replayed", last.Attrs["oncerun.outcome"], "the credit's retry on the second worker replays its key")
	refund := byTool[payments.RefundPayment]
	require.NotEmpty(t, refund)
	assert.Equal(t, "resolved", refund[len(refund)-1].Attrs["oncerun.outcome"], "the refund's dropped answer is settled by its paired read")
	found := w.inTrace(trace, "oncerun.paired_read")
	require.NotEmpty(t, found, "the paired read is in the run's trace")
	assert.Equal(t, "true", found[len(found)-1].Attrs["oncerun.found"])
	approval := w.inTrace(trace, "oncerun.approval")
	require.Len(t, approval, 1)
	assert.Equal(t, "dana", approval[0].Attrs["oncerun.approver"])
	w.providerJoins(trace)
}
