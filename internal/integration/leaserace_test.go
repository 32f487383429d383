package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/netfault"
	"github.com/oncerun/oncerun/internal/payments"
	"github.com/oncerun/oncerun/internal/planner"
	sandbox "github.com/oncerun/oncerun/internal/sandbox/payments"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// keyRow is what the lease-race tests read of a key's row.
type keyRow struct {
	State       string
	LeaseOwner  string
	Attempts    int32
	Result      json.RawMessage
	CompletedAt *time.Time
}

// keyRow reads the row of key, of tenant acme.
func (e *env) keyRow(key string) keyRow {
	e.t.Helper()
	var r keyRow
	require.NoError(e.t, e.pool.QueryRow(context.Background(), `
SELECT state, coalesce(lease_owner, ''), attempts, coalesce(result, 'null'::jsonb), completed_at
FROM idempotency_keys WHERE tenant = 'acme' AND key = $1`, key).
		Scan(&r.State, &r.LeaseOwner, &r.Attempts, &r.Result, &r.CompletedAt))
	return r
}

// poolThrough returns a pool on the test's database whose connections go
// through a proxy of their own, for a worker whose network to PostgreSQL
// the test breaks.
func (e *env) poolThrough() (*pgxpool.Pool, *netfault.Proxy) {
	e.t.Helper()
	cfg := e.pool.Config()
	target := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	proxy, err := netfault.Listen("127.0.0.1:0", target)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = proxy.Close() })
	host, port, err := net.SplitHostPort(proxy.Addr())
	require.NoError(e.t, err)
	p, err := strconv.ParseUint(port, 10, 16)
	require.NoError(e.t, err)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = host, uint16(p), nil
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(e.t, err)
	e.t.Cleanup(pool.Close)
	return pool, proxy
}

// stepActivities returns the activities of a worker of the test's own,
// with its pool, its logger, its tools and its store's owner, as a
// separate process would have them.
func (e *env) stepActivities(owner string, pool *pgxpool.Pool, log *zap.Logger, ts []tools.Tool) *activities.Activities {
	e.t.Helper()
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, ts...)
	require.NoError(e.t, err)
	store, err := idempotency.New(pool, idempotency.Config{Logger: log, Owner: owner})
	require.NoError(e.t, err)
	return &activities.Activities{Pool: pool, Store: store, Tools: reg, Log: log}
}

// TestLeaseRaceExternalCallLateWriteIsFenced: worker A's refund is in
// flight at the provider when A loses PostgreSQL, for longer than the
// key's lease. The provider applies the refund. Worker B, with its own
// pool and store owner, takes the step over once the lease has expired and
// settles it by the paired read. When A's network heals, A's record of its
// own outcome reaches PostgreSQL and is refused by the lease's fencing:
// the provider holds one refund, and the key's row is B's.
//
// The provider holds A's request either short of the moment A gives its
// lease up (two thirds of the lease, when no renewal got through), so that
// A has the provider's answer and records a completion, or past it, so
// that A's call is cancelled and A records a failure of unknown outcome.
//
// Both workers run the step's activity, RunTool, as a worker runs it, with
// the product's lease of an external call; the test plays Temporal's part
// of handing the step to B once A's attempt is given up.
func TestLeaseRaceExternalCallLateWriteIsFenced(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// delay is how long the provider holds A's refund.
		delay time.Duration
		// refused is the line A logs when its write is refused.
		refused string
	}{
		{name: "completion", delay: 6 * time.Second, refused: "stale owner's completion refused"},
		{name: "failure", delay: 10 * time.Second, refused: "stale owner's failure refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lateWriteIsFenced(t, tc.delay, tc.refused)
		})
	}
}

func lateWriteIsFenced(t *testing.T, delay time.Duration, refusedLine string) {
	w := setupExternal(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Worker A reaches PostgreSQL and the provider through proxies: the
	// provider's tells the test when A's request has left.
	poolA, db := w.poolThrough()
	toProvider, err := netfault.Listen("127.0.0.1:0", w.provider.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = toProvider.Close() })
	clientA, err := payments.New(payments.Config{BaseURL: "http://" + toProvider.Addr(), APIKey: sandbox.DefaultAPIKey})
	require.NoError(t, err)
	core, logsA := observer.New(zap.InfoLevel)
	logA := zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core())).Named("a")
	ownerA, ownerB := "a-"+w.queue, "b-"+w.queue
	a := w.stepActivities(ownerA, poolA, logA, payments.Tools(clientA, payments.ToolsConfig{}))
	b := w.stepActivities(ownerB, w.pool, w.logger("b"), payments.Tools(w.client, payments.ToolsConfig{}))

	payment := w.pay("pay_"+w.id("race"), 10000)
	run := w.id("race")
	p, err := a.Tools.Prepare(planner.Call{Tool: payments.RefundPayment,
		Args: json.RawMessage(fmt.Sprintf(`{"order_id":"1001","payment_id":%q,"amount_cents":2500,"currency":"EUR","reason":"damaged"}`, payment))})
	require.NoError(t, err)
	in := activities.ToolInput{Tenant: "acme", RunID: run, Step: 1, Tool: payments.RefundPayment, Args: p.Args, ArgsHash: p.ArgsHash}
	key := stepKey(t, run, 1, payments.RefundPayment)
	require.NoError(t, w.provider.SetFault(sandbox.FaultDelayPrefix+delay.String(), 1))

	doneA := make(chan error, 1)
	go func() {
		_, err := a.RunTool(ctx, in)
		doneA <- err
	}()
	w.eventually("A's refund request leaves for the provider", func() bool { return toProvider.Conns() > 0 })
	db.Set(netfault.Fault{Hold: netfault.Both})
	row := w.keyRow(key)
	require.Equal(t, []any{"in_flight", ownerA, int32(1)}, []any{row.State, row.LeaseOwner, row.Attempts},
		"A holds the key's lease while its call is in flight")

	w.eventually("the provider applies A's refund", func() bool { return len(w.refunds(payment)) == 1 })
	w.eventually("A's lease expires", func() bool {
		var expired bool
		require.NoError(t, w.pool.QueryRow(ctx, `SELECT lease_expiry < statement_timestamp() FROM idempotency_keys
			WHERE tenant = 'acme' AND key = $1`, key).Scan(&expired))
		return expired
	})
	require.Empty(t, doneA, "A's attempt is still trying to record its outcome")

	outB, err := b.RunTool(ctx, in)
	require.NoError(t, err)
	assert.True(t, outB.Resolved, "B settled the step by the paired read")
	settled := w.keyRow(key)
	assert.Equal(t, []any{"completed", ownerB, int32(2)}, []any{settled.State, settled.LeaseOwner, settled.Attempts})

	require.Empty(t, doneA, "A's write is still held when its network heals")
	db.Heal()
	var errA error
	select {
	case errA = <-doneA:
	case <-time.After(30 * time.Second):
		t.Fatal("A's attempt did not end once its network healed")
	}
	require.ErrorIs(t, errA, idempotency.ErrLeaseLost, "A's late write is refused by fencing")
	assert.Contains(t, errA.Error(), "as "+ownerA+" attempt 1: lease lost", "the refusal is the store's, of A's write")
	refused := logsA.FilterMessage(refusedLine).All()
	require.Len(t, refused, 1, "A logs its refused write")
	f := refused[0].ContextMap()
	assert.Equal(t, []any{ownerA, key, run}, []any{f["owner"], f["key"], f["run_id"]})
	assert.EqualValues(t, 1, f["attempt"])

	ledger := w.refunds(payment)
	require.Len(t, ledger, 1, "the provider's ledger holds one refund")
	assert.Equal(t, key, ledger[0].IdempotencyKey)
	final := w.keyRow(key)
	assert.Equal(t, settled, final, "A's late write changed nothing of B's row")
	assert.JSONEq(t, string(outB.Result), string(final.Result))
	rec, err := payments.RecordOf(final.Result)
	require.NoError(t, err)
	assert.Equal(t, ledger[0].ID, rec.ID, "the row names the provider's one refund")
}

// visitTool is a keyed tool whose effect is a row of leaserace_visits, a
// table with no unique constraint: a second effect would be a second row.
// Its first call runs after, once its row is written, inside the effect's
// transaction.
func visitTool(after func(ctx context.Context)) tools.Tool {
	var once sync.Once
	return tools.Tool{
		Name: "record_visit", Description: "Record that a customer's order was looked at.", Class: tools.ClassKeyed,
		Schema: json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`),
		Run: func(ctx context.Context, call tools.Call) (any, error) {
			var args struct {
				OrderID string `json:"order_id"`
			}
			if err := call.Decode(&args); err != nil {
				return nil, err
			}
			var id int64
			if err := call.Tx.QueryRow(ctx, `INSERT INTO leaserace_visits (step_key, order_id) VALUES ($1, $2) RETURNING id`,
				call.Key.String(), args.OrderID).Scan(&id); err != nil {
				return nil, err
			}
			once.Do(func() { after(ctx) })
			return map[string]any{"visit_id": id}, nil
		},
	}
}

// historyOf returns the event types of the run's history.
func (e *env) historyOf(tenant, runID string) []enumspb.EventType {
	e.t.Helper()
	it := e.tc.GetWorkflowHistory(context.Background(), workflows.WorkflowID(tenant, runID), "", false,
		enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var types []enumspb.EventType
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(e.t, err)
		types = append(types, ev.GetEventType())
	}
	return types
}

// TestLeaseRaceLocalStepAfterCommitIsNotMadeAgain: worker A runs a
// database tool's step as a local activity inside the run's workflow task,
// and loses its link to Temporal's frontend right after the step's effect
// ran, before its transaction commits and long before A could report the
// task. The commit reaches PostgreSQL; the report does not. The task times
// out and worker B takes the run over: replaying, its step finds the key
// completed and makes no second effect. When A's link heals, its late
// report adds nothing.
func TestLeaseRaceLocalStepAfterCommitIsNotMadeAgain(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	_, err := e.pool.Exec(ctx, `CREATE TABLE leaserace_visits (id bigserial PRIMARY KEY, step_key text NOT NULL, order_id text NOT NULL)`)
	require.NoError(t, err)
	ran, held := make(chan struct{}, 1), make(chan struct{})
	e.tools = append(e.tools, visitTool(func(ctx context.Context) {
		ran <- struct{}{}
		select {
		case <-held:
		case <-ctx.Done():
		}
	}))

	// Worker A reaches Temporal through a proxy; its pool is direct.
	front, err := netfault.Listen("127.0.0.1:0", frontend)
	require.NoError(t, err)
	t.Cleanup(func() { _ = front.Close() })
	tcA, err := client.Dial(client.Options{HostPort: front.Addr(), Namespace: namespace,
		Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	require.NoError(t, err)
	t.Cleanup(tcA.Close)
	onA := *e
	onA.tc = tcA
	a := onA.startWorker("a", sdkworker.Options{})
	t.Cleanup(front.Heal) // before A stops, whatever the test's end

	run := e.id("local")
	_, err = e.runs.Start(ctx, workflows.RunInput{Tenant: "acme", RunID: run,
		Plan: []planner.Call{{Tool: "record_visit", Args: json.RawMessage(`{"order_id":"1001"}`)}}})
	require.NoError(t, err)
	select {
	case <-ran:
	case <-time.After(time.Minute):
		t.Fatal("A never ran the step")
	}
	front.Set(netfault.Fault{Hold: netfault.Both})
	close(held)
	e.eventually("A's effect commits", func() bool { return e.count("leaserace_visits", "true") == 1 })
	e.startWorker("b", sdkworker.Options{})

	st := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
	require.Len(t, st.Steps, 1)
	s := st.Steps[0]
	require.Equal(t, workflows.StepDone, s.State, s.Error)
	assert.True(t, s.Replayed, "B's step replayed the key A completed")
	assert.Equal(t, 1, e.count("leaserace_visits", "true"), "B's replay made no second effect")
	key := stepKey(t, run, 1, "record_visit")
	row := e.keyRow(key)
	assert.Equal(t, []any{"completed", "a-" + e.queue, int32(1)}, []any{row.State, row.LeaseOwner, row.Attempts},
		"the key is completed once, by A's commit")
	assert.JSONEq(t, string(row.Result), string(s.Result), "the run's step holds the committed result")
	var visit int64
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT id FROM leaserace_visits`).Scan(&visit))
	assert.JSONEq(t, fmt.Sprintf(`{"visit_id":%d}`, visit), string(s.Result))
	history := e.historyOf("acme", run)
	assert.Contains(t, history, enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT, "A's task timed out")

	// A's link heals and A stops: whatever A still reports of its task,
	// late, adds nothing.
	front.Heal()
	a.Stop()
	assert.Equal(t, 1, e.count("leaserace_visits", "true"), "one effect")
	assert.Equal(t, 1, e.count("idempotency_keys", "key = $1", key))
	assert.Equal(t, row, e.keyRow(key), "the key is as A's commit left it")
	assert.Equal(t, history, e.historyOf("acme", run), "A's late report added nothing to the run")
}
