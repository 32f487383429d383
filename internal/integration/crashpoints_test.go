package integration

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/internal/payments"
	sandbox "github.com/oncerun/oncerun/internal/sandbox/payments"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/workflows"
)

// The crash-point tests put a worker process's death (or stop) exactly at
// one point of a step with the fault-injection variables, then check at
// the destination (the business tables, the provider's ledger) that the
// effect exists once after another worker recovered the run. The points
// before the effect also check that nothing was applied when the worker
// died.

// buildWorker builds the command whose `worker` the tests run.
func buildWorker(t *testing.T) string {
	t.Helper()
	return buildOncerun(t)
}

// workerProcess is the worker command running against a test's world.
type workerProcess struct {
	t      *testing.T
	cmd    *exec.Cmd
	logs   *syncBuffer
	exited chan error
}

// startWorkerProcess starts the worker command on e's task queue and
// database, with the provider of w when it is set, and extra variables.
func startWorkerProcess(t *testing.T, e *env, w *externalWorld, extra ...string) *workerProcess {
	t.Helper()
	var env []string
	if w != nil {
		env = append(env, "PAYMENTS_BASE_URL="+w.provider.URL(), "PAYMENTS_API_KEY="+sandbox.DefaultAPIKey)
	}
	return startCommandWorker(t, e, buildWorker(t), append(env, extra...)...)
}

// startCommandWorker starts bin's worker command, oncerun's or another
// build's, on e's task queue and database, with extra variables.
func startCommandWorker(t *testing.T, e *env, bin string, extra ...string) *workerProcess {
	t.Helper()
	cmd := exec.Command(bin, "worker")
	cmd.Env = append(localEnv(t, cmd.Environ()),
		"TEMPORAL_ADDRESS="+frontend, "TEMPORAL_NAMESPACE="+namespace, "TEMPORAL_TASK_QUEUE="+e.queue,
		"DATABASE_URL="+e.pool.Config().ConnString(), "METRICS_ADDR="+freeAddr(t), "APPROVALS_TOKENS_FILE=")
	cmd.Env = append(cmd.Env, extra...)
	p := &workerProcess{t: t, cmd: cmd, logs: &syncBuffer{}, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	require.NoError(t, cmd.Start())
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("%s worker process log:\n%s", filepath.Base(bin), p.logs.String())
		}
	})
	return p
}

// died waits for the process to kill itself with the fault's warning.
func (p *workerProcess) died(want string) {
	p.t.Helper()
	select {
	case err := <-p.exited:
		var exit *exec.ExitError
		require.ErrorAs(p.t, err, &exit, "the worker died by its own signal")
		assert.Equal(p.t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal())
	case <-time.After(2 * time.Minute):
		p.t.Fatalf("the worker did not kill itself: %s:\n%s", want, p.logs.String())
	}
	assert.Contains(p.t, p.logs.String(), "fault injection: killing this worker "+want)
}

// logged waits for a line containing want in the process's log.
func (p *workerProcess) logged(want string) {
	p.t.Helper()
	require.Eventually(p.t, func() bool { return strings.Contains(p.logs.String(), want) },
		2*time.Minute, 50*time.Millisecond, "the worker never logged %q:\n%s", want, p.logs.String())
}

// historyHas reports whether the run's history holds an event of type.
func (e *env) historyHas(runID string, typ enumspb.EventType) bool {
	e.t.Helper()
	return e.anyEvent(runID, func(ev *historypb.HistoryEvent) bool { return ev.GetEventType() == typ })
}

// anyEvent reports whether an event of the run's history satisfies is.
func (e *env) anyEvent(runID string, is func(*historypb.HistoryEvent) bool) bool {
	e.t.Helper()
	return e.countEvents(runID, is) > 0
}

// setShortTimeout gives tool a 2 s timeout in the test's in-process
// workers, so that an attempt that goes silent is retried soon.
func (e *env) setShortTimeout(tool string) {
	for i := range e.tools {
		if e.tools[i].Name == tool {
			e.tools[i].Timeout = 2 * time.Second
		}
	}
}

// a. The worker dies when the credit's step has started and nothing is
// claimed: nothing exists, and the retry credits once.
func TestCrashBeforeTheClaim(t *testing.T) {
	t.Parallel()
	e := setup(t)
	p := startWorkerProcess(t, e, nil, settings.EnvCrashAt+"=before-claim:issue_credit")
	run := e.id("before-claim")
	_, err := e.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Plan: refundPlan("5000")})
	require.NoError(t, err)

	p.died("before the step's key is claimed")
	credit := stepKey(t, run, 3, shop.ToolIssueCredit)
	assert.Zero(t, e.count("credits", "tenant = 'acme'"), "no credit before the claim")
	assert.Zero(t, e.count("idempotency_keys", "key = $1", credit), "no key before the claim")

	e.startWorker("w2", sdkworker.Options{})
	st := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND order_id = '1001'"), "one credit")
	assert.Equal(t, 1, e.count("idempotency_keys", "key = $1 AND state = 'completed' AND attempts = 1", credit),
		"claimed once, by the retry")
	assert.False(t, st.Steps[2].Replayed)
}

// c. The worker dies during the effect. A keyed note's rows are written in
// the key's transaction and die with it: nothing exists until the retry
// writes the note once. A refund's request has reached the provider, which
// applies it after the worker is gone; the provider forgets the key before
// the retry, and the retry settles the outcome by the paired read instead
// of refunding again.
func TestCrashDuringTheEffect(t *testing.T) {
	t.Parallel()
	t.Run("keyed", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		p := startWorkerProcess(t, e, nil, settings.EnvCrashAt+"=during-effect:add_order_note")
		run := e.id("during-note")
		_, err := e.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Plan: refundPlan("5000")})
		require.NoError(t, err)

		p.died("during the effect")
		note := stepKey(t, run, 2, shop.ToolAddOrderNote)
		assert.Zero(t, e.count("order_notes", "tenant = 'acme'"), "the note's write rolled back with the worker")
		assert.Zero(t, e.count("idempotency_keys", "key = $1", note), "and its key with it")

		e.startWorker("w2", sdkworker.Options{})
		st := e.result("acme", run)
		require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
		assert.Equal(t, 1, e.count("order_notes", "tenant = 'acme' AND order_id = '1001'"), "one note")
		assert.Equal(t, 1, e.count("idempotency_keys", "key = $1 AND state = 'completed'", note))
		assert.False(t, e.scheduledActivity(run, "RunTool"), "its steps ran as local activities")
	})
	t.Run("external", func(t *testing.T) {
		t.Parallel()
		w := setupExternal(t, time.Second)
		payment := w.pay("pay_"+w.id("during"), 10000)
		// The provider holds the request for 3 s: the worker dies while it
		// is being processed.
		require.NoError(t, w.provider.SetFault("delay=3s", 1))
		p := startWorkerProcess(t, w.env, w, settings.EnvCrashAt+"=during-effect:refund_payment")
		run := w.id("during-refund")
		w.startRefund(run, payment, 2500)

		p.died("during the effect")
		require.Eventually(t, func() bool { return len(w.refunds(payment)) == 1 }, 30*time.Second, 50*time.Millisecond,
			"the provider applies the dead worker's request")

		w.startWorker("w2", sdkworker.Options{})
		st := w.result("acme", run)
		require.Equal(t, workflows.StepDone, st.Steps[0].State, st.Steps[0].Error)
		ledger := w.refunds(payment)
		require.Len(t, ledger, 1, "one refund, though the provider forgot the key before the retry")
		rec, err := payments.RecordOf(st.Steps[0].Result)
		require.NoError(t, err)
		assert.Equal(t, ledger[0].ID, rec.ID, "the step records the provider's refund")
		assert.Equal(t, 1, w.count("idempotency_keys", "key = $1 AND state = 'completed' AND attempts = 2", st.Steps[0].Key),
			"the retry took the dead worker's lease over")
		assert.Zero(t, w.reconcile().DriftCount)
	})
}

// d and i. The worker dies after the provider applied the refund and
// before it was recorded; the provider forgets the key before the retry,
// which must settle the outcome by the paired read rather than send again.
// (TestRefundOnceWhenTheWorkerIsKilledAroundTheEffect covers the same
// point, and the one after the lease, with a provider that still knows the
// key.)
func TestCrashAfterTheProviderAppliedAndForgotTheKey(t *testing.T) {
	t.Parallel()
	w := setupExternal(t, time.Second)
	payment := w.pay("pay_"+w.id("forgot"), 10000)
	p := startWorkerProcess(t, w.env, w, settings.EnvCrashAt+"=after-apply:refund_payment")
	run := w.id("after-apply")
	w.startRefund(run, payment, 2500)

	p.died("after the effect")
	require.Len(t, w.refunds(payment), 1, "the provider applied the refund")
	time.Sleep(time.Second) // past the provider's key retention

	w.startWorker("w2", sdkworker.Options{})
	st := w.result("acme", run)
	require.Equal(t, workflows.StepDone, st.Steps[0].State, st.Steps[0].Error)
	ledger := w.refunds(payment)
	require.Len(t, ledger, 1, "no second refund")
	rec, err := payments.RecordOf(st.Steps[0].Result)
	require.NoError(t, err)
	assert.Equal(t, ledger[0].ID, rec.ID)
	assert.Zero(t, w.reconcile().DriftCount)
}

// e. The worker dies after the step committed and before Temporal heard of
// it: the retry replays the recorded result, for a natural credit and for
// a refund whose provider has forgotten the key by then.
func TestCrashAfterTheCommit(t *testing.T) {
	t.Parallel()
	t.Run("natural", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		p := startWorkerProcess(t, e, nil, settings.EnvCrashAt+"=after-commit:issue_credit")
		run := e.id("after-commit")
		_, err := e.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Plan: refundPlan("5000")})
		require.NoError(t, err)

		p.died("after the step committed")
		assert.Equal(t, 1, e.count("credits", "tenant = 'acme'"), "the credit committed")
		w2 := e.startWorker("w2", sdkworker.Options{})
		st := e.result("acme", run)
		require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
		assert.True(t, st.Steps[2].Replayed, "the retry replayed the step")
		assert.Equal(t, 1, e.count("credits", "tenant = 'acme'"), "one credit")
		assert.Equal(t, 1.0, testutil.ToFloat64(w2.metrics.ToolCalls.WithLabelValues(shop.ToolIssueCredit, "replayed")))
		assert.Zero(t, testutil.ToFloat64(w2.metrics.ToolCalls.WithLabelValues(shop.ToolIssueCredit, "executed")))
		assert.False(t, e.scheduledActivity(run, "RunTool"), "its steps ran as local activities")
	})
	t.Run("external", func(t *testing.T) {
		t.Parallel()
		w := setupExternal(t, time.Second)
		payment := w.pay("pay_"+w.id("commit"), 10000)
		p := startWorkerProcess(t, w.env, w, settings.EnvCrashAt+"=after-commit:refund_payment")
		run := w.id("after-commit-refund")
		w.startRefund(run, payment, 2500)

		p.died("after the step committed")
		key := stepKey(t, run, 1, payments.RefundPayment)
		assert.Equal(t, 1, w.count("idempotency_keys", "key = $1 AND state = 'completed'", key), "the refund is recorded")
		time.Sleep(time.Second) // past the provider's key retention
		w.startWorker("w2", sdkworker.Options{})
		st := w.result("acme", run)
		require.Equal(t, workflows.StepDone, st.Steps[0].State, st.Steps[0].Error)
		assert.True(t, st.Steps[0].Replayed)
		assert.Len(t, w.refunds(payment), 1, "one refund")
	})
}

// The after-commit fault fires after an attempt that committed, not after
// one that replayed a completed key: a crash worker that picks up the
// retry of a step that died after its commit replays it and lives. Step 3
// commits on a worker that never reports it (as one that died); the crash
// worker takes the retry, replays it, and dies only after step 4, which it
// commits itself.
func TestCrashAfterCommitWorkerLivesThroughAReplay(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.setShortTimeout(shop.ToolIssueCredit)
	block := &blockAfterCredit{committed: make(chan struct{})}
	w1 := e.startWorker("w1", sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{block}})
	run := e.id("lives")
	plan := append(refundPlan("5000"), call(shop.ToolIssueCredit, `{"order_id":"1002","reason":"late","amount_cents":700,"currency":"EUR"}`))
	_, err := e.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Plan: plan})
	require.NoError(t, err)
	select {
	case <-block.committed:
	case <-time.After(time.Minute):
		t.Fatal("the credit step never ran")
	}
	w1.Stop()

	p := startWorkerProcess(t, e, nil, settings.EnvCrashAt+"=after-commit:issue_credit")
	p.died("after the step committed")
	assert.Contains(t, p.logs.String(), `"step":4`, "it died after step 4")
	assert.Equal(t, 2, e.count("credits", "tenant = 'acme'"), "step 3 was replayed, step 4 committed")

	e.startWorker("w3", sdkworker.Options{})
	st := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
	assert.True(t, st.Steps[2].Replayed, "the crash worker replayed step 3")
	assert.True(t, st.Steps[3].Replayed, "the last worker replayed step 4")
	assert.Equal(t, 2, e.count("credits", "tenant = 'acme'"))
}

// f. The worker dies in the workflow task that schedules the credit: the
// task times out, another worker replays the run from its history and
// schedules the step, which credits once; the steps before were not run
// again.
func TestCrashDuringAWorkflowTask(t *testing.T) {
	t.Parallel()
	e := setup(t)
	p := startWorkerProcess(t, e, nil, settings.EnvCrashAt+"=workflow-task:issue_credit")
	run := e.id("workflow-task")
	_, err := e.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Plan: refundPlan("5000")})
	require.NoError(t, err)

	p.died("during the workflow task that schedules the step")
	assert.Zero(t, e.count("credits", "tenant = 'acme'"), "the step was never scheduled")
	assert.Equal(t, 1, e.count("order_notes", "tenant = 'acme'"))

	w2 := e.startWorker("w2", sdkworker.Options{})
	st := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND order_id = '1001'"), "one credit")
	assert.Equal(t, 1, e.count("order_notes", "tenant = 'acme' AND order_id = '1001'"), "one note")
	assert.False(t, st.Steps[2].Replayed)
	assert.True(t, e.historyHas(run, enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT), "the dead worker's task timed out")
	// The note's step, a local activity, ran in the workflow task that
	// died: the next worker ran it again, and the store replayed it.
	assert.Zero(t, testutil.ToFloat64(w2.metrics.ToolCalls.WithLabelValues(shop.ToolAddOrderNote, "executed")),
		"the note is not written again")
	assert.Equal(t, 1.0, testutil.ToFloat64(w2.metrics.ToolCalls.WithLabelValues(shop.ToolAddOrderNote, "replayed")))
	assert.False(t, e.scheduledActivity(run, "RunTool"), "its steps ran as local activities")
}

// scheduledActivity reports whether the run's history scheduled an
// activity of type typ (a local activity is a marker instead).
func (e *env) scheduledActivity(runID, typ string) bool {
	e.t.Helper()
	return e.anyEvent(runID, func(ev *historypb.HistoryEvent) bool {
		a := ev.GetActivityTaskScheduledEventAttributes()
		return a != nil && a.GetActivityType().GetName() == typ
	})
}

// g. The worker dies as the run begins to wait for the credit's approval;
// the approver decides while no worker runs. Another worker takes the wait
// up from history, applies the decision and credits once; nothing was
// credited before it.
func TestCrashDuringAnApprovalWait(t *testing.T) {
	t.Parallel()
	e := setup(t)
	p := startWorkerProcess(t, e, nil, settings.EnvCrashAt+"=approval-wait:issue_credit")
	run := e.id("approval-wait")
	ctx := context.Background()
	_, err := e.runs.Start(ctx, workflows.RunInput{Tenant: "acme", RunID: run, Plan: refundPlan("25900")})
	require.NoError(t, err)

	p.died("as the run begins to wait for the step's approval")
	assert.Zero(t, e.count("credits", "tenant = 'acme'"), "nothing is credited before the approval")
	var hash string
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT args_hash FROM approvals WHERE run_id = $1 AND step = 3 AND state = 'pending'`,
		run).Scan(&hash), "the pending approval is recorded")
	require.NoError(t, e.tc.SignalWorkflow(ctx, workflows.WorkflowID("acme", run), "", workflows.SignalApproval,
		workflows.Approval{Step: 3, Decision: workflows.DecisionApprove, Approver: "dana", ArgsHash: hash}))

	e.startWorker("w2", sdkworker.Options{})
	st := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
	assert.Equal(t, workflows.StepDone, st.Steps[2].State)
	assert.Equal(t, "dana", st.Steps[2].Approval.Approver)
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND order_id = '1001'"), "one credit")
	assert.Equal(t, 1, e.count("approvals", "run_id = $1 AND state = 'approved' AND decided_by = 'dana'", run))
}

// h. A worker stops (as one cut off from the network, or frozen) after its
// lease on the refund committed and before it sent anything. Its lease
// expires; another worker takes the step over and refunds. When the stale
// worker comes back it must not send the refund it was about to send, nor
// write its outcome over the new owner's, though the provider has forgotten
// the key by then.
func TestStaleWorkerComesBackAfterItsLease(t *testing.T) {
	t.Parallel()
	w := setupExternal(t, time.Second)
	payment := w.pay("pay_"+w.id("stale"), 10000)
	p := startWorkerProcess(t, w.env, w, settings.EnvStallAt+"=after-lease:refund_payment")
	run := w.id("stale")
	w.startRefund(run, payment, 2500)
	p.logged("fault injection: stopping this worker before the effect")
	key := stepKey(t, run, 1, payments.RefundPayment)
	assert.Empty(t, w.refunds(payment))

	w.startWorker("w2", sdkworker.Options{})
	st := w.result("acme", run)
	require.Equal(t, workflows.StepDone, st.Steps[0].State, st.Steps[0].Error)
	ledger := w.refunds(payment)
	require.Len(t, ledger, 1, "the new owner refunded")
	var owner string
	require.NoError(t, w.pool.QueryRow(context.Background(),
		`SELECT lease_owner FROM idempotency_keys WHERE key = $1 AND state = 'completed' AND attempts = 2`, key).Scan(&owner))
	time.Sleep(time.Second) // past the provider's key retention

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGCONT))
	p.logged("this worker was continued")
	p.logged("stale owner's")
	time.Sleep(2 * time.Second) // whatever the stale worker would send, it has sent by now
	assert.Len(t, w.refunds(payment), 1, "the stale worker sent nothing")
	var after string
	require.NoError(t, w.pool.QueryRow(context.Background(),
		`SELECT lease_owner FROM idempotency_keys WHERE key = $1 AND state = 'completed' AND attempts = 2`, key).Scan(&after))
	assert.Equal(t, owner, after, "the new owner's record stands")
	assert.Zero(t, w.reconcile().DriftCount)
}
