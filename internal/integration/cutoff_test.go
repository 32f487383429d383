package integration

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/oncerun/oncerun/internal/netfault"
	"github.com/oncerun/oncerun/internal/payments"
	"github.com/oncerun/oncerun/internal/planner"
	sandbox "github.com/oncerun/oncerun/internal/sandbox/payments"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/worker"
	"github.com/oncerun/oncerun/workflows"
)

// cutOffWorld is a test's world of two worker processes on one task queue,
// a and b, built as `oncerun worker` builds its own; a reaches PostgreSQL
// through a netfault proxy.
type cutOffWorld struct {
	*externalWorld
	proxy *netfault.Proxy
	// aLogs holds what worker a logged at info and above.
	aLogs *observer.ObservedLogs
	aHTTP string
	// bURL is worker b's database URL: the server's own address.
	bURL string
}

// startProcess builds and serves a worker process of cfg until the test
// ends (or stop is called), and returns its HTTP address.
func startProcess(t testing.TB, cfg worker.Config) (httpAddr string, stop func()) {
	t.Helper()
	ready := make(chan string, 1)
	cfg.Ready = func(addr string) { ready <- addr }
	ctx, cancel := context.WithCancel(context.Background())
	p, err := worker.Build(ctx, cfg)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		assert.NoError(t, <-done)
		p.Close()
	}
	t.Cleanup(stop)
	select {
	case httpAddr = <-ready:
	case err := <-done:
		t.Fatalf("the worker stopped at start: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the worker did not start in a minute")
	}
	return httpAddr, stop
}

// setupCutOff starts worker a, whose link to link ("postgres" or
// "temporal") goes through the world's proxy.
func setupCutOff(t testing.TB, link string) *cutOffWorld {
	t.Helper()
	w := &cutOffWorld{externalWorld: setupExternal(t, 0)}
	u, err := url.Parse(w.pool.Config().ConnString())
	require.NoError(t, err)
	w.bURL = u.String()
	target := map[string]string{"postgres": u.Host, "temporal": frontend}[link]
	w.proxy, err = netfault.Listen("127.0.0.1:0", target)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.proxy.Close() })

	core, logs := observer.New(zap.InfoLevel)
	w.aLogs = logs
	aLog := zap.New(zapcore.NewTee(core, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Core())).Named("a")
	cfg := w.workerConfig(w.bURL, aLog)
	// Its attempts are logged, so that the test sees it take none while
	// it is cut off.
	cfg.LogActivityAttempts = true
	if link == "postgres" {
		u.Host = w.proxy.Addr()
		cfg.DatabaseURL = u.String()
	} else {
		cfg.TemporalAddress = w.proxy.Addr()
	}
	w.aHTTP, _ = startProcess(t, cfg)
	return w
}

// workerConfig is a worker of the test's queue on databaseURL.
func (w *cutOffWorld) workerConfig(databaseURL string, log *zap.Logger) worker.Config {
	return worker.Config{
		TemporalAddress: frontend, Namespace: namespace, TaskQueue: w.queue,
		DatabaseURL: databaseURL, HTTPAddr: "127.0.0.1:0", Logger: log,
		External: worker.ExternalConfig{Payments: payments.Config{BaseURL: w.provider.URL(), APIKey: sandbox.DefaultAPIKey}},
	}
}

// startWorkerB starts worker b, which reaches PostgreSQL directly.
func (w *cutOffWorld) startWorkerB() {
	w.t.Helper()
	startProcess(w.t, w.workerConfig(w.bURL, zaptest.NewLogger(w.t, zaptest.Level(zap.WarnLevel)).Named("b")))
}

// startRun starts a run that looks order 1001 up, adds two notes, issues a
// credit below the approval threshold and refunds a payment of its own.
func (w *cutOffWorld) startRun(run string) {
	w.t.Helper()
	payment := w.pay("pay_"+run, 10000)
	plan := []planner.Call{
		{Tool: shop.ToolLookupOrder, Args: json.RawMessage(`{"order_id":"1001"}`)},
		{Tool: shop.ToolAddOrderNote, Args: json.RawMessage(fmt.Sprintf(`{"order_id":"1001","text":"%s: first"}`, run))},
		{Tool: shop.ToolAddOrderNote, Args: json.RawMessage(fmt.Sprintf(`{"order_id":"1001","text":"%s: second"}`, run))},
		{Tool: shop.ToolIssueCredit, Args: json.RawMessage(fmt.Sprintf(`{"order_id":"1001","reason":%q,"amount_cents":2500,"currency":"EUR"}`, run))},
		{Tool: payments.RefundPayment, Args: json.RawMessage(fmt.Sprintf(
			`{"order_id":"1001","payment_id":%q,"amount_cents":1000,"currency":"EUR","reason":"damaged"}`, payment))},
	}
	_, err := w.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Plan: plan})
	require.NoError(w.t, err)
}

// closed reports whether every run has ended.
func (w *cutOffWorld) closed(runIDs []string) (open []string) {
	for _, run := range runIDs {
		d, err := w.tc.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID("acme", run), "")
		if err != nil || d.WorkflowExecutionInfo.Status == enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
			open = append(open, run)
		}
	}
	return open
}

// ready returns the status of a worker's /readyz.
func ready(httpAddr string) int {
	resp, err := http.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	return resp.StatusCode
}

// handOver is a cut of worker a's link while runs go on: before runs
// start on a alone, then the link is black-holed, worker b starts and
// during more runs start. The cut lasts outage, or, when outage is zero,
// until every run ended (at most 90 s).
type handOver struct {
	link   string
	before int
	during int
	hold   time.Duration
	outage time.Duration
}

// handedOver is what a hand-over took.
type handedOver struct {
	// lastEnd is from the cut to the last run's close.
	lastEnd time.Duration
	// repoll is from the heal to worker a polling again.
	repoll time.Duration
	// attemptsWhileCut counts the activity attempts a began between its
	// give-back and the heal.
	attemptsWhileCut int
}

// run runs h in w and checks that every run ended before the heal, each
// effect made once.
func (h handOver) run(t testing.TB, w *cutOffWorld) handedOver {
	// The provider holds each refund: some are in flight at the cut.
	require.NoError(t, w.provider.SetFault(sandbox.FaultDelayPrefix+h.hold.String(), 1000))
	var runIDs []string
	for i := range h.before {
		run := w.id(fmt.Sprintf("cut-before-%d", i))
		runIDs = append(runIDs, run)
		w.startRun(run)
	}
	// Worker a has begun them all.
	require.Eventually(t, func() bool {
		return w.count("idempotency_keys", "tenant = 'acme' AND key LIKE 'v1/acme/cut-before-%'") >= h.before
	}, time.Minute, 100*time.Millisecond)

	cut := time.Now()
	w.proxy.Set(netfault.Fault{Hold: netfault.Both})
	defer w.proxy.Heal()
	w.startWorkerB()
	for i := range h.during {
		run := w.id(fmt.Sprintf("cut-during-%d", i))
		runIDs = append(runIDs, run)
		w.startRun(run)
	}

	// Every run ends while a is still cut off.
	outage := cmp.Or(h.outage, 90*time.Second)
	for time.Since(cut) < outage && len(w.closed(runIDs)) > 0 {
		time.Sleep(250 * time.Millisecond)
	}
	open := w.closed(runIDs)
	require.Empty(t, open, "runs still open %s after the cut", time.Since(cut).Round(time.Second))
	var got handedOver
	for _, run := range runIDs {
		d, err := w.tc.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID("acme", run), "")
		require.NoError(t, err)
		got.lastEnd = max(got.lastEnd, d.WorkflowExecutionInfo.CloseTime.AsTime().Sub(cut))
	}
	assert.Equal(t, http.StatusServiceUnavailable, ready(w.aHTTP), "a cut-off worker is not ready")
	gaveBack := w.aLogs.FilterMessage("cut off; giving work back").All()
	require.Len(t, gaveBack, 1, "worker a gave its work back once")
	assert.Equal(t, h.link, gaveBack[0].ContextMap()["link"])
	if h.outage > 0 {
		time.Sleep(time.Until(cut.Add(h.outage)))
	}

	w.proxy.Heal()
	healed := time.Now()
	require.Eventually(t, func() bool { return ready(w.aHTTP) == http.StatusOK }, 30*time.Second, 50*time.Millisecond,
		"worker a polls again once %s answers", h.link)
	got.repoll = time.Since(healed)
	back := w.aLogs.FilterMessage("reachable again; taking work").All()
	require.Len(t, back, 1)
	assert.Equal(t, h.link, back[0].ContextMap()["link"])
	for _, e := range w.aLogs.FilterMessage(worker.LogActivityStarted).All() {
		if e.Time.After(gaveBack[0].Time) && e.Time.Before(healed) {
			got.attemptsWhileCut++
		}
	}
	assert.Zero(t, got.attemptsWhileCut, "worker a began no attempt while cut off")

	for _, run := range runIDs {
		st := w.result("acme", run)
		require.Equal(t, workflows.RunCompleted, st.State, "run %s: %+v", run, st)
		for _, s := range st.Steps {
			assert.Equal(t, workflows.StepDone, s.State, "run %s step %d: %s", run, s.Step, s.Error)
		}
		assert.Equal(t, 2, w.count("order_notes", "body LIKE $1", run+": %"), "run %s: its two notes, once each", run)
		assert.Equal(t, 1, w.count("credits", "reason = $1", run), "run %s: one credit", run)
		assert.Len(t, w.refunds("pay_"+run), 1, "run %s: one refund at the provider", run)
	}
	assert.Zero(t, w.count("idempotency_keys", "tenant = 'acme' AND state <> 'completed'"), "every key completed")
	assert.Zero(t, w.reconcile().DriftCount)
	return got
}

// One of two workers is cut off (a black hole: its sockets stay open and
// nothing arrives), from PostgreSQL or from Temporal, while its runs are
// under way, and more runs start during the cut. The runs it held go on on
// the other worker and every run ends while the cut lasts, each effect
// made once; the cut worker says so on /readyz, begins no attempt while
// cut off, and takes work again once the link answers.
func TestAWorkerCutOffHandsItsRunsOver(t *testing.T) {
	t.Parallel()
	for _, link := range []string{"postgres", "temporal"} {
		t.Run(link, func(t *testing.T) {
			t.Parallel()
			got := handOver{link: link, before: 6, during: 6, hold: 2 * time.Second}.run(t, setupCutOff(t, link))
			t.Logf("cut off from %s: every run ended %s after the cut; polling again %s after the heal",
				link, got.lastEnd.Round(100*time.Millisecond), got.repoll.Round(100*time.Millisecond))
		})
	}
}

// BenchmarkHandOver measures, side by side with the outage's length, how
// long after one of two workers is cut off from PostgreSQL every run has
// ended (10 runs begun on it before the cut, 10 started during it, each a
// lookup, two notes, a credit and a refund the provider holds 3 s), and
// how soon after the heal it polls again: the bound must not grow with the
// outage.
func BenchmarkHandOver(b *testing.B) {
	for _, outage := range []time.Duration{40 * time.Second, 150 * time.Second} {
		b.Run(fmt.Sprintf("postgres-%s", outage), func(b *testing.B) {
			var last, repoll time.Duration
			for range b.N {
				got := handOver{link: "postgres", before: 10, during: 10, hold: 3 * time.Second, outage: outage}.
					run(b, setupCutOff(b, "postgres"))
				last, repoll = max(last, got.lastEnd), max(repoll, got.repoll)
			}
			b.ReportMetric(last.Seconds(), "s-last-run-after-cut")
			b.ReportMetric(repoll.Seconds(), "s-polling-after-heal")
			b.ReportMetric(0, "ns/op")
		})
	}
}
