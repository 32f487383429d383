package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/server/temporaltest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/agents"
	"github.com/oncerun/oncerun/internal/alerts"
	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/metrics"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/worker"
	"github.com/oncerun/oncerun/workflows"
)

// The Temporal server every test of the package shares, and what tests need
// of it, read once: the server's methods are not safe for concurrent use.
// Each test has its own task queue and database.
var (
	server         *temporaltest.TestServer
	temporalClient client.Client
	frontend       string
	namespace      string
)

func TestMain(m *testing.M) {
	server = temporaltest.NewServer()
	temporalClient = server.GetDefaultClient()
	frontend = server.GetFrontendHostPort()
	namespace = server.GetDefaultNamespace()
	code := m.Run()
	server.Stop()
	for _, dir := range binDirs {
		_ = os.RemoveAll(dir)
	}
	os.Exit(code)
}

var queues atomic.Int64

// env is one test's world: a database, a task queue and a client.
type env struct {
	t     testing.TB
	pool  *pgxpool.Pool
	tc    client.Client
	queue string
	runs  *runs.Client
	tools []tools.Tool
	// webhook, when set before startWorker, receives the watchdog's alerts.
	webhook *alerts.Webhook
	// The approvals services' tokens, made by the first serveApprovals.
	apTokens  *approvals.Tokens
	apTokenOf map[string]string
	// log, when set, is the workers' and services' logger instead of one
	// that logs through t.
	log *zap.Logger
	// openai, when set before startWorker, configures its openai planner.
	openai planner.OpenAIConfig
	// agents, when set before startWorker, are its sub-agents.
	agents agents.Config
}

// logger returns the logger of the world's part called name.
func (e *env) logger(name string) *zap.Logger {
	if e.log != nil {
		return e.log.Named(name)
	}
	return zaptest.NewLogger(e.t).Named(name)
}

func setup(t testing.TB) *env {
	t.Helper()
	pool := pgtest.NewPool(t, 16)
	tc := temporalClient
	queue := fmt.Sprintf("oncerun-test-%d", queues.Add(1))
	return &env{
		t: t, pool: pool, tc: tc, queue: queue,
		runs:  &runs.Client{Temporal: tc, TaskQueue: queue, Pool: pool},
		tools: shop.Tools(shop.Config{}),
	}
}

// id makes name unique to the test, so that runs of a repeated test
// (-count) do not find the workflows of an earlier one on the shared server.
func (e *env) id(name string) string {
	return name + "-" + strings.TrimPrefix(e.queue, "oncerun-test-")
}

// worker is a started worker of the test's own, with its own metrics.
type testWorker struct {
	sdkworker.Worker
	metrics *metrics.Metrics
}

// startWorker starts a worker on the test's queue. Its store has an owner
// of its own, as a separate process would.
func (e *env) startWorker(name string, opts sdkworker.Options) *testWorker {
	e.t.Helper()
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, e.tools...)
	require.NoError(e.t, err)
	planners, err := worker.Planners(e.openai)
	require.NoError(e.t, err)
	log := e.logger(name)
	store, err := idempotency.New(e.pool, idempotency.Config{Logger: log, Owner: name + "-" + e.queue})
	require.NoError(e.t, err)
	m := metrics.New(prometheus.NewRegistry())
	var subAgents *agents.Set
	if len(e.agents.Agents) > 0 {
		subAgents, err = agents.New(e.agents, func(tool string) bool { _, ok := reg.Lookup(tool); return ok })
		require.NoError(e.t, err)
	}
	w := worker.NewWorker(e.tc, e.queue, &activities.Activities{
		Pool: e.pool, Store: store, Tools: reg, Planners: planners, Agents: subAgents, Log: log, Metrics: m,
	}, &worker.WatchdogActivities{
		Pool: e.pool, Tools: reg, Runs: &runs.Client{Temporal: e.tc}, Alerts: e.webhook, Metrics: m, Log: log,
	}, &worker.ReconcileActivities{Log: log}, opts)
	require.NoError(e.t, w.Start())
	stopped := false
	e.t.Cleanup(func() {
		if !stopped {
			w.Stop()
		}
	})
	return &testWorker{Worker: stopOnce(w, &stopped), metrics: m}
}

type onceStopper struct {
	sdkworker.Worker
	stopped *bool
}

func (w onceStopper) Stop() {
	if !*w.stopped {
		*w.stopped = true
		w.Worker.Stop()
	}
}

func stopOnce(w sdkworker.Worker, stopped *bool) sdkworker.Worker { return onceStopper{w, stopped} }

// waitFor polls the run's status until cond holds or a minute passes.
func (e *env) waitFor(tenant, runID string, what string, cond func(workflows.Status) bool) workflows.Status {
	e.t.Helper()
	var last workflows.Status
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		st, err := e.runs.Status(context.Background(), tenant, runID)
		if err == nil {
			last = st
			if cond(st) {
				return st
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatalf("run %s never reached %s; last status: %+v", runID, what, last)
	return last
}

// status asks the run for its status once it answers: a query waits for a
// worker to take it, which on a loaded machine can outlast one RPC's
// deadline, so a query that times out is asked again for up to a minute.
func (e *env) status(tenant, runID string) workflows.Status {
	e.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := e.runs.Status(context.Background(), tenant, runID)
		var timedOut *serviceerror.DeadlineExceeded
		if err == nil || !errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &timedOut) || time.Now().After(deadline) {
			require.NoError(e.t, err)
			return st
		}
	}
}

// result waits for the run to close and returns its final status.
func (e *env) result(tenant, runID string) workflows.Status {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var st workflows.Status
	require.NoError(e.t, e.tc.GetWorkflow(ctx, workflows.WorkflowID(tenant, runID), "").Get(ctx, &st))
	e.saveHistory(tenant, runID)
	return st
}

// count returns the number of rows of table matching where.
func (e *env) count(table, where string, args ...any) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.pool.QueryRow(context.Background(),
		"SELECT count(*) FROM "+table+" WHERE "+where, args...).Scan(&n))
	return n
}

// saveHistory writes the run's history to ONCERUN_RECORD_HISTORIES, if set.
func (e *env) saveHistory(tenant, runID string) {
	e.saveHistoryOf(workflows.WorkflowID(tenant, runID), e.t.Name())
}

// saveHistoryOf writes the history of workflow id to
// ONCERUN_RECORD_HISTORIES, if set, as name.json.
func (e *env) saveHistoryOf(id, name string) {
	dir := os.Getenv("ONCERUN_RECORD_HISTORIES")
	if dir == "" {
		return
	}
	ctx := context.Background()
	it := e.tc.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	hist := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(e.t, err)
		hist.Events = append(hist.Events, ev)
	}
	b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(hist)
	require.NoError(e.t, err)
	require.NoError(e.t, os.MkdirAll(dir, 0o755))
	require.NoError(e.t, os.WriteFile(filepath.Join(dir, strings.ReplaceAll(name, "/", "-")+".json"), b, 0o644))
}
