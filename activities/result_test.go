package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
)

// nulNote is a result no table can hold: PostgreSQL refuses a NUL in jsonb.
var nulNote = map[string]any{"note": "a\x00b"}

// TestRunToolFailsADatabaseToolWhoseResultCannotBeStored: a read or a
// database tool whose result the store refuses fails at once, naming what
// is wrong and where, and its effect rolls back with its key.
func TestRunToolFailsADatabaseToolWhoseResultCannotBeStored(t *testing.T) {
	t.Parallel()
	for _, class := range []tools.Class{tools.ClassRead, tools.ClassKeyed} {
		t.Run(string(class), func(t *testing.T) {
			t.Parallel()
			note := tools.Tool{Name: "noted", Schema: json.RawMessage(`{"type":"object"}`), Class: class,
				Run: func(ctx context.Context, call tools.Call) (any, error) {
					if call.Tx != nil {
						if _, err := shop.AddNote(ctx, call.Tx, shop.Note{Tenant: call.Key.Tenant, OrderID: "1001", Body: "x",
							IdempotencyKey: call.Key.String()}); err != nil {
							return nil, err
						}
					}
					return nulNote, nil
				}}
			f := setup(t, note)

			_, err := f.run(t, input(t, 1, "noted", `{}`))

			app := requireAppError(t, err, activities.ErrTypeUnstorable, true)
			assert.Contains(t, app.Error(), "noted")
			assert.Contains(t, app.Error(), "result holds a NUL character (U+0000) at note")
			assert.Zero(t, f.count(t, "SELECT count(*) FROM order_notes"))
			assert.Zero(t, f.count(t, "SELECT count(*) FROM idempotency_keys"))
		})
	}
}

// TestRunToolSendsAnExternalCallWhoseResultCannotBeStoredOnceAndAsksAPerson:
// the provider answered, so the effect was made: the step waits for a
// person at once, saying why, and is not sent again (a provider that keeps
// keys would be asked again under the same key, and answer the same).
func TestRunToolSendsAnExternalCallWhoseResultCannotBeStoredOnceAndAsksAPerson(t *testing.T) {
	t.Parallel()
	sends := 0
	send := tools.Tool{Name: "send_gift", Class: tools.ClassExternal, Schema: json.RawMessage(giftSchema),
		Run: func(context.Context, tools.Call) (any, error) {
			sends++
			return nulNote, nil
		}}
	f := setup(t, send)
	in := input(t, 1, "send_gift", `{"order_id":"1001"}`)

	for range 2 {
		_, err := f.run(t, in)
		app := requireAppError(t, err, activities.ErrTypeNeedsResolution, true)
		var nr activities.NeedsResolution
		require.NoError(t, app.Details(&nr))
		assert.Contains(t, nr.Known, "the call answered, so its effect was made, but its result cannot be stored: result holds a NUL character (U+0000) at note")
	}
	assert.Equal(t, 1, sends, "an answered call is never sent again")
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM idempotency_keys WHERE state = 'failed' AND (failure->>'unresolved')::boolean"))
}

// TestRunToolCarriesAnErrorThatIsNotUTF8Escaped: Temporal's protocol
// refuses text that is not UTF-8, so a tool's error that quotes such bytes
// reaches the run escaped, and still says nothing was applied.
func TestRunToolCarriesAnErrorThatIsNotUTF8Escaped(t *testing.T) {
	t.Parallel()
	for name, toolErr := range map[string]error{
		"not applied": tools.NotApplied(errors.New("refused: \xff\xfe")),
		"permanent":   tools.Permanent(tools.NotApplied(errors.New("declined: \xff"))),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			send := tools.Tool{Name: "send_gift", Class: tools.ClassExternal, Schema: json.RawMessage(giftSchema),
				Run: func(context.Context, tools.Call) (any, error) { return nil, toolErr }}
			f := setup(t, send)

			_, err := f.run(t, input(t, 1, "send_gift", `{"order_id":"1001"}`))

			require.Error(t, err)
			for e := err; e != nil; e = errors.Unwrap(e) {
				assert.True(t, utf8.ValidString(e.Error()), "%q", e.Error())
			}
			assert.Contains(t, err.Error(), `\xff`)
			assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM idempotency_keys WHERE state = 'failed' AND (failure->>'before_effect')::boolean"),
				"the key is free for a retry: nothing was applied")
		})
	}
}
