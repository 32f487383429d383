package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/idempotency"
)

var (
	// errRefused is a provider failure before anything was sent.
	errRefused = errors.New("connection refused")
	// errTimedOut is a provider failure after the request may have arrived.
	errTimedOut = errors.New("provider timed out")
)

// beforeEffect is the BeforeEffect of the fake provider.
func beforeEffect(err error) bool { return errors.Is(err, errRefused) }

// provider is a fake external provider that counts the calls and reads made
// on it.
type provider struct {
	calls, reads atomic.Int64
}

// external returns an External whose Call answers result, or err if set.
func (p *provider) external(result string, err error) idempotency.External {
	return idempotency.External{
		Call: func(context.Context) (json.RawMessage, error) {
			p.calls.Add(1)
			if err != nil {
				return nil, err
			}
			return json.RawMessage(result), nil
		},
		BeforeEffect: beforeEffect,
	}
}

// read returns a paired read that answers found and result, or err if set.
func (p *provider) read(found bool, result string, err error) func(context.Context) (bool, json.RawMessage, error) {
	return func(context.Context) (bool, json.RawMessage, error) {
		p.reads.Add(1)
		if err != nil {
			return false, nil, err
		}
		return found, json.RawMessage(result), nil
	}
}

// failure returns the key's state and recorded failure.
func (f fixture) failure(t *testing.T, c idempotency.Claim) (state string, failure *idempotency.Failure) {
	t.Helper()
	require.NoError(t, f.pool.QueryRow(context.Background(),
		"SELECT state, failure FROM idempotency_keys WHERE tenant = $1 AND key = $2",
		c.Key.Tenant, c.Key.String()).Scan(&state, &failure))
	return state, failure
}

// steal moves the key to another owner and attempt, as a takeover by another
// worker would.
func (f fixture) steal(t *testing.T, c idempotency.Claim) {
	t.Helper()
	tag, err := f.pool.Exec(context.Background(), `UPDATE idempotency_keys
		SET lease_owner = 'thief', attempts = attempts + 1, lease_expiry = now() + interval '1 hour'
		WHERE tenant = $1 AND key = $2`, c.Key.Tenant, c.Key.String())
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

// leaveUnknown runs an External on c whose Call fails after sending, so that
// the key's outcome is unknown. p counts that call.
func (f fixture) leaveUnknown(t *testing.T, p *provider, c idempotency.Claim) {
	t.Helper()
	_, err := f.store.External(context.Background(), c, p.external("", errTimedOut))
	require.ErrorIs(t, err, errTimedOut)
	state, failure := f.failure(t, c)
	require.Equal(t, "failed", state)
	require.NotNil(t, failure)
	require.False(t, failure.BeforeEffect, "a failure after sending leaves the outcome unknown")
}

func TestExternalCallsOnceThenReplays(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":500}`)
	var p provider

	first, err := f.store.External(ctx, c, p.external(`{"refund_id":"re_1"}`, nil))
	require.NoError(t, err)
	assert.False(t, first.Replayed)
	assert.JSONEq(t, `{"refund_id":"re_1"}`, string(first.Result))
	state, _, _ := f.state(t, c)
	assert.Equal(t, "completed", state)

	second, err := f.store.External(ctx, c, p.external(`{"refund_id":"re_2"}`, nil))
	require.NoError(t, err)
	assert.True(t, second.Replayed)
	assert.Equal(t, string(first.Result), string(second.Result))
	assert.EqualValues(t, 1, p.calls.Load(), "a completed key is not called again")
}

func TestExternalFailureBeforeEffectCallsAgain(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "send_email", `{"to":"a@example.com"}`)
	var p provider

	_, err := f.store.External(ctx, c, p.external("", errRefused))
	require.ErrorIs(t, err, errRefused)
	state, failure := f.failure(t, c)
	require.Equal(t, "failed", state)
	require.NotNil(t, failure)
	assert.True(t, failure.BeforeEffect)
	assert.Contains(t, failure.Message, "connection refused")

	out, err := f.store.External(ctx, c, p.external(`{"message_id":"m_1"}`, nil))
	require.NoError(t, err, "a failure before the effect is a plain retry")
	assert.JSONEq(t, `{"message_id":"m_1"}`, string(out.Result))
	assert.False(t, out.Resolved)
	assert.EqualValues(t, 2, p.calls.Load())
}

func TestExternalUnknownOutcomeFoundByReadCompletes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":500}`)
	var p provider
	f.leaveUnknown(t, &p, c)

	ext := p.external(`{"refund_id":"re_resent"}`, nil)
	ext.Read = p.read(true, `{"refund_id":"re_1"}`, nil)
	out, err := f.store.External(ctx, c, ext)
	require.NoError(t, err)
	assert.True(t, out.Resolved)
	assert.False(t, out.Replayed)
	assert.JSONEq(t, `{"refund_id":"re_1"}`, string(out.Result), "the read's result completes the key")
	assert.EqualValues(t, 1, p.calls.Load(), "an effect the read found is not made again")
	assert.EqualValues(t, 1, p.reads.Load())

	replay, err := f.store.Begin(ctx, c)
	require.NoError(t, err)
	assert.True(t, replay.Outcome.Replayed)
	assert.Equal(t, string(out.Result), string(replay.Outcome.Result))
}

func TestExternalUnknownOutcomeNotFoundByReadCallsAgain(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":500}`)
	var p provider
	f.leaveUnknown(t, &p, c)

	other := newStore(t, f.pool, "worker-b")
	var readBeforeCall bool
	ext := idempotency.External{
		Call: func(context.Context) (json.RawMessage, error) {
			readBeforeCall = p.reads.Load() == 1
			p.calls.Add(1)
			return json.RawMessage(`{"refund_id":"re_2"}`), nil
		},
		BeforeEffect: beforeEffect,
		Read:         p.read(false, "", nil),
	}
	out, err := other.External(ctx, c, ext)
	require.NoError(t, err)
	assert.False(t, out.Resolved)
	assert.JSONEq(t, `{"refund_id":"re_2"}`, string(out.Result))
	assert.EqualValues(t, 2, p.calls.Load())
	assert.True(t, readBeforeCall, "the read comes before the call")
	state, owner, attempts := f.state(t, c)
	assert.Equal(t, []any{"completed", "worker-b", 2}, []any{state, owner, attempts}, "the call ran under a new lease")
}

func TestExternalSlowReadKeepsLease(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":500}`)
	var p provider
	f.leaveUnknown(t, &p, c)

	c.Lease = 300 * time.Millisecond
	other := newStore(t, f.pool, "worker-b")
	var renewals atomic.Int64
	var intruderErr error
	ext := p.external(`{"refund_id":"re_2"}`, nil)
	ext.Renew = 50 * time.Millisecond
	ext.OnRenew = func() { renewals.Add(1) }
	ext.Read = func(context.Context) (bool, json.RawMessage, error) {
		p.reads.Add(1)
		time.Sleep(500 * time.Millisecond) // past the lease taken for the read
		_, intruderErr = other.Begin(ctx, c)
		return false, nil, nil
	}
	out, err := f.store.External(ctx, c, ext)
	require.NoError(t, err)
	require.ErrorIs(t, intruderErr, idempotency.ErrInFlight, "nobody takes the key over while the read runs")
	assert.Positive(t, renewals.Load(), "the caller heartbeats during the read")
	assert.JSONEq(t, `{"refund_id":"re_2"}`, string(out.Result))
	assert.EqualValues(t, 2, p.calls.Load())
	state, owner, attempts := f.state(t, c)
	assert.Equal(t, []any{"completed", "worker-a", 2}, []any{state, owner, attempts})
}

func TestExternalLostLeaseDuringReadSendsNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":500}`)
	var p provider
	f.leaveUnknown(t, &p, c)

	ext := p.external(`{"refund_id":"re_2"}`, nil)
	ext.Renew = 20 * time.Millisecond
	ext.ReadTries = 1
	ext.Read = func(ctx context.Context) (bool, json.RawMessage, error) {
		p.reads.Add(1)
		f.steal(t, c)
		select {
		case <-ctx.Done():
			return false, nil, ctx.Err()
		case <-time.After(5 * time.Second):
			return false, nil, nil
		}
	}
	_, err := f.store.External(ctx, c, ext)
	require.ErrorIs(t, err, idempotency.ErrLeaseLost)
	assert.NotErrorIs(t, err, idempotency.ErrUnresolved, "losing the key is no reason to ask a person")
	assert.EqualValues(t, 1, p.calls.Load(), "nothing is sent without the lease")
	state, owner, attempts := f.state(t, c)
	assert.Equal(t, []any{"in_flight", "thief", 3}, []any{state, owner, attempts}, "the key is left to its new owner")
}

func TestExternalUnknownOutcomeReadFailingIsUnresolved(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":500}`)
	var p provider
	f.leaveUnknown(t, &p, c)

	ext := p.external(`{"refund_id":"re_2"}`, nil)
	ext.Read = p.read(false, "", errors.New("ledger unavailable"))
	ext.ReadTries = 2
	ext.ReadBackoff = time.Millisecond
	_, err := f.store.External(ctx, c, ext)
	require.ErrorIs(t, err, idempotency.ErrUnresolved)
	var unresolved *idempotency.UnresolvedError
	require.ErrorAs(t, err, &unresolved)
	assert.Equal(t, c.Key.String(), unresolved.Key)
	assert.WithinDuration(t, time.Now(), unresolved.FirstAttemptAt, time.Minute)
	assert.Contains(t, unresolved.Known, "ledger unavailable")
	assert.Contains(t, unresolved.Known, "provider timed out", "the earlier failure is kept")
	assert.EqualValues(t, 2, p.reads.Load())
	assert.EqualValues(t, 1, p.calls.Load(), "nothing is sent while the outcome is unknown")

	state, failure := f.failure(t, c)
	assert.Equal(t, "failed", state)
	require.NotNil(t, failure)
	assert.False(t, failure.BeforeEffect, "the key stays unknown")
}

func TestExternalUnknownOutcomeWithoutRead(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		lifetime     time.Duration
		firstUsedAgo time.Duration
		wantCalls    int64
		wantKnown    string // empty: the call is made again
	}{
		{"provider does not deduplicate", 0, 0, 1, "does not deduplicate by our key"},
		{"provider still knows the key", time.Hour, 0, 2, ""},
		{"provider forgot the key", time.Hour, 2 * time.Hour, 1, "the provider forgets keys after 1h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			ctx := context.Background()
			c := claim(t, "acme", "r1", 2, "send_email", `{"to":"a@example.com"}`)
			var p provider
			f.leaveUnknown(t, &p, c)
			_, err := f.pool.Exec(ctx, "UPDATE idempotency_keys SET created_at = now() - $1::interval", tt.firstUsedAgo)
			require.NoError(t, err)

			ext := p.external(`{"message_id":"m_1"}`, nil)
			ext.KeyLifetime = tt.lifetime
			out, err := f.store.External(ctx, c, ext)
			assert.Equal(t, tt.wantCalls, p.calls.Load())
			if tt.wantKnown == "" {
				require.NoError(t, err)
				assert.JSONEq(t, `{"message_id":"m_1"}`, string(out.Result))
				return
			}
			var unresolved *idempotency.UnresolvedError
			require.ErrorAs(t, err, &unresolved)
			assert.Contains(t, unresolved.Known, tt.wantKnown)
			state, failure := f.failure(t, c)
			assert.Equal(t, "failed", state)
			require.NotNil(t, failure)
			assert.False(t, failure.BeforeEffect)
		})
	}
}

// TestExternalSlowCallIsNeverTakenOver: a call that outlasts its lease
// several times over keeps its key, because the lease is renewed while it
// runs. The lease is long enough that a loaded machine's pauses do not
// lose it, and every intrusion comes after the first lease would have
// ended.
func TestExternalSlowCallIsNeverTakenOver(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":500}`)
	c.Lease = 1500 * time.Millisecond
	var renewals atomic.Int64
	started := make(chan struct{})
	ext := idempotency.External{
		Call: func(ctx context.Context) (json.RawMessage, error) {
			close(started)
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-time.After(4 * time.Second):
				return json.RawMessage(`{"refund_id":"re_1"}`), nil
			}
		},
		BeforeEffect: beforeEffect,
		Renew:        100 * time.Millisecond,
		OnRenew:      func() { renewals.Add(1) },
	}
	type result struct {
		out idempotency.ExternalOutcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := f.store.External(ctx, c, ext)
		done <- result{out, err}
	}()
	<-started
	callStart := time.Now()

	other := newStore(t, f.pool, "worker-b")
	var intruder provider
	for _, at := range []time.Duration{1800 * time.Millisecond, 2600 * time.Millisecond, 3400 * time.Millisecond} {
		time.Sleep(time.Until(callStart.Add(at)))
		_, err := other.Begin(ctx, c)
		require.ErrorIs(t, err, idempotency.ErrInFlight, "Begin %s into the call", at)
		_, err = other.External(ctx, c, intruder.external(`{}`, nil))
		require.ErrorIs(t, err, idempotency.ErrInFlight, "External %s into the call", at)
	}
	res := <-done
	require.NoError(t, res.err)
	assert.JSONEq(t, `{"refund_id":"re_1"}`, string(res.out.Result))
	assert.Zero(t, intruder.calls.Load())
	assert.GreaterOrEqual(t, renewals.Load(), int64(3), "OnRenew is called after each renewal")
	state, owner, attempts := f.state(t, c)
	assert.Equal(t, []any{"completed", "worker-a", 1}, []any{state, owner, attempts})
}

func TestExternalLostLeaseCancelsCall(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// after is what Call returns once its context has ended.
		after func(ctx context.Context) (json.RawMessage, error)
	}{
		{"call gives up", func(ctx context.Context) (json.RawMessage, error) { return nil, ctx.Err() }},
		{"call finishes anyway", func(context.Context) (json.RawMessage, error) {
			return json.RawMessage(`{"refund_id":"re_1"}`), nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			ctx := context.Background()
			c := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":500}`)
			c.Lease = time.Minute
			cause := make(chan error, 1)
			ext := idempotency.External{
				Call: func(ctx context.Context) (json.RawMessage, error) {
					f.steal(t, c)
					select {
					case <-ctx.Done():
						cause <- context.Cause(ctx)
						return tt.after(ctx)
					case <-time.After(5 * time.Second):
						return nil, errors.New("the call was not cancelled")
					}
				},
				BeforeEffect: beforeEffect,
				Renew:        20 * time.Millisecond,
			}

			_, err := f.store.External(ctx, c, ext)
			require.ErrorIs(t, err, idempotency.ErrLeaseLost)
			require.Len(t, cause, 1, "the call's context ended")
			assert.ErrorIs(t, <-cause, idempotency.ErrLeaseLost)
			state, owner, attempts := f.state(t, c)
			assert.Equal(t, []any{"in_flight", "thief", 2}, []any{state, owner, attempts}, "the stale owner wrote nothing")
		})
	}
}

// The moment past which a call must not send is when its lease may have
// expired by this process's clock, and each renewal moves it on: a process
// frozen past it can tell, when it comes back, that it may no longer send.
// The call's deadline stays the caller's, so that a client's own timeout
// still bounds a slow call.
func TestExternalCallSendByFollowsTheLease(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":500}`)
	c.Lease = 600 * time.Millisecond
	var first, later time.Time
	var deadline bool
	before := time.Now()
	_, err := f.store.External(context.Background(), c, idempotency.External{
		Call: func(ctx context.Context) (json.RawMessage, error) {
			var ok bool
			if first, ok = idempotency.SendBy(ctx); !ok {
				return nil, errors.New("the call has no send-by moment")
			}
			_, deadline = ctx.Deadline()
			time.Sleep(700 * time.Millisecond) // three renewals
			later, _ = idempotency.SendBy(ctx)
			return json.RawMessage(`{"refund_id":"re_1"}`), nil
		},
		BeforeEffect: beforeEffect,
		Renew:        200 * time.Millisecond,
	})
	require.NoError(t, err)
	assert.WithinDuration(t, before.Add(400*time.Millisecond), first, 100*time.Millisecond,
		"the lease less one renewal interval, from before it was granted")
	assert.Greater(t, later.Sub(first), 300*time.Millisecond, "the renewals moved it on")
	assert.False(t, deadline, "the caller gave no deadline, and the lease adds none")
}

// A call whose renewals cannot reach the database is cut off with
// ErrLeaseLost once its lease may have expired, not later.
func TestExternalCallIsCutOffWhenItsLeaseMayHaveExpired(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":500}`)
	c.Lease = 600 * time.Millisecond
	var cut time.Duration
	_, err := f.store.External(context.Background(), c, idempotency.External{
		Call: func(ctx context.Context) (json.RawMessage, error) {
			began := time.Now()
			// The renewals fail: the key's row is locked by another
			// transaction for longer than the lease.
			tx, err := f.pool.Begin(context.Background())
			if err != nil {
				return nil, err
			}
			defer tx.Rollback(context.Background()) //nolint:errcheck
			if _, err := tx.Exec(context.Background(), "LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE"); err != nil {
				return nil, err
			}
			select {
			case <-ctx.Done():
				cut = time.Since(began)
				return nil, context.Cause(ctx)
			case <-time.After(5 * time.Second):
				return nil, errors.New("not cut off")
			}
		},
		BeforeEffect: beforeEffect,
		Renew:        200 * time.Millisecond,
	})
	require.ErrorIs(t, err, idempotency.ErrLeaseLost)
	assert.Less(t, cut, 1500*time.Millisecond, "cut off about when the lease may have expired (400 ms), not at the end of a blocked renewal")
}

func TestRenewExtendsLease(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{}`)
	c.Lease = time.Minute
	b, err := f.store.Begin(ctx, c)
	require.NoError(t, err)
	_, err = f.pool.Exec(ctx, "UPDATE idempotency_keys SET lease_expiry = now() + interval '1 second'")
	require.NoError(t, err)

	require.NoError(t, f.store.Renew(ctx, b.Lease))
	var expiry time.Time
	var left time.Duration
	require.NoError(t, f.pool.QueryRow(ctx, "SELECT lease_expiry, lease_expiry - now() FROM idempotency_keys").
		Scan(&expiry, &left))
	assert.InDelta(t, time.Minute.Seconds(), left.Seconds(), 5, "renewed by the claim's lease from now")
	assert.True(t, b.Lease.Expiry.Equal(expiry), "the lease carries its new expiry: %s, stored %s", b.Lease.Expiry, expiry)
}

func TestRenewStolenKeyIsLeaseLost(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{}`)
	b, err := f.store.Begin(ctx, c)
	require.NoError(t, err)
	before := b.Lease.Expiry
	f.steal(t, c)

	require.ErrorIs(t, f.store.Renew(ctx, b.Lease), idempotency.ErrLeaseLost)
	assert.Equal(t, before, b.Lease.Expiry)
	_, owner, attempts := f.state(t, c)
	assert.Equal(t, []any{"thief", 2}, []any{owner, attempts})
}

func TestExternalRequiresCallAndBeforeEffect(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := claim(t, "acme", "r1", 2, "refund_payment", `{}`)
	var p provider
	noCall := p.external(`{}`, nil)
	noCall.Call = nil
	noBeforeEffect := p.external(`{}`, nil)
	noBeforeEffect.BeforeEffect = nil
	for name, ext := range map[string]idempotency.External{"no Call": noCall, "no BeforeEffect": noBeforeEffect} {
		_, err := f.store.External(context.Background(), c, ext)
		require.ErrorIs(t, err, idempotency.ErrInvalidClaim, name)
	}
	assert.Zero(t, p.calls.Load())
	assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM idempotency_keys"), "nothing is claimed")
}
