package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/internal/alerts"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/internal/watchdog"
	"github.com/oncerun/oncerun/workflows"
)

// expire moves the expiry of the run's keys an hour into the past.
func (e *env) expire(runID string) {
	e.t.Helper()
	_, err := e.pool.Exec(context.Background(),
		`UPDATE idempotency_keys SET expires_at = statement_timestamp() - interval '1 hour' WHERE run_id = $1`, runID)
	require.NoError(e.t, err)
}

// watchdog runs one pass of the watchdog workflow on the test's queue.
func (e *env) watchdog(policy string, batch int) watchdog.Result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := e.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: e.queue},
		watchdog.WorkflowName, watchdog.Input{Policy: policy, BatchSize: batch})
	require.NoError(e.t, err)
	var res watchdog.Result
	require.NoError(e.t, run.Get(ctx, &res))
	e.saveHistoryOf(run.GetID(), e.t.Name()+"-Watchdog-"+policy)
	return res
}

func TestWatchdogPrunesKeysOfClosedRunsWithoutAlerts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := e.startWorker("w1", sdkworker.Options{})
	run := e.id("r-closed")
	_, err := e.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Plan: refundPlan("5000")})
	require.NoError(t, err)
	e.result("acme", run)
	require.Equal(t, 2, e.count("idempotency_keys", "run_id = $1", run))
	e.expire(run)

	res := e.watchdog(watchdog.PolicyHold, 0)

	assert.Equal(t, 2, res.Totals.Pruned)
	assert.Zero(t, res.Totals.Alerts)
	assert.Zero(t, e.count("idempotency_keys", "run_id = $1", run))
	assert.Zero(t, e.count("key_expiry_alerts", "true"))
	assert.Equal(t, 1.0, testutil.ToFloat64(w.metrics.KeysPruned.WithLabelValues(shop.ToolAddOrderNote)))
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme'"), "the natural key outlives its pruned dedup key")
}

func TestWatchdogAlertsOncePerKeyOfALiveRun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var mu sync.Mutex
	var posted []alerts.KeyExpired
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a alerts.KeyExpired
		if json.NewDecoder(r.Body).Decode(&a) == nil {
			mu.Lock()
			posted = append(posted, a)
			mu.Unlock()
		}
	}))
	t.Cleanup(hook.Close)
	e.webhook = &alerts.Webhook{URL: hook.URL, Backoff: time.Millisecond}
	w := e.startWorker("w1", sdkworker.Options{})
	run := e.id("r-live")
	_, err := e.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Plan: refundPlan("25900")})
	require.NoError(t, err)
	e.waitFor("acme", run, "the credit's approval", func(s workflows.Status) bool {
		return s.State == workflows.RunWaitingForApproval
	})
	noteKey := fmt.Sprintf("v1/acme/%s/2/add_order_note", run)
	e.expire(run)

	held := e.watchdog(watchdog.PolicyHold, 0)
	assert.Equal(t, 1, held.Totals.Held)
	assert.Equal(t, 1, held.Totals.Alerts)
	assert.Equal(t, 1, e.count("idempotency_keys", "key = $1 AND expires_at > statement_timestamp() + interval '29 days'", noteKey),
		"the held key's expiry moved a window ahead")
	again := e.watchdog(watchdog.PolicyHold, 0)
	assert.Zero(t, again.Totals.Selected, "a held key is not due again")

	e.expire(run)
	pruned := e.watchdog(watchdog.PolicyPrune, 0)
	assert.Equal(t, 1, pruned.Totals.PrunedAlive)
	assert.Zero(t, e.count("idempotency_keys", "key = $1", noteKey))

	assert.Equal(t, 1, e.count("key_expiry_alerts", "key = $1 AND policy = 'hold' AND run_state = 'running'", noteKey))
	assert.Equal(t, 1, e.count("key_expiry_alerts", "key = $1 AND policy = 'prune'", noteKey))
	assert.Equal(t, 1.0, testutil.ToFloat64(w.metrics.KeysExpiredAlive.WithLabelValues(shop.ToolAddOrderNote, "hold")))
	assert.Equal(t, 1.0, testutil.ToFloat64(w.metrics.KeysExpiredAlive.WithLabelValues(shop.ToolAddOrderNote, "prune")))
	e.webhook.Wait()
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, posted, 2, "one webhook POST per alert")
	assert.Equal(t, noteKey, posted[0].Key)
	assert.Equal(t, run, posted[0].RunID)
	assert.Equal(t, "running", posted[0].RunState)
}

func TestConcurrentWatchdogsNeverDoubleCount(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w1 := e.startWorker("w1", sdkworker.Options{})
	w2 := e.startWorker("w2", sdkworker.Options{})
	run := e.id("r-many")
	_, err := e.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Plan: refundPlan("25900")})
	require.NoError(t, err)
	e.waitFor("acme", run, "the credit's approval", func(s workflows.Status) bool {
		return s.State == workflows.RunWaitingForApproval
	})
	// 400 more expired keys of the same live run.
	_, err = e.pool.Exec(context.Background(), `
INSERT INTO idempotency_keys (tenant, key, run_id, step, tool, state, args_hash, result, completed_at, expires_at)
SELECT 'acme', 'v1/acme/' || $1 || '/' || n || '/add_order_note', $1, n, 'add_order_note', 'completed',
       repeat('a', 64), '{}', now(), now() - interval '1 hour'
FROM generate_series(100, 499) AS n`, run)
	require.NoError(t, err)
	e.expire(run)

	var wg sync.WaitGroup
	results := make([]watchdog.Result, 2)
	for i := range results {
		wg.Go(func() { results[i] = e.watchdog(watchdog.PolicyHold, 50) })
	}
	wg.Wait()

	alerted := results[0].Totals.Alerts + results[1].Totals.Alerts
	assert.Equal(t, 401, alerted, "every key alerted on exactly once between the two passes")
	assert.Equal(t, 401, e.count("key_expiry_alerts", "run_id = $1", run))
	metric := testutil.ToFloat64(w1.metrics.KeysExpiredAlive.WithLabelValues(shop.ToolAddOrderNote, "hold")) +
		testutil.ToFloat64(w2.metrics.KeysExpiredAlive.WithLabelValues(shop.ToolAddOrderNote, "hold"))
	assert.Equal(t, 401.0, metric)
}

func TestKeysExpiringListsOnlyKeysOfOpenRuns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", sdkworker.Options{})
	ctx := context.Background()
	live, closed := e.id("r-open"), e.id("r-done")
	_, err := e.runs.Start(ctx, workflows.RunInput{Tenant: "acme", RunID: live, Plan: refundPlan("25900")})
	require.NoError(t, err)
	_, err = e.runs.Start(ctx, workflows.RunInput{Tenant: "acme", RunID: closed,
		Plan: []planner.Call{call(shop.ToolAddOrderNote, `{"order_id":"1002","text":"done"}`)}})
	require.NoError(t, err)
	e.result("acme", closed)
	e.waitFor("acme", live, "the credit's approval", func(s workflows.Status) bool {
		return s.State == workflows.RunWaitingForApproval
	})
	_, err = e.pool.Exec(ctx, `UPDATE idempotency_keys SET expires_at = statement_timestamp() + interval '2 hours'`)
	require.NoError(t, err)

	out, err := e.oncerun("keys", "--expiring", "--within", "24h", "--json")
	require.NoError(t, err, out)
	var raw []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &raw), out)
	require.Len(t, raw, 1, "only the open run's key: %s", out)
	assert.Equal(t, live, raw[0]["run_id"])
	assert.Equal(t, "running", raw[0]["run_state"])
	assert.Equal(t, fmt.Sprintf("v1/acme/%s/2/add_order_note", live), raw[0]["key"])

	out, err = e.oncerun("keys", "--expiring", "--within", "1h")
	require.NoError(t, err, out)
	assert.Contains(t, out, "no key of an open run expires within 1h0m0s")

	out, err = e.oncerun("keys", "--expiring", "--within", "24h")
	require.NoError(t, err, out)
	assert.Regexp(t, `(?m)^acme\s+`+live+`\s+2\s+add_order_note`, out)
}

func TestWatchdogScheduleIsCreatedOnceAndUpdated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// An ID of the test's own: the worker process test creates the default.
	id := "oncerun-expiry-watchdog-test"
	require.NoError(t, watchdog.EnsureSchedule(ctx, temporalClient, "q-sched", watchdog.Config{Interval: time.Hour, ScheduleID: id}))
	require.NoError(t, watchdog.EnsureSchedule(ctx, temporalClient, "q-sched",
		watchdog.Config{Interval: 2 * time.Hour, Policy: "prune", ScheduleID: id}),
		"a second worker's start finds the schedule and updates it")

	desc, err := temporalClient.ScheduleClient().GetHandle(ctx, id).Describe(ctx)
	require.NoError(t, err)
	require.Len(t, desc.Schedule.Spec.Intervals, 1)
	assert.Equal(t, 2*time.Hour, desc.Schedule.Spec.Intervals[0].Every)
	action, ok := desc.Schedule.Action.(*client.ScheduleWorkflowAction)
	require.True(t, ok)
	assert.Equal(t, "Watchdog", action.Workflow)
	assert.Equal(t, "q-sched", action.TaskQueue)
	list, err := temporalClient.ScheduleClient().List(ctx, client.ScheduleListOptions{})
	require.NoError(t, err)
	n := 0
	for list.HasNext() {
		s, err := list.Next()
		require.NoError(t, err)
		if s.ID == id {
			n++
		}
	}
	assert.Equal(t, 1, n, "one schedule however many workers start")
}
