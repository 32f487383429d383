package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
)

// notifySchema is the arguments of notify, the external tool follow-on
// messages are addressed to in these tests.
const notifySchema = `{"type":"object","properties":{"to":{"type":"string","minLength":1}},"required":["to"],"additionalProperties":false}`

// notify is an external tool that RunTool never calls: a follow-on message
// is only written to the outbox, and the run delivers it later.
var notify = tools.Tool{
	Name: "notify", Class: tools.ClassExternal, Schema: json.RawMessage(notifySchema),
	Run: func(context.Context, tools.Call) (any, error) {
		return nil, errors.New("notify was delivered during the step that queued it")
	},
}

// noteThenNotify returns a tool of class c named name that adds a note to
// order 1001 through the step's transaction, queues a message to notify,
// stores Add's error in added, and then fails with fail if it is not nil.
func noteThenNotify(name string, c tools.Class, fail error, added *error) tools.Tool {
	return tools.Tool{
		Name: name, Class: c, Schema: json.RawMessage(`{"type":"object"}`),
		Run: func(ctx context.Context, call tools.Call) (any, error) {
			note, err := shop.AddNote(ctx, call.Tx, shop.Note{
				Tenant: call.Key.Tenant, OrderID: "1001", Body: "refund promised", IdempotencyKey: call.Key.String(),
			})
			if err != nil {
				return nil, err
			}
			*added = call.Outbox.Add(ctx, notify.Name, map[string]string{"to": "ada@example.com"})
			if *added != nil {
				return nil, *added
			}
			if fail != nil {
				return nil, fail
			}
			return map[string]int64{"note": note.ID}, nil
		},
	}
}

// A message is written in the effect's transaction: when the tool fails
// after queueing it, the message vanishes with the note and the key, so no
// e-mail announces an effect that never happened.
func TestOutboxMessageVanishesWithAFailedEffect(t *testing.T) {
	t.Parallel()
	for _, c := range []tools.Class{tools.ClassNatural, tools.ClassKeyed} {
		t.Run(string(c), func(t *testing.T) {
			t.Parallel()
			var added error
			f := setup(t, notify, noteThenNotify("promise", c, errors.New("ledger refused the refund"), &added))

			_, err := f.acts.RunTool(context.Background(), input(t, 1, "promise", `{}`))
			require.NoError(t, added, "the message was queued before the tool failed")
			require.ErrorContains(t, err, "ledger refused the refund")
			assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM outbox"), "the message rolled back with the effect")
			assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM order_notes"))
			assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM idempotency_keys"))
		})
	}
}

// A committed message is written once; a replay of the step returns the
// messages the first attempt committed, read from the outbox, so the run
// delivers them even when the attempt that wrote them died before
// reporting, and the replay queues no second message.
func TestOutboxMessageCommitsOnceAndReplays(t *testing.T) {
	t.Parallel()
	for _, c := range []tools.Class{tools.ClassNatural, tools.ClassKeyed} {
		t.Run(string(c), func(t *testing.T) {
			t.Parallel()
			var added error
			f := setup(t, notify, noteThenNotify("promise", c, nil, &added))
			ctx := context.Background()
			in := input(t, 4, "promise", `{}`)

			first, err := f.acts.RunTool(ctx, in)
			require.NoError(t, err)
			require.NoError(t, added)
			want := []activities.FollowUpMessage{{Seq: 1, Tool: "notify", Key: "v1/acme/r1/4/notify.1"}}
			assert.Equal(t, want, first.FollowUps)
			assert.False(t, first.Replayed)

			second, err := f.acts.RunTool(ctx, in)
			require.NoError(t, err)
			assert.True(t, second.Replayed)
			assert.Equal(t, want, second.FollowUps, "a replay returns the committed messages")

			assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM order_notes"), "the tool ran once")
			args := `{"to":"ada@example.com"}`
			hash, err := keys.ArgsHash([]byte(args))
			require.NoError(t, err)
			assert.Equal(t, 1, f.count(t, `
SELECT count(*) FROM outbox
WHERE tenant = 'acme' AND run_id = 'r1' AND step = 4 AND seq = 1 AND key = 'v1/acme/r1/4/notify.1'
  AND tool = 'notify' AND args = $1::jsonb AND args_hash = $2 AND state = 'pending'`, args, hash))
			assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM outbox"), "the replay wrote no second message")
		})
	}
}

// Outbox.Add checks a message like a planned call before writing it: only
// a registered external tool can be the receiver, with arguments its schema
// accepts. A tool that ignores the refusal and commits leaves no message.
func TestOutboxAddRefusesWhatIsNotACallOfARegisteredExternalTool(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		tool string
		args any // valid for tool's schema, when tool has one
		want string
	}{
		{"a keyed tool", shop.ToolAddOrderNote, map[string]string{"order_id": "1001", "text": "called"},
			`outbox: "add_order_note" is not a registered external tool`},
		{"a read tool", shop.ToolLookupOrder, map[string]string{"order_id": "1001"},
			`outbox: "lookup_order" is not a registered external tool`},
		{"an unregistered tool", "fax", map[string]string{"to": "ada@example.com"},
			`outbox: "fax" is not a registered external tool`},
		{"arguments the schema refuses", notify.Name, map[string]string{"to": "ada@example.com", "cc": "bob@example.com"},
			"outbox: arguments of notify do not match its schema"},
		{"arguments that are not an object", notify.Name, []string{"ada@example.com"},
			"outbox: arguments of notify must be a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var added error
			shrug := tools.Tool{
				Name: "shrug", Class: tools.ClassKeyed, Schema: json.RawMessage(`{"type":"object"}`),
				Run: func(ctx context.Context, call tools.Call) (any, error) {
					added = call.Outbox.Add(ctx, tt.tool, tt.args)
					return map[string]bool{"ok": true}, nil
				},
			}
			f := setup(t, notify, shrug)

			out, err := f.acts.RunTool(context.Background(), input(t, 1, "shrug", `{}`))
			require.NoError(t, err)
			require.ErrorIs(t, added, tools.ErrInvalidCall)
			assert.Contains(t, added.Error(), tt.want)
			assert.Empty(t, out.FollowUps)
			assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM outbox"))
		})
	}
}
