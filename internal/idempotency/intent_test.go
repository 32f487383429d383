package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/pgtest"
)

type intentFixture struct {
	pool  *pgxpool.Pool
	store *idempotency.Store
}

func setupIntents(t *testing.T) intentFixture {
	t.Helper()
	pool := pgtest.NewPool(t, 8)
	store, err := idempotency.New(pool, idempotency.Config{Owner: "worker-a"})
	require.NoError(t, err)
	_, err = pool.Exec(context.Background(), `CREATE TABLE effects (key text PRIMARY KEY)`)
	require.NoError(t, err)
	return intentFixture{pool: pool, store: store}
}

var intentHash = func() string {
	h, err := keys.ArgsHash([]byte(`{"order_id":"1001"}`))
	if err != nil {
		panic(err)
	}
	return h
}()

// step is step n of run, a child of tree r1, proposing the intent.
func intentStep(run string, n int64) (idempotency.Claim, idempotency.IntentClaim) {
	k, err := keys.New("acme", run, n, "add_order_note")
	if err != nil {
		panic(err)
	}
	return idempotency.Claim{Key: k, ArgsHash: intentHash},
		idempotency.IntentClaim{Tenant: "acme", Tree: "r1", Tool: "add_order_note", ArgsHash: intentHash, RunID: run, Step: n, Key: k.String()}
}

// make is a keyed step's effect, which claims the intent in its
// transaction.
func (f intentFixture) make(ctx context.Context, run string, n int64) (idempotency.Outcome, error) {
	kc, ic := intentStep(run, n)
	return f.store.Do(ctx, kc, func(ctx context.Context, tx pgx.Tx) (json.RawMessage, error) {
		if err := idempotency.ClaimIntentTx(ctx, tx, ic); err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1)`, ic.Key); err != nil {
			return nil, err
		}
		return json.RawMessage(fmt.Sprintf(`{"by":%q}`, run)), nil
	})
}

// lease leases key as an external step does before its call.
func (f intentFixture) lease(t *testing.T, key idempotency.Claim) *idempotency.Lease {
	t.Helper()
	begun, err := f.store.Begin(context.Background(), key)
	require.NoError(t, err)
	require.NotNil(t, begun.Lease)
	return begun.Lease
}

// holds reports whether c holds its intent.
func (f intentFixture) holds(t *testing.T, c idempotency.IntentClaim) bool {
	t.Helper()
	ok, err := idempotency.HoldsIntent(context.Background(), f.pool, c)
	require.NoError(t, err)
	return ok
}

func TestSiblingsMakingOneIntentAtOnceMakeItOnce(t *testing.T) {
	t.Parallel()
	f := setupIntents(t)
	const children = 8
	var wg sync.WaitGroup
	outs, errs := make([]idempotency.Outcome, children), make([]error, children)
	for i := range children {
		wg.Go(func() { outs[i], errs[i] = f.make(context.Background(), fmt.Sprintf("r1.%d", i+1), 1) })
	}
	wg.Wait()

	var made, dups int
	var holder idempotency.IntentHolder
	for i, err := range errs {
		var dup *idempotency.IntentDuplicateError
		switch {
		case err == nil:
			made++
			holder = idempotency.IntentHolder{RunID: fmt.Sprintf("r1.%d", i+1), Step: 1}
		case errors.As(err, &dup):
			dups++
		default:
			t.Fatalf("child %d: %v", i+1, err)
		}
	}
	assert.Equal(t, 1, made, "exactly one child makes the intent")
	assert.Equal(t, children-1, dups)
	var n int
	require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT count(*) FROM effects`).Scan(&n))
	assert.Equal(t, 1, n, "one effect")
	for _, err := range errs {
		var dup *idempotency.IntentDuplicateError
		if errors.As(err, &dup) {
			assert.Equal(t, holder.RunID, dup.Holder.RunID, "each duplicate names the holder")
			assert.JSONEq(t, fmt.Sprintf(`{"by":%q}`, holder.RunID), string(dup.Result), "with its result")
		}
	}
	var keysLeft int
	require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_keys`).Scan(&keysLeft))
	assert.Equal(t, 1, keysLeft, "a duplicate's key rolled back with its transaction")
}

func TestTheHolderClaimsAgainAndOtherTreesAreApart(t *testing.T) {
	t.Parallel()
	f := setupIntents(t)
	ctx := context.Background()
	_, err := f.make(ctx, "r1.1", 1)
	require.NoError(t, err)
	out, err := f.make(ctx, "r1.1", 1)
	require.NoError(t, err, "the holder's own retry replays")
	assert.True(t, out.Replayed)

	_, ic := intentStep("r9.1", 1)
	ic.Tree = "r9"
	require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error { return idempotency.ClaimIntentTx(ctx, tx, ic) }),
		"another tree's intent is its own")
	ic.Tree, ic.Tenant = "r1", "globex"
	require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error { return idempotency.ClaimIntentTx(ctx, tx, ic) }),
		"another tenant's tree is its own")
}

// An external step claims before its call; a sibling learns from the
// holder's key where the call stands.
func TestAnExternalHoldersKeySaysWhetherASiblingWaitsTakesOverOrIsADuplicate(t *testing.T) {
	t.Parallel()
	f := setupIntents(t)
	ctx := context.Background()
	holderKey, holder := intentStep("r1.1", 1)
	_, sibling := intentStep("r1.2", 1)
	require.NoError(t, idempotency.ClaimIntent(ctx, f.pool, holder))

	err := idempotency.ClaimIntent(ctx, f.pool, sibling)
	var held *idempotency.IntentHeldError
	require.ErrorAs(t, err, &held, "the holder has not begun its call")
	assert.ErrorIs(t, err, idempotency.ErrInFlight, "retried as a key in flight is")

	lease := f.lease(t, holderKey)
	require.ErrorAs(t, idempotency.ClaimIntent(ctx, f.pool, sibling), &held, "the holder's call is in flight")

	// Refused before any effect: the sibling makes the intent instead.
	require.NoError(t, f.store.Fail(ctx, lease, idempotency.Failure{Message: "connection refused", BeforeEffect: true}))
	require.NoError(t, idempotency.ClaimIntent(ctx, f.pool, sibling), "the sibling takes the claim over")
	err = idempotency.ClaimIntent(ctx, f.pool, holder)
	require.ErrorAs(t, err, &held, "the first step now waits for the sibling's call, which has not begun")
	assert.Equal(t, sibling.Key, held.Holder.Key)

	sibKey, _ := intentStep("r1.2", 1)
	_, err = f.store.Complete(ctx, f.lease(t, sibKey), json.RawMessage(`{"refund":"re_1"}`))
	require.NoError(t, err)
	err = idempotency.ClaimIntent(ctx, f.pool, holder)
	var dup *idempotency.IntentDuplicateError
	require.ErrorAs(t, err, &dup, "the sibling made it")
	assert.Equal(t, idempotency.IntentHolder{RunID: "r1.2", Step: 1, Key: sibling.Key}, dup.Holder)
	assert.JSONEq(t, `{"refund":"re_1"}`, string(dup.Result))
}

func TestAHolderWhoseOutcomeIsUnknownMakesASiblingWait(t *testing.T) {
	t.Parallel()
	f := setupIntents(t)
	ctx := context.Background()
	holderKey, holder := intentStep("r1.1", 1)
	_, sibling := intentStep("r1.2", 1)
	require.NoError(t, idempotency.ClaimIntent(ctx, f.pool, holder))
	require.NoError(t, f.store.Fail(ctx, f.lease(t, holderKey), idempotency.Failure{Message: "timed out after sending"}))

	var held *idempotency.IntentHeldError
	require.ErrorAs(t, idempotency.ClaimIntent(ctx, f.pool, sibling), &held, "nobody knows whether the holder's call took effect")
}

// A sibling that read the holder's key as failed before any effect does
// not take the claim over once the holder's retry holds the key's lease
// again; and the holder, once leased, checks that the claim is its own.
func TestAHolderThatLeasedAgainKeepsItsClaim(t *testing.T) {
	t.Parallel()
	f := setupIntents(t)
	ctx := context.Background()
	holderKey, holder := intentStep("r1.1", 1)
	_, sibling := intentStep("r1.2", 1)
	require.NoError(t, idempotency.ClaimIntent(ctx, f.pool, holder))
	require.NoError(t, f.store.Fail(ctx, f.lease(t, holderKey), idempotency.Failure{Message: "connection refused", BeforeEffect: true}))

	// The holder's retry: its claim is its own, and it leases again.
	require.NoError(t, idempotency.ClaimIntent(ctx, f.pool, holder))
	f.lease(t, holderKey)

	var held *idempotency.IntentHeldError
	require.ErrorAs(t, idempotency.ClaimIntent(ctx, f.pool, sibling), &held, "the holder's call is in flight again")
	assert.True(t, f.holds(t, holder), "the holder still holds it when it sends")
	assert.False(t, f.holds(t, sibling))
}

// A claim is given up only while its key holds nothing that may have
// taken effect.
func TestAClaimIsGivenUpOnlyWhenNothingMayHaveTakenEffect(t *testing.T) {
	t.Parallel()
	f := setupIntents(t)
	ctx := context.Background()
	key, c := intentStep("r1.1", 1)
	_, other := intentStep("r1.2", 1)
	require.NoError(t, idempotency.ClaimIntent(ctx, f.pool, c))
	lease := f.lease(t, key)
	require.NoError(t, idempotency.ReleaseIntent(ctx, f.pool, c))
	assert.True(t, f.holds(t, c), "kept while the call is in flight")
	require.NoError(t, f.store.Fail(ctx, lease, idempotency.Failure{Message: "timed out after sending"}))
	require.NoError(t, idempotency.ReleaseIntent(ctx, f.pool, c))
	assert.True(t, f.holds(t, c), "kept while its outcome is unknown")
	require.NoError(t, idempotency.ReleaseIntent(ctx, f.pool, other))
	assert.True(t, f.holds(t, c), "another step's release leaves it")

	_, parked := intentStep("r1.3", 1)
	parked.ArgsHash = strings.Repeat("b", 64)
	require.NoError(t, idempotency.ClaimIntent(ctx, f.pool, parked))
	require.NoError(t, idempotency.ReleaseIntent(ctx, f.pool, parked), "no key: parked at a limit before its call")
	assert.False(t, f.holds(t, parked), "given up")
	other.ArgsHash = parked.ArgsHash
	require.NoError(t, idempotency.ClaimIntent(ctx, f.pool, other), "another step of the tree may claim it now")
}

// Pruning a key prunes the claims it holds.
func TestPruningAKeyPrunesItsClaims(t *testing.T) {
	t.Parallel()
	f := setupIntents(t)
	ctx := context.Background()
	_, err := f.make(ctx, "r1.1", 1)
	require.NoError(t, err)
	_, c := intentStep("r1.1", 1)
	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	n, err := idempotency.DeleteKeys(ctx, tx, []idempotency.KeyRef{{Tenant: "acme", Key: c.Key}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	assert.EqualValues(t, 1, n)
	assert.False(t, f.holds(t, c))
}
