package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/metrics"
	"github.com/oncerun/oncerun/tools"
)

// attempt is what the provider does on one call of send_gift.
type attempt struct {
	apply bool  // the gift is sent
	err   error // and then the call reports err
}

// provider is an outside service that sends gifts: send_gift is its external
// call, find_gift the paired read.
type provider struct {
	mu       sync.Mutex
	readErrs []error         // the next reads' errors
	script   []attempt       // the next calls' behaviour; then: send, no error
	gifts    map[string]int  // gifts sent by order id
	keys     map[string]bool // idempotency keys the provider received
	sends    int             // calls of send_gift
	reads    int             // calls of find_gift
	hang     bool            // reads wait until their context ends
}

func newProvider(script ...attempt) *provider {
	return &provider{script: script, gifts: map[string]int{}, keys: map[string]bool{}}
}

type giftArgs struct {
	OrderID string `json:"order_id"`
}

func (p *provider) send(_ context.Context, call tools.Call) (any, error) {
	var a giftArgs
	if err := call.Decode(&a); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sends++
	p.keys[call.Key.String()] = true
	do := attempt{apply: true}
	if len(p.script) > 0 {
		do, p.script = p.script[0], p.script[1:]
	}
	if do.apply {
		p.gifts[a.OrderID]++
	}
	if do.err != nil {
		return nil, do.err
	}
	return map[string]any{"sent": true, "order_id": a.OrderID}, nil
}

func (p *provider) find(ctx context.Context, call tools.Call) (any, error) {
	var a giftArgs
	if err := call.Decode(&a); err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.hang {
		p.reads++
		p.mu.Unlock()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	defer p.mu.Unlock()
	p.reads++
	if len(p.readErrs) > 0 {
		err := p.readErrs[0]
		p.readErrs = p.readErrs[1:]
		return nil, err
	}
	return map[string]any{"found": p.gifts[a.OrderID] > 0, "order_id": a.OrderID}, nil
}

// counts returns the provider's gifts for order 1001, sends and reads.
func (p *provider) counts() (gifts, sends, reads int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gifts["1001"], p.sends, p.reads
}

const giftSchema = `{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"],"additionalProperties":false}`

// setupExternal serves send_gift, with find_gift as its paired read unless
// paired is false, on p.
func setupExternal(t *testing.T, p *provider, paired bool) fixture {
	t.Helper()
	send := tools.Tool{Name: "send_gift", Class: tools.ClassExternal, Schema: json.RawMessage(giftSchema), Run: p.send}
	if paired {
		send.PairedRead = "find_gift"
	}
	find := tools.Tool{Name: "find_gift", Class: tools.ClassRead, Schema: json.RawMessage(giftSchema), Run: p.find}
	return setup(t, send, find)
}

var (
	errTimeout = errors.New("read tcp: i/o timeout after the request was sent")
	errRefused = fmt.Errorf("dial tcp: connection refused: %w", tools.ErrNotApplied)
)

func TestRunToolExternalOnceAndReplay(t *testing.T) {
	t.Parallel()
	p := newProvider()
	f := setupExternal(t, p, true)
	in := input(t, 1, "send_gift", `{"order_id":"1001"}`)

	first, err := f.run(t, in)
	require.NoError(t, err)
	second, err := f.run(t, in)
	require.NoError(t, err)

	assert.False(t, first.Replayed)
	assert.True(t, second.Replayed)
	assert.JSONEq(t, `{"sent":true,"order_id":"1001"}`, string(second.Result))
	assert.Equal(t, string(first.Result), string(second.Result))
	gifts, sends, reads := p.counts()
	assert.Equal(t, []int{1, 1, 0}, []int{gifts, sends, reads})
	assert.True(t, p.keys["v1/acme/r1/1/send_gift"], "the provider receives our key")
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM idempotency_keys WHERE state = 'completed'"))
	assert.Equal(t, 1, f.calls("send_gift", metrics.OutcomeExecuted))
	assert.Equal(t, 1, f.calls("send_gift", metrics.OutcomeReplayed))
}

func TestRunToolExternalRetries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		first        attempt
		wantGifts    int
		wantSends    int
		wantReads    int
		wantOutcome  string
		wantResolved bool
	}{
		// The gift went out but the answer was lost: the paired read finds
		// it and the step completes without sending again.
		{"unknown, applied", attempt{apply: true, err: errTimeout}, 1, 1, 1, metrics.OutcomeResolved, true},
		// The request never reached the provider: the read finds nothing
		// and the gift is sent.
		{"unknown, not applied", attempt{err: errTimeout}, 1, 2, 1, metrics.OutcomeExecuted, false},
		// Refused before sending: the next attempt sends without asking.
		{"not applied", attempt{err: errRefused}, 1, 2, 0, metrics.OutcomeExecuted, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newProvider(tt.first)
			f := setupExternal(t, p, true)
			in := input(t, 1, "send_gift", `{"order_id":"1001"}`)

			_, err := f.run(t, in)
			app := requireRetryable(t, err)
			assert.Contains(t, app.Error(), tt.first.err.Error())
			assert.Equal(t, 1, f.calls("send_gift", metrics.OutcomeFailed))

			out, err := f.run(t, in)
			require.NoError(t, err)
			assert.False(t, out.Replayed)
			if tt.wantResolved {
				assert.JSONEq(t, `{"found":true,"order_id":"1001"}`, string(out.Result), "the paired read's result is stored")
			} else {
				assert.JSONEq(t, `{"sent":true,"order_id":"1001"}`, string(out.Result))
			}
			gifts, sends, reads := p.counts()
			assert.Equal(t, []int{tt.wantGifts, tt.wantSends, tt.wantReads}, []int{gifts, sends, reads}, "gifts, sends, reads")
			assert.Equal(t, 1, f.calls("send_gift", tt.wantOutcome))
			assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM idempotency_keys WHERE state = 'completed' AND attempts = 2"))

			replay, err := f.run(t, in)
			require.NoError(t, err)
			assert.True(t, replay.Replayed)
			assert.Equal(t, string(out.Result), string(replay.Result))
		})
	}
}

func TestRunToolExternalUnknownWithoutPairedRead(t *testing.T) {
	t.Parallel()
	p := newProvider(attempt{apply: true, err: errTimeout})
	f := setupExternal(t, p, false)
	in := input(t, 1, "send_gift", `{"order_id":"1001"}`)

	_, err := f.run(t, in)
	requireRetryable(t, err)

	_, err = f.run(t, in)
	app := requireAppError(t, err, activities.ErrTypeNeedsResolution, true)
	assert.Contains(t, app.Error(), "has no paired read")
	var nr activities.NeedsResolution
	require.NoError(t, app.Details(&nr))
	assert.Equal(t, "v1/acme/r1/1/send_gift", nr.Key)
	assert.False(t, nr.FirstSentAt.IsZero())
	gifts, sends, _ := p.counts()
	assert.Equal(t, 1, gifts)
	assert.Equal(t, 1, sends, "an unknown outcome is never sent again blindly")
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM idempotency_keys WHERE state = 'failed' AND NOT (failure->>'before_effect')::boolean"))

	// Asked again, it still sends nothing: the step waits for a person.
	_, err = f.run(t, in)
	requireAppError(t, err, activities.ErrTypeNeedsResolution, true)
	_, sends, _ = p.counts()
	assert.Equal(t, 1, sends)
}

// A paired read that fails is tried again within the attempt; one that
// answers settles the outcome.
func TestRunToolExternalPairedReadIsTriedAgain(t *testing.T) {
	t.Parallel()
	p := newProvider(attempt{apply: true, err: errTimeout})
	p.readErrs = []error{errors.New("provider answered 503")}
	f := setupExternal(t, p, true)
	in := input(t, 1, "send_gift", `{"order_id":"1001"}`)

	_, err := f.run(t, in)
	requireRetryable(t, err)
	out, err := f.run(t, in)
	require.NoError(t, err)
	assert.JSONEq(t, `{"found":true,"order_id":"1001"}`, string(out.Result))
	gifts, sends, reads := p.counts()
	assert.Equal(t, []int{1, 1, 2}, []int{gifts, sends, reads}, "gifts, sends, reads")
}

// A paired read that keeps failing leaves the outcome unknown: the step
// needs resolution, and nothing is sent.
func TestRunToolExternalPairedReadUnavailableNeedsResolution(t *testing.T) {
	t.Parallel()
	p := newProvider(attempt{apply: true, err: errTimeout})
	unavailable := errors.New("provider answered 503")
	p.readErrs = []error{unavailable, unavailable, unavailable}
	f := setupExternal(t, p, true)
	in := input(t, 1, "send_gift", `{"order_id":"1001"}`)

	_, err := f.run(t, in)
	requireRetryable(t, err)
	_, err = f.run(t, in)
	app := requireAppError(t, err, activities.ErrTypeNeedsResolution, true)
	assert.Contains(t, app.Error(), "the paired read failed")
	assert.Contains(t, app.Error(), "provider answered 503")
	gifts, sends, reads := p.counts()
	assert.Equal(t, []int{1, 1, 3}, []int{gifts, sends, reads}, "gifts, sends, reads")
}

// unknownGift brings step 1 of run r1, a send_gift the provider applied,
// to needs_resolution: the answer is lost and the paired read fails
// readErrs times (3 use up the attempt's reads; more fail later reads).
func unknownGift(t *testing.T, readErrs int) (*provider, fixture, activities.ToolInput) {
	t.Helper()
	p := newProvider(attempt{apply: true, err: errTimeout})
	for range readErrs {
		p.readErrs = append(p.readErrs, errors.New("provider answered 503"))
	}
	f := setupExternal(t, p, true)
	in := input(t, 1, "send_gift", `{"order_id":"1001"}`)
	_, err := f.run(t, in)
	requireRetryable(t, err)
	_, err = f.run(t, in)
	requireAppError(t, err, activities.ErrTypeNeedsResolution, true)
	return p, f, in
}

// applyGiftAnswer applies alice's answer applied, with result
// {"id":"gift_123"}, to the step unknownGift left, in env.
func applyGiftAnswer(t *testing.T, f fixture, env *testsuite.TestActivityEnvironment, in activities.ToolInput) json.RawMessage {
	t.Helper()
	v, err := env.ExecuteActivity(f.acts.ApplyResolution, activities.ResolutionAnswer{Tenant: "acme", RunID: "r1", Step: 1,
		Round: 1, Tool: "send_gift", Args: in.Args, ArgsHash: in.ArgsHash, Applied: true,
		Result: json.RawMessage(`{"id":"gift_123"}`), By: "alice", At: time.Now()})
	require.NoError(t, err, "the answer is applied")
	var out activities.ApplyResolutionOutput
	require.NoError(t, v.Get(&out))
	return out.Result
}

// TestAnAppliedAnswerStoresTheProvidersRecord: a person answers applied
// with a result that lacks what reconciliation reads (an amount); the
// tool's paired read, which answers now, finds the effect, and its record
// is the step's result. When the read fails, the person's result stands.
func TestAnAppliedAnswerStoresTheProvidersRecord(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		readErrs int
		want     string
	}{
		{"the read finds it", 3, `{"found":true,"order_id":"1001"}`},
		{"the read fails", 4, `{"id":"gift_123"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, f, in := unknownGift(t, c.readErrs)
			assert.JSONEq(t, c.want, string(applyGiftAnswer(t, f, f.env(), in)))
			var stored string
			require.NoError(t, f.pool.QueryRow(context.Background(),
				`SELECT result::text FROM idempotency_keys WHERE key = 'v1/acme/r1/1/send_gift'`).Scan(&stored))
			assert.JSONEq(t, c.want, stored, "the key completes with it")
			gifts, sends, _ := p.counts()
			assert.Equal(t, []int{1, 1}, []int{gifts, sends}, "nothing is sent again")
		})
	}
}

// TestAnAppliedAnswerIsNotHeldUpByAProviderThatHangs: the paired read of
// an applied answer has a deadline of its own, well inside the attempt's:
// a provider that never answers costs a fraction of the attempt, and the
// person's result is stored.
func TestAnAppliedAnswerIsNotHeldUpByAProviderThatHangs(t *testing.T) {
	t.Parallel()
	p, f, in := unknownGift(t, 3)
	p.mu.Lock()
	p.hang = true
	p.mu.Unlock()
	done := make(chan json.RawMessage, 1)
	go func() { done <- applyGiftAnswer(t, f, f.env(), in) }()
	select {
	case res := <-done:
		assert.JSONEq(t, `{"id":"gift_123"}`, string(res))
	case <-time.After(time.Minute):
		t.Fatal("the applied answer waited on a provider that never answers")
	}
}
