package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/idempotency"
)

// unstorableResults are results the store refuses, with what the refusal
// names.
var unstorableResults = []struct{ name, result, want string }{
	{"NUL", `{"note":"a\u0000b"}`, "NUL character (U+0000) at note"},
	{"underflowing number", `{"lines":[1e-400]}`, "the number 1e-400 at lines[0], too small for a double"},
	{"overflowing number", `{"x":1e400}`, "the number 1e400 at x, beyond the range of a double"},
	{"too deep", strings.Repeat("[", 40) + strings.Repeat("]", 40), "nests 33 deep"},
}

func TestDoRefusesAResultItCannotStoreAndRollsTheEffectBack(t *testing.T) {
	t.Parallel()
	for i, tc := range unstorableResults {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			c := claim(t, "acme", fmt.Sprintf("r%d", i), 1, "add_order_note", `{}`)
			var runs atomic.Int64
			_, err := f.store.Do(context.Background(), c, func(ctx context.Context, tx pgx.Tx) (json.RawMessage, error) {
				if _, err := addNote(&runs, c, "note")(ctx, tx); err != nil {
					return nil, err
				}
				return json.RawMessage(tc.result), nil
			})
			require.ErrorIs(t, err, idempotency.ErrUnstorable)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM order_notes"), "the effect rolls back with its key")
			assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM idempotency_keys"))
		})
	}
}

func TestDoKeepsControlCharactersOfAResultAsData(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := claim(t, "acme", "r1", 1, "lookup_order", `{}`)
	out, err := f.store.Do(context.Background(), c, func(context.Context, pgx.Tx) (json.RawMessage, error) {
		return json.RawMessage(`{"customer":"Mallory\u001b]2;pwned\u0007"}`), nil
	})
	require.NoError(t, err, "a business table's text is data: it is kept, and escaped where it is shown")
	assert.JSONEq(t, `{"customer":"Mallory\u001b]2;pwned\u0007"}`, string(out.Result))
}

func TestDoKeepsIntegersBeyondDoublesExactly(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := claim(t, "acme", "r1", 1, "add_order_note", `{}`)
	var runs atomic.Int64
	effect := func(ctx context.Context, tx pgx.Tx) (json.RawMessage, error) {
		runs.Add(1)
		return json.RawMessage(`{"id":9007199254740993}`), nil
	}
	_, err := f.store.Do(context.Background(), c, effect)
	require.NoError(t, err)
	again, err := f.store.Do(context.Background(), c, effect)
	require.NoError(t, err)
	assert.True(t, again.Replayed)
	assert.JSONEq(t, `{"id":9007199254740993}`, string(again.Result))
	assert.Contains(t, string(again.Result), "9007199254740993", "the replay carries the integer's digits")
}

func TestExternalLeavesAnAnsweredCallWhoseResultCannotBeStoredUnresolved(t *testing.T) {
	t.Parallel()
	for i, tc := range unstorableResults {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			ctx := context.Background()
			c := claim(t, "acme", fmt.Sprintf("r%d", i), 2, "desk_open_ticket", `{"subject":"s"}`)
			var p provider
			ext := p.external(tc.result, nil)
			// A paired read would find the effect: it must not be asked
			// instead of a person, nor the call be sent again.
			ext.Read = p.read(true, tc.result, nil)
			ext.KeyLifetime = 24 * time.Hour

			_, err := f.store.External(ctx, c, ext)
			var unresolved *idempotency.UnresolvedError
			require.ErrorAs(t, err, &unresolved)
			assert.Contains(t, unresolved.Known, "the call answered, so its effect was made, but its result cannot be stored")
			assert.Contains(t, unresolved.Known, tc.want)
			assert.Contains(t, unresolved.Known, "the answer: "+tc.result[:10], "a person sees what came back")
			assert.Contains(t, unresolved.Known, "a person must answer applied")
			assert.False(t, unresolved.FirstAttemptAt.IsZero())
			state, failure := f.failure(t, c)
			assert.Equal(t, "failed", state)
			require.NotNil(t, failure)
			assert.True(t, failure.Unresolved)
			assert.False(t, failure.BeforeEffect)

			// The next attempt does not send again: it finds the key
			// unresolved, and the read's answer cannot be stored either.
			_, err = f.store.External(ctx, c, ext)
			require.ErrorAs(t, err, &unresolved)
			assert.EqualValues(t, 1, p.calls.Load(), "an answered call is never sent again")
			assert.Contains(t, unresolved.Known, "the paired read found the effect, but its result cannot be stored")

			// A person's answer with a result that can be stored settles it.
			out, err := f.store.Resolve(ctx, c, idempotency.Answer{Applied: true, Result: json.RawMessage(`{"note":"a b"}`), By: "ops"})
			require.NoError(t, err)
			assert.JSONEq(t, `{"note":"a b"}`, string(out.Result))
		})
	}
}

func TestExternalCallThatSaysItsAnswerCannotBeKeptIsUnresolved(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := claim(t, "acme", "r1", 2, "desk_open_ticket", `{"subject":"s"}`)
	var p provider
	rounded := fmt.Errorf("the id 9007199254740992 may have been rounded: %w", idempotency.ErrUnstorable)
	_, err := f.store.External(context.Background(), c, p.external("", rounded))
	var unresolved *idempotency.UnresolvedError
	require.ErrorAs(t, err, &unresolved)
	assert.Contains(t, unresolved.Known, "may have been rounded")
	_, failure := f.failure(t, c)
	require.NotNil(t, failure)
	assert.True(t, failure.Unresolved)
}

func TestResolveRefusesAResultItCannotStore(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":500}`)
	var p provider
	f.leaveUnknown(t, &p, c)
	_, err := f.store.Resolve(ctx, c, idempotency.Answer{Applied: true, Result: json.RawMessage(`{"note":"a\u0000"}`), By: "ops"})
	require.ErrorIs(t, err, idempotency.ErrUnstorable)
	state, _ := f.failure(t, c)
	assert.Equal(t, "failed", state, "nothing was written")
}

func TestFailRecordsAMessageWhateverItHolds(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := claim(t, "acme", "r1", 2, "refund_payment", `{"amount_cents":500}`)
	var p provider
	// A provider's answer quoted in the error: a NUL, bytes that are not
	// UTF-8, and far too much of it.
	providerErr := errors.New("provider said: a\x00b \xff " + strings.Repeat("x", 20000))
	_, err := f.store.External(context.Background(), c, p.external("", providerErr))
	require.ErrorIs(t, err, providerErr)
	state, failure := f.failure(t, c)
	require.Equal(t, "failed", state, "the failure is recorded, not lost with the statement")
	require.NotNil(t, failure)
	assert.Contains(t, failure.Message, `a\u0000b \xff`)
	assert.LessOrEqual(t, len(failure.Message), 8<<10)
}

func TestExternalAnswerThatCannotBeStoredIsSettledByThePairedRead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		found      bool
		readResult string
		readErr    error
		want       string // "" when the read settles it
	}{
		{"a result that can be kept", true, `{"found":true,"ticket":"t-1"}`, nil, ""},
		{"not found", false, `{"found":false}`, nil, "the paired read did not find the effect"},
		{"a read that fails", false, "", errTimedOut, "the paired read failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			c := claim(t, "acme", "r1", 2, "desk_open_ticket", `{"subject":"s"}`)
			var p provider
			ext := p.external(`{"note":"a\u0000b"}`, nil)
			ext.Read, ext.ReadBackoff = p.read(tc.found, tc.readResult, tc.readErr), time.Millisecond

			out, err := f.store.External(context.Background(), c, ext)
			assert.EqualValues(t, 1, p.calls.Load())
			assert.Positive(t, p.reads.Load(), "the read is asked at once")
			if tc.want == "" {
				require.NoError(t, err)
				assert.True(t, out.Resolved)
				assert.JSONEq(t, tc.readResult, string(out.Result))
				return
			}
			var unresolved *idempotency.UnresolvedError
			require.ErrorAs(t, err, &unresolved)
			assert.Contains(t, unresolved.Known, "its result cannot be stored")
			assert.Contains(t, unresolved.Known, tc.want)
		})
	}
}
