package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/idempotency"
)

// errTaskFailed is a provider's answer that its task ended failed: a
// definite failure, before the effect (see beforeTask).
var errTaskFailed = errors.New("the task ended failed")

func beforeTask(err error) bool { return errors.Is(err, errRefused) || errors.Is(err, errTaskFailed) }

// task is a fake provider that answers a call with a task it records as
// the key's handle, then loses the answer; resume answers what follows
// the task.
type task struct {
	calls, resumes atomic.Int64
	followed       atomic.Value // the handle Resume was given
}

func (p *task) external(resume func() (json.RawMessage, error)) idempotency.External {
	return idempotency.External{
		Call: func(ctx context.Context) (json.RawMessage, error) {
			p.calls.Add(1)
			if err := idempotency.RecordInProgress(ctx, json.RawMessage(`{"task_id":"t-1","session":"s-1"}`)); err != nil {
				return nil, err
			}
			return nil, errTimedOut // the worker loses the answer
		},
		Resume: func(_ context.Context, handle json.RawMessage) (json.RawMessage, error) {
			p.resumes.Add(1)
			p.followed.Store(string(handle))
			return resume()
		},
		BeforeEffect: beforeTask,
	}
}

func (f fixture) handle(t *testing.T, c idempotency.Claim) string {
	t.Helper()
	var h *string
	require.NoError(t, f.pool.QueryRow(context.Background(), "SELECT handle::text FROM idempotency_keys WHERE tenant = $1 AND key = $2",
		c.Key.Tenant, c.Key.String()).Scan(&h))
	if h == nil {
		return ""
	}
	return *h
}

// A call that recorded its task's handle and lost its answer is followed
// by the next attempt to the task's result: the key completes with it, and
// nothing is sent again.
func TestAnUnknownOutcomeWithAHandleIsFollowedNotResent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "desk_research", `{"topic":"plates"}`)
	var p task
	ext := p.external(func() (json.RawMessage, error) { return json.RawMessage(`{"report":"done"}`), nil })
	_, err := f.store.External(ctx, c, ext)
	require.ErrorIs(t, err, errTimedOut)
	assert.JSONEq(t, `{"task_id":"t-1","session":"s-1"}`, f.handle(t, c), "recorded under the lease")

	out, err := f.store.External(ctx, c, ext)
	require.NoError(t, err)
	assert.JSONEq(t, `{"report":"done"}`, string(out.Result))
	assert.EqualValues(t, 1, p.calls.Load(), "not sent again")
	assert.EqualValues(t, 1, p.resumes.Load())
	assert.JSONEq(t, `{"task_id":"t-1","session":"s-1"}`, p.followed.Load().(string))
	state, _, _ := f.state(t, c)
	assert.Equal(t, "completed", state)
}

// A task that ended failed is a definite failure that made nothing: the
// key fails before its effect, its handle cleared, and a new attempt
// starts afresh.
func TestAFailedTaskIsADefiniteFailure(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "desk_research", `{"topic":"plates"}`)
	var p task
	ext := p.external(func() (json.RawMessage, error) { return nil, fmt.Errorf("research: %w", errTaskFailed) })
	_, _ = f.store.External(ctx, c, ext)
	_, err := f.store.External(ctx, c, ext)
	require.ErrorIs(t, err, errTaskFailed)
	state, failure := f.failure(t, c)
	assert.Equal(t, "failed", state)
	require.NotNil(t, failure)
	assert.True(t, failure.BeforeEffect)
	assert.Empty(t, f.handle(t, c), "the handle is cleared with a failure before the effect")
	assert.EqualValues(t, 1, p.calls.Load())
}

// A handle that cannot be read now (the provider is down) leaves the
// outcome unknown, the handle kept: the next attempt follows it again.
func TestAHandleThatCannotBeReadNowIsFollowedAgain(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "desk_research", `{"topic":"plates"}`)
	var p task
	var down atomic.Bool
	down.Store(true)
	ext := p.external(func() (json.RawMessage, error) {
		if down.Load() {
			return nil, errors.New("connection reset")
		}
		return json.RawMessage(`{"report":"done"}`), nil
	})
	_, _ = f.store.External(ctx, c, ext)
	_, err := f.store.External(ctx, c, ext)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "connection reset")
	assert.NotEmpty(t, f.handle(t, c), "the handle is kept")
	down.Store(false)
	out, err := f.store.External(ctx, c, ext)
	require.NoError(t, err)
	assert.JSONEq(t, `{"report":"done"}`, string(out.Result))
	assert.EqualValues(t, 2, p.resumes.Load())
	assert.EqualValues(t, 1, p.calls.Load())
}

// A handle is recorded only from within an external call, and only by the
// lease that holds the key.
func TestAHandleIsRecordedUnderTheLease(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	require.Error(t, idempotency.RecordInProgress(ctx, json.RawMessage(`{}`)), "outside a call")
	c := claim(t, "acme", "r1", 2, "desk_research", `{"topic":"plates"}`)
	_, err := f.store.External(ctx, c, idempotency.External{
		Call: func(ctx context.Context) (json.RawMessage, error) {
			f.steal(t, c)
			return nil, idempotency.RecordInProgress(ctx, json.RawMessage(`{"task_id":"t-9"}`))
		},
		BeforeEffect: beforeEffect,
	})
	require.ErrorIs(t, err, idempotency.ErrLeaseLost)
	assert.Empty(t, f.handle(t, c), "a stolen lease records nothing")
}

// A handle the provider no longer knows cannot be followed: the paired
// read tells what happened when it finds the effect, or, without one, a
// person must (UnresolvedError), told the handle was lost. It is never
// answered by sending again: not on the provider's key, which a provider
// that forgot the effect has forgotten too, and not on a paired read that
// does not find the effect yet, which may still be in progress; so too
// when the tool can no longer follow handles at all.
func TestALostHandleGoesToTheReadOrAPersonNeverASend(t *testing.T) {
	t.Parallel()
	lost := func() (json.RawMessage, error) {
		return nil, fmt.Errorf("task t-1: not found: %w", idempotency.ErrHandleLost)
	}
	for _, tc := range []struct {
		name   string
		change func(*idempotency.External, *provider)
		found  bool
	}{
		{"the read finds it", func(e *idempotency.External, p *provider) { e.Read = p.read(true, `{"report":"found"}`, nil) }, true},
		{"no read", func(*idempotency.External, *provider) {}, false},
		{"the provider keeps keys", func(e *idempotency.External, _ *provider) { e.KeyLifetime = 24 * time.Hour }, false},
		{"the read does not find it", func(e *idempotency.External, p *provider) { e.Read = p.read(false, "", nil) }, false},
		{"the tool cannot follow it", func(e *idempotency.External, _ *provider) { e.Resume, e.KeyLifetime = nil, 24*time.Hour }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			ctx := context.Background()
			c := claim(t, "acme", "r1", 2, "desk_research", `{"topic":"plates"}`)
			var p task
			var reads provider
			ext := p.external(lost)
			_, _ = f.store.External(ctx, c, ext)
			tc.change(&ext, &reads)
			out, err := f.store.External(ctx, c, ext)
			assert.EqualValues(t, 1, p.calls.Load(), "sent once")
			if tc.found {
				require.NoError(t, err)
				assert.True(t, out.Resolved)
				assert.JSONEq(t, `{"report":"found"}`, string(out.Result))
				assert.EqualValues(t, 1, reads.reads.Load())
				return
			}
			var unresolved *idempotency.UnresolvedError
			require.ErrorAs(t, err, &unresolved)
			assert.Contains(t, unresolved.Known, "may still be in progress")
			if ext.Resume != nil {
				assert.Contains(t, unresolved.Known, "task t-1: not found")
			}
		})
	}
}

// A person's not_applied answer clears the handle: the next attempt sends
// the call afresh, and a later unknown outcome of that attempt does not
// follow the old effect.
func TestNotAppliedClearsTheHandle(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "desk_research", `{"topic":"plates"}`)
	var p task
	ext := p.external(func() (json.RawMessage, error) { return nil, fmt.Errorf("task t-1: %w", idempotency.ErrHandleLost) })
	_, _ = f.store.External(ctx, c, ext)
	_, err := f.store.External(ctx, c, ext)
	require.ErrorIs(t, err, idempotency.ErrUnresolved)
	_, err = f.store.Resolve(ctx, c, idempotency.Answer{Applied: false, By: "dana", Note: "no job at the provider"})
	require.NoError(t, err)
	assert.Empty(t, f.handle(t, c), "the old effect's handle is gone")
	_, err = f.store.External(ctx, c, ext)
	require.ErrorIs(t, err, errTimedOut, "sent afresh")
	assert.EqualValues(t, 2, p.calls.Load())
	assert.EqualValues(t, 1, p.resumes.Load(), "the old handle was not followed again")
}
