package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/events"
	"github.com/oncerun/oncerun/internal/pgtest"
)

func fact(run, source, typ string, step int64) events.Fact {
	return events.Fact{RunID: run, Source: run + "|" + source, Step: step, Type: typ, Data: json.RawMessage(`{"tool":"issue_credit"}`)}
}

func TestRootAndLineageOfChildRuns(t *testing.T) {
	for run, want := range map[string][]string{
		"r1":          {"r1"},
		"r1.3":        {"r1", "r1.3"},
		"r1.3.12":     {"r1", "r1.3", "r1.3.12"},
		"order.a.1":   {"order.a", "order.a.1"},
		"v1.2-b":      {"v1.2-b"},
		"a/b.c.4.5.6": {"a/b.c", "a/b.c.4", "a/b.c.4.5", "a/b.c.4.5.6"},
	} {
		assert.Equal(t, want, events.Lineage(run), run)
		assert.Equal(t, want[0], events.Root(run), run)
	}
}

func TestRecordWritesEachFactOnceInOrderWithDenseOffsets(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t, 4)
	facts := []events.Fact{
		fact("r1", "run:started", "run.started", 0),
		fact("r1", "step:1:proposed", "step.proposed", 1),
		fact("r1", "step:1:running:1", "step.running", 1),
	}
	require.NoError(t, events.Record(ctx, pool, "acme", facts))
	// A retried attempt writes the same facts again, and one more.
	require.NoError(t, events.Record(ctx, pool, "acme", append(facts, fact("r1", "step:1:done:1", "step.completed", 1))))
	// A child's facts go into its root's log.
	require.NoError(t, events.Record(ctx, pool, "acme", []events.Fact{fact("r1.2", "run:started", "run.started", 0)}))

	got, err := events.ReadRun(ctx, pool, events.RunQuery{Tenant: "acme", Run: "r1", Limit: 100})
	require.NoError(t, err)
	var types []string
	for i, e := range got {
		assert.EqualValues(t, i+1, e.Offset, "offsets are dense from 1")
		types = append(types, e.Type)
	}
	assert.Equal(t, []string{"run.started", "step.proposed", "step.running", "step.completed", "run.started"}, types)
	assert.Equal(t, []string{"r1", "r1.2"}, got[4].Lineage)
	assert.Equal(t, "r1", got[4].RootRunID)
	assert.JSONEq(t, `{"tool":"issue_credit"}`, string(got[1].Data))

	// Following the child shows its events only; after skips.
	child, err := events.ReadRun(ctx, pool, events.RunQuery{Tenant: "acme", Run: "r1.2", Limit: 100})
	require.NoError(t, err)
	require.Len(t, child, 1)
	assert.EqualValues(t, 5, child[0].Offset)
	later, err := events.ReadRun(ctx, pool, events.RunQuery{Tenant: "acme", Run: "r1", After: 3, Limit: 1})
	require.NoError(t, err)
	require.Len(t, later, 1)
	assert.Equal(t, "step.completed", later[0].Type)

	// Another tenant's log is its own.
	other, err := events.ReadRun(ctx, pool, events.RunQuery{Tenant: "globex", Run: "r1", Limit: 100})
	require.NoError(t, err)
	assert.Empty(t, other)

	// The run's index row: started, then ended.
	require.NoError(t, events.Record(ctx, pool, "acme", []events.Fact{fact("r1", "run:ended", events.RunCompleted, 0)}))
	var state string
	require.NoError(t, pool.QueryRow(ctx, `SELECT state FROM run_index WHERE tenant = 'acme' AND run_id = 'r1'`).Scan(&state))
	assert.Equal(t, "completed", state)
}

// Writers of one log at once: every offset is taken once, and a reader
// that follows the log while they write sees each event once, in order,
// with no offset skipped.
func TestConcurrentWritersLeaveNoGapAReaderCouldMiss(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t, 12)
	const writers, each = 8, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				// Two writers write each fact: one event of it.
				src := fmt.Sprintf("fact:%d:%d", w/2, i)
				assert.NoError(t, events.Record(ctx, pool, "acme", []events.Fact{fact("r1", src, "step.running", 1)}))
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var seen []int64
	after := int64(0)
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		got, err := events.ReadRun(ctx, pool, events.RunQuery{Tenant: "acme", Run: "r1", After: after, Limit: 7})
		require.NoError(t, err)
		for _, e := range got {
			seen = append(seen, e.Offset)
			after = e.Offset
		}
	}
	for {
		got, err := events.ReadRun(ctx, pool, events.RunQuery{Tenant: "acme", Run: "r1", After: after, Limit: 100})
		require.NoError(t, err)
		if len(got) == 0 {
			break
		}
		for _, e := range got {
			seen = append(seen, e.Offset)
			after = e.Offset
		}
	}
	require.Len(t, seen, writers/2*each, "each fact once")
	for i, off := range seen {
		require.EqualValues(t, i+1, off, "no offset skipped or repeated")
	}
}

// The tenant's stream reads only the events of ended transactions: an
// event committed after a cursor was given never lands behind it. (The
// oldest open transaction is the server's, whichever database it is in:
// other tests' transactions may hold the stream back a moment too.)
func TestTenantStreamWaitsForOpenTransactions(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t, 4)
	require.NoError(t, events.Record(ctx, pool, "acme", []events.Fact{fact("a", "run:started", "run.started", 0)}))

	slow, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer slow.Rollback(ctx)
	require.NoError(t, events.Record(ctx, slow, "acme", []events.Fact{fact("b", "run:started", "run.started", 0)}))
	require.NoError(t, events.Record(ctx, pool, "acme", []events.Fact{fact("c", "run:started", "run.started", 0)}))

	first, err := events.ReadTenant(ctx, pool, events.TenantQuery{Tenant: "acme", Limit: 100})
	require.NoError(t, err)
	for _, e := range first {
		assert.Equal(t, "a", e.RunID, "c waits behind b's open transaction")
	}
	cur := events.Cursor{}
	if len(first) > 0 {
		cur, err = events.ParseCursor(first[0].Cursor)
		require.NoError(t, err)
	}

	require.NoError(t, slow.Commit(ctx))
	runs := []string{}
	for _, e := range first {
		runs = append(runs, e.RunID)
	}
	deadline := time.Now().Add(time.Minute)
	for len(runs) < 3 && time.Now().Before(deadline) {
		more, err := events.ReadTenant(ctx, pool, events.TenantQuery{Tenant: "acme", After: cur, Limit: 100})
		require.NoError(t, err)
		for _, e := range more {
			runs = append(runs, e.RunID)
			cur, err = events.ParseCursor(e.Cursor)
			require.NoError(t, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	assert.Equal(t, []string{"a", "b", "c"}, runs, "each once, in the order of their transactions")

	head, err := events.Head(ctx, pool, "acme")
	require.NoError(t, err)
	assert.Equal(t, cur, head)
	none, err := events.ReadTenant(ctx, pool, events.TenantQuery{Tenant: "acme", After: head, Limit: 100})
	require.NoError(t, err)
	assert.Empty(t, none)

	_, err = events.ParseCursor("12")
	assert.ErrorIs(t, err, events.ErrCursor)
}

// Facts the tables make true are written by their triggers, in their
// transactions: an effect applied with its key's completion.
func TestAKeyCompletedWritesStepAppliedInItsTransaction(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t, 4)
	hash := fmt.Sprintf("%064x", 7)
	_, err := pool.Exec(ctx, `INSERT INTO idempotency_keys (tenant, key, run_id, step, tool, state, args_hash, lease_owner, lease_expiry, expires_at)
VALUES ('acme', 'k1', 'r1.4', 2, 'issue_credit', 'in_flight', $1, 'w', now() + interval '1 minute', now() + interval '1 day')`, hash)
	require.NoError(t, err)
	none, err := events.ReadRun(ctx, pool, events.RunQuery{Tenant: "acme", Run: "r1", Limit: 10})
	require.NoError(t, err)
	assert.Empty(t, none, "a claim is not an effect")

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `UPDATE idempotency_keys SET state = 'completed', result = '{"ok":true}', completed_at = now(),
lease_owner = NULL, lease_expiry = NULL WHERE tenant = 'acme' AND key = 'k1'`)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	none, err = events.ReadRun(ctx, pool, events.RunQuery{Tenant: "acme", Run: "r1", Limit: 10})
	require.NoError(t, err)
	assert.Empty(t, none, "an effect rolled back is no event")

	_, err = pool.Exec(ctx, `UPDATE idempotency_keys SET state = 'completed', result = '{"ok":true}', completed_at = now(),
lease_owner = NULL, lease_expiry = NULL WHERE tenant = 'acme' AND key = 'k1'`)
	require.NoError(t, err)
	got, err := events.ReadRun(ctx, pool, events.RunQuery{Tenant: "acme", Run: "r1", Limit: 10})
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "step.applied", got[0].Type)
	assert.Equal(t, "r1.4", got[0].RunID)
	assert.EqualValues(t, 2, got[0].Step)
	var data map[string]any
	require.NoError(t, json.Unmarshal(got[0].Data, &data))
	assert.Equal(t, "issue_credit", data["tool"])
	assert.EqualValues(t, len(`{"ok": true}`), data["result_bytes"])
	assert.NotContains(t, string(got[0].Data), "ok", "results appear as sizes only")
}

func TestHubWakesFollowersAndHandsEphemeralEvents(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t, 4)
	cc := pool.Config().ConnConfig.Copy()
	hub := events.NewHub(func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cc) }, nil)
	defer hub.Close()
	sub := hub.Subscribe("acme", "r1")
	defer sub.Close()
	all := hub.Subscribe("acme", "")
	defer all.Close()
	other := hub.Subscribe("acme", "r2")
	defer other.Close()
	assert.Equal(t, 3, hub.Followers())

	// The first wake comes when the hub starts listening.
	waitFor(t, sub.Wake)
	drain(other.Wake)
	drain(all.Wake)
	require.NoError(t, events.Record(ctx, pool, "acme", []events.Fact{fact("r1.1", "run:started", "run.started", 0)}))
	waitFor(t, sub.Wake)
	waitFor(t, all.Wake)
	select {
	case <-other.Wake:
		t.Fatal("a follower of another run was woken")
	case <-time.After(200 * time.Millisecond):
	}

	require.NoError(t, events.Publish(ctx, pool, "acme", events.Event{RunID: "r1.1", Type: "text.delta",
		Data: json.RawMessage(`{"message_id":"m1","text":"Hel"}`)}))
	select {
	case e := <-sub.Ephemeral:
		assert.True(t, e.Ephemeral)
		assert.Equal(t, "r1", e.RootRunID)
		assert.Zero(t, e.Offset)
		assert.JSONEq(t, `{"message_id":"m1","text":"Hel"}`, string(e.Data))
	case <-time.After(10 * time.Second):
		t.Fatal("no ephemeral event")
	}
}

func waitFor(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("not woken")
	}
}

func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// A root run's log goes once the run has ended and its own keys are gone;
// not before.
func TestPruneEndedRemovesTheLogsOfEndedRunsWithoutKeys(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t, 4)
	for _, run := range []string{"done", "open", "kept"} {
		require.NoError(t, events.Record(ctx, pool, "acme", []events.Fact{
			fact(run, "run:started", "run.started", 0), fact(run+".1", "run:started", "run.started", 0),
			fact(run, "step:1:proposed", "step.proposed", 1)}))
		if run != "open" {
			require.NoError(t, events.Record(ctx, pool, "acme", []events.Fact{fact(run, "run:ended", events.RunCompleted, 0)}))
		}
	}
	// "kept" still holds a key.
	_, err := pool.Exec(ctx, `INSERT INTO idempotency_keys (tenant, key, run_id, step, tool, state, args_hash, result, completed_at, expires_at)
VALUES ('acme', 'k1', 'kept', 1, 'issue_credit', 'completed', $1, '{}', now(), now() + interval '1 day')`, fmt.Sprintf("%064x", 1))
	require.NoError(t, err)

	n, err := events.PruneEnded(ctx, pool, []string{"acme", "acme", "acme", "acme"}, []string{"done.1", "done", "open", "kept"})
	require.NoError(t, err)
	assert.EqualValues(t, 4, n, "done's four events")
	for run, want := range map[string]int{"done": 0, "open": 3, "kept": 5} {
		got, err := events.ReadRun(ctx, pool, events.RunQuery{Tenant: "acme", Run: run, Limit: 100})
		require.NoError(t, err)
		assert.Len(t, got, want, run)
	}
	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM run_index WHERE root_run_id = 'done'`).Scan(&rows))
	assert.Zero(t, rows, "the tree's index rows go with it")
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM run_event_heads WHERE root_run_id = 'done'`).Scan(&rows))
	assert.Zero(t, rows)
}
