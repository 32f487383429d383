package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/shop"
)

type fixture struct {
	pool  *pgxpool.Pool
	store *idempotency.Store
}

func setup(t *testing.T) fixture {
	t.Helper()
	pool := pgtest.NewPool(t, 8)
	return fixture{pool: pool, store: newStore(t, pool, "worker-a")}
}

func newStore(t *testing.T, pool *pgxpool.Pool, owner string) *idempotency.Store {
	t.Helper()
	s, err := idempotency.New(pool, idempotency.Config{Owner: owner})
	require.NoError(t, err)
	return s
}

// claim builds the claim of step step of run runID of tenant calling tool with args.
func claim(t *testing.T, tenant, runID string, step int64, tool, args string) idempotency.Claim {
	t.Helper()
	k, err := keys.New(tenant, runID, step, tool)
	require.NoError(t, err)
	h, err := keys.ArgsHash([]byte(args))
	require.NoError(t, err)
	return idempotency.Claim{Key: k, ArgsHash: h}
}

// addNote is a keyed effect: it inserts an order note and counts its runs.
func addNote(runs *atomic.Int64, c idempotency.Claim, body string) idempotency.Effect {
	return func(ctx context.Context, tx pgx.Tx) (json.RawMessage, error) {
		runs.Add(1)
		n, err := shop.AddNote(ctx, tx, shop.Note{Tenant: c.Key.Tenant, OrderID: "o-1", Body: body, IdempotencyKey: c.Key.String()})
		if err != nil {
			return nil, err
		}
		return json.Marshal(n)
	}
}

func (f fixture) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

func TestDoReplaysSecondCall(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 1, "add_order_note", `{"order_id":"o-1","text":"hi"}`)
	var runs atomic.Int64

	first, err := f.store.Do(ctx, c, addNote(&runs, c, "hi"))
	require.NoError(t, err)
	second, err := f.store.Do(ctx, c, addNote(&runs, c, "hi"))
	require.NoError(t, err)

	assert.False(t, first.Replayed)
	assert.True(t, second.Replayed)
	assert.Equal(t, string(first.Result), string(second.Result))
	assert.EqualValues(t, 1, runs.Load())
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM order_notes"))
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM idempotency_keys WHERE state = 'completed'"))
}

func TestDoRecordsKeyRow(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "run/7", 3, "add_order_note", `{"a":1}`)
	c.Retention = 48 * 3600e9
	var runs atomic.Int64
	_, err := f.store.Do(ctx, c, addNote(&runs, c, "x"))
	require.NoError(t, err)

	var (
		runID, tool, state, hash, owner string
		step                            int64
		attempts                        int
		retainedHours                   float64
	)
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT run_id, step, tool, state, args_hash, lease_owner, attempts,
		extract(epoch FROM expires_at - created_at) / 3600 FROM idempotency_keys WHERE tenant = $1 AND key = $2`,
		"acme", c.Key.String()).Scan(&runID, &step, &tool, &state, &hash, &owner, &attempts, &retainedHours))
	assert.Equal(t, "run/7", runID)
	assert.EqualValues(t, 3, step)
	assert.Equal(t, "add_order_note", tool)
	assert.Equal(t, "completed", state)
	assert.Equal(t, c.ArgsHash, hash)
	assert.Equal(t, "worker-a", owner)
	assert.Equal(t, 1, attempts)
	assert.InDelta(t, 48, retainedHours, 0.01)
}

func TestDoBackendKilledMidEffectLeavesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 1, "add_order_note", `{"order_id":"o-1","text":"hi"}`)
	var runs atomic.Int64

	_, err := f.store.Do(ctx, c, func(ctx context.Context, tx pgx.Tx) (json.RawMessage, error) {
		if _, err := addNote(&runs, c, "hi")(ctx, tx); err != nil {
			return nil, err
		}
		// The effect's write is done but not committed: kill the backend, as a
		// crash of the database connection or the worker would.
		var pid int
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return nil, err
		}
		var killed bool
		if err := f.pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&killed); err != nil || !killed {
			return nil, fmt.Errorf("terminate backend %d: %v %w", pid, killed, err)
		}
		_, err := tx.Exec(ctx, "SELECT 1")
		return json.RawMessage(`{}`), err
	})
	require.Error(t, err)
	assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM order_notes"), "no effect survives the crash")
	assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM idempotency_keys"), "no key row survives the crash")

	out, err := f.store.Do(ctx, c, addNote(&runs, c, "hi"))
	require.NoError(t, err)
	assert.False(t, out.Replayed)
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM order_notes"))
	assert.EqualValues(t, 2, runs.Load())
}

func TestDoEffectErrorRollsBackClaim(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 1, "add_order_note", `{}`)
	boom := errors.New("boom")
	var runs atomic.Int64

	_, err := f.store.Do(ctx, c, func(ctx context.Context, tx pgx.Tx) (json.RawMessage, error) {
		if _, err := addNote(&runs, c, "partial")(ctx, tx); err != nil {
			return nil, err
		}
		return nil, boom
	})
	require.ErrorIs(t, err, boom)
	assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM order_notes"))
	assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM idempotency_keys"))

	out, err := f.store.Do(ctx, c, addNote(&runs, c, "whole"))
	require.NoError(t, err)
	assert.False(t, out.Replayed)
}

func TestDoClaimsKeysWithQuotesAndBackslashes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	// The claim travels as a simple query with the tenant and the key
	// written as literals: quotes and backslashes must arrive as they are.
	c := claim(t, `o'brien\`, `run'); DROP TABLE order_notes; --`, 1, "add_order_note", `{}`)
	var runs atomic.Int64
	out, err := f.store.Do(ctx, c, addNote(&runs, c, "quoted"))
	require.NoError(t, err)
	assert.False(t, out.Replayed)
	out, err = f.store.Do(ctx, c, addNote(&runs, c, "quoted"))
	require.NoError(t, err)
	assert.True(t, out.Replayed, "the second call finds the key the first recorded")
	assert.EqualValues(t, 1, runs.Load())
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM order_notes"))
}

func TestDoKeyReuseWithOtherArgs(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 1, "add_order_note", `{"order_id":"o-1","text":"hi"}`)
	var runs atomic.Int64
	_, err := f.store.Do(ctx, c, addNote(&runs, c, "hi"))
	require.NoError(t, err)

	other := claim(t, "acme", "r1", 1, "add_order_note", `{"order_id":"o-1","text":"bye"}`)
	_, err = f.store.Do(ctx, other, addNote(&runs, other, "bye"))
	require.ErrorIs(t, err, idempotency.ErrKeyReuse)
	var reuse *idempotency.KeyReuseError
	require.ErrorAs(t, err, &reuse)
	assert.Equal(t, c.ArgsHash, reuse.StoredHash)
	assert.Equal(t, other.ArgsHash, reuse.ProposedHash)
	assert.EqualValues(t, 1, runs.Load(), "the effect does not run for reused keys")
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM order_notes"))

	_, err = f.store.Begin(ctx, other)
	require.ErrorIs(t, err, idempotency.ErrKeyReuse, "the external path checks the hash too")
}

func TestDoSameMeaningArgsReplay(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 1, "add_order_note", `{"order_id":"o-1","text":"hi"}`)
	respelled := claim(t, "acme", "r1", 1, "add_order_note", `{ "text" : "h\u0069", "order_id":"o-1" }`)
	var runs atomic.Int64
	_, err := f.store.Do(ctx, c, addNote(&runs, c, "hi"))
	require.NoError(t, err)
	out, err := f.store.Do(ctx, respelled, addNote(&runs, c, "hi"))
	require.NoError(t, err)
	assert.True(t, out.Replayed)
	assert.EqualValues(t, 1, runs.Load())
}

func TestDoConcurrentDuplicatesRunEffectOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 16)
	f := fixture{pool: pool, store: newStore(t, pool, "worker-a")}
	ctx := context.Background()
	const (
		trials  = 20
		callers = 64
	)
	for trial := range trials {
		c := claim(t, "acme", fmt.Sprintf("run-%d", trial), 1, "add_order_note", `{"order_id":"o-1"}`)
		var runs, replays atomic.Int64
		results := make([]string, callers)
		errs := make([]error, callers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				<-start
				out, err := f.store.Do(ctx, c, addNote(&runs, c, "once"))
				results[i], errs[i] = string(out.Result), err
				if out.Replayed {
					replays.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()

		for i := range callers {
			require.NoError(t, errs[i], "trial %d caller %d", trial, i)
			require.Equal(t, results[0], results[i], "trial %d caller %d got another result", trial, i)
		}
		require.EqualValues(t, 1, runs.Load(), "trial %d: effect ran more than once", trial)
		require.EqualValues(t, callers-1, replays.Load(), "trial %d", trial)
	}
	assert.Equal(t, trials, f.count(t, "SELECT count(*) FROM order_notes"))
}

func TestNaturalKeyHoldsAcrossDifferentKeys(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	grant := func(c idempotency.Claim) idempotency.Effect {
		return func(ctx context.Context, tx pgx.Tx) (json.RawMessage, error) {
			got, err := shop.IssueCredit(ctx, tx, shop.Credit{
				Tenant: "acme", OrderID: "o-1", Reason: "late delivery",
				AmountCents: 1500, Currency: "EUR", IdempotencyKey: c.Key.String(),
			})
			if err != nil {
				return nil, err
			}
			return json.Marshal(got)
		}
	}
	// Two runs (so two different keys) ask for the same credit.
	c1 := claim(t, "acme", "r1", 1, "issue_credit", `{"order_id":"o-1","reason":"late delivery"}`)
	c2 := claim(t, "acme", "r2", 4, "issue_credit", `{"order_id":"o-1","reason":"late delivery"}`)
	out1, err := f.store.Do(ctx, c1, grant(c1))
	require.NoError(t, err)
	out2, err := f.store.Do(ctx, c2, grant(c2))
	require.NoError(t, err)

	var first, second shop.IssuedCredit
	require.NoError(t, json.Unmarshal(out1.Result, &first))
	require.NoError(t, json.Unmarshal(out2.Result, &second))
	assert.True(t, first.Created)
	assert.False(t, second.Created, "the second key finds the existing credit")
	assert.False(t, out2.Replayed, "the second key is new to the dedup store")
	assert.Equal(t, first.ID, second.ID)
	assert.Equal(t, c1.Key.String(), second.IdempotencyKey, "the existing row names the key that created it")
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM credits"))
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	// Same run id, step and tool, different tenants and arguments.
	a := claim(t, "tenant-a", "r1", 1, "add_order_note", `{"text":"for a"}`)
	b := claim(t, "tenant-b", "r1", 1, "add_order_note", `{"text":"for b"}`)
	var runs atomic.Int64

	outA, err := f.store.Do(ctx, a, addNote(&runs, a, "for a"))
	require.NoError(t, err)
	outB, err := f.store.Do(ctx, b, addNote(&runs, b, "for b"))
	require.NoError(t, err, "tenant b's key does not collide with tenant a's")
	assert.False(t, outB.Replayed, "tenant b does not replay tenant a's result")
	assert.NotEqual(t, string(outA.Result), string(outB.Result))
	assert.EqualValues(t, 2, runs.Load())

	var note shop.Note
	require.NoError(t, json.Unmarshal(outB.Result, &note))
	assert.Equal(t, "tenant-b", note.Tenant)
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM idempotency_keys WHERE tenant = 'tenant-a'"))
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM idempotency_keys WHERE tenant = 'tenant-b'"))
}

func TestInvalidClaimWritesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	good := claim(t, "acme", "r1", 1, "t", `{}`)
	tests := []struct {
		name  string
		claim idempotency.Claim
		want  string
	}{
		{"zero key", idempotency.Claim{ArgsHash: good.ArgsHash}, "tenant is empty"},
		{"bad step", idempotency.Claim{Key: keys.Key{Tenant: "acme", RunID: "r", Tool: "t"}, ArgsHash: good.ArgsHash}, "step is 0"},
		{"short hash", idempotency.Claim{Key: good.Key, ArgsHash: "abc"}, "args hash \"abc\" is not 64"},
		{"upper-case hash", idempotency.Claim{Key: good.Key, ArgsHash: "A" + good.ArgsHash[1:]}, "not 64 lower-case"},
		{"negative lease", idempotency.Claim{Key: good.Key, ArgsHash: good.ArgsHash, Lease: -1}, "must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var runs atomic.Int64
			_, err := f.store.Do(ctx, tt.claim, addNote(&runs, good, "x"))
			require.ErrorIs(t, err, idempotency.ErrInvalidClaim)
			assert.Contains(t, err.Error(), tt.want)
			_, err = f.store.Begin(ctx, tt.claim)
			require.ErrorIs(t, err, idempotency.ErrInvalidClaim)
			assert.Zero(t, runs.Load())
		})
	}
	assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM idempotency_keys"))
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 1)
	_, err := idempotency.New(pool, idempotency.Config{Lease: 2 * 3600e9, Retention: 3600e9})
	require.ErrorContains(t, err, "Config.Lease (2h0m0s) is longer than Config.Retention (1h0m0s)")
	_, err = idempotency.New(nil, idempotency.Config{})
	require.ErrorContains(t, err, "pool is nil")
	s, err := idempotency.New(pool, idempotency.Config{Logger: zap.NewNop()})
	require.NoError(t, err)
	assert.NotEmpty(t, s.Owner())
}

func TestDoNeverCommitsEffectWithoutCompletedKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 1, "add_order_note", `{}`)
	var runs atomic.Int64

	// While the effect runs, an external call claims the same key and
	// commits it in flight (it does not take the transactional path's lock).
	// The completed key row then cannot be written, and the pipelined COMMIT
	// must not make the note durable.
	external := newStore(t, f.pool, "worker-b")
	_, err := f.store.Do(ctx, c, func(ctx context.Context, tx pgx.Tx) (json.RawMessage, error) {
		if _, err := addNote(&runs, c, "orphan")(ctx, tx); err != nil {
			return nil, err
		}
		if runs.Load() == 1 {
			if _, err := external.Begin(ctx, c); err != nil {
				return nil, err
			}
		}
		return json.RawMessage(`{}`), nil
	})
	require.ErrorIs(t, err, idempotency.ErrInFlight, "the retry inside Do finds the external call's lease")
	assert.EqualValues(t, 1, runs.Load(), "the effect ran once, and was rolled back")
	assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM order_notes"), "no effect without its key")
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM idempotency_keys WHERE state = 'in_flight' AND lease_owner = 'worker-b'"))

	// The connection went back to the pool clean: another key goes through.
	other := claim(t, "acme", "r1", 2, "add_order_note", `{}`)
	out, err := f.store.Do(ctx, other, addNote(&runs, other, "whole"))
	require.NoError(t, err)
	assert.False(t, out.Replayed)
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM order_notes"))
}

func TestEffectCannotEndTheClaimTransaction(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 1, "add_order_note", `{}`)
	var runs atomic.Int64
	_, err := f.store.Do(ctx, c, func(ctx context.Context, tx pgx.Tx) (json.RawMessage, error) {
		if _, err := addNote(&runs, c, "early")(ctx, tx); err != nil {
			return nil, err
		}
		return nil, tx.Commit(ctx)
	})
	require.ErrorContains(t, err, "an effect must not commit or roll back")
	assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM order_notes"), "the effect's write was not committed apart from its key")
	assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM idempotency_keys"))
}
