package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/temporal"

	"github.com/oncerun/oncerun/internal/idempotency"
)

// Class is a tool's effect class: how its effect is made once.
type Class string

// The effect classes.
const (
	// ClassRead: no effect, no key; safe to run any number of times.
	ClassRead Class = "read"
	// ClassNatural: a unique constraint in the business table makes the
	// effect once, with no window.
	ClassNatural Class = "natural"
	// ClassKeyed: the step key's dedup row commits with the effect.
	ClassKeyed Class = "keyed"
	// ClassExternal: the effect leaves the database under a leased key.
	ClassExternal Class = "external"
)

func (c Class) valid() bool {
	switch c {
	case ClassRead, ClassNatural, ClassKeyed, ClassExternal:
		return true
	}
	return false
}

// Defaults of a [Tool]'s optional fields.
const (
	// DefaultRetention is how long a tool's keys are kept after completion.
	DefaultRetention = 30 * 24 * time.Hour
	// DefaultTimeout is a tool call's StartToClose timeout.
	DefaultTimeout = 30 * time.Second
)

// Tool is one operation an agent can call.
type Tool struct {
	// Name identifies the tool in plans, keys and metrics: lower-case
	// letters, digits and underscores, starting with a letter, at most 64
	// bytes.
	Name string
	// Description tells a planner what the tool does.
	Description string
	// Schema is the JSON Schema (draft 2020-12 unless it says otherwise) of
	// the arguments, which must be an object.
	Schema json.RawMessage
	// Class is the effect class.
	Class Class
	// Approval decides which calls pause for a human. The zero value never
	// pauses.
	Approval ApprovalRule
	// Retention is how long the tool's keys are kept after completion.
	// Default DefaultRetention. Keyed and external tools must keep them
	// longer than the longest approval pause plus the retry horizon.
	Retention time.Duration
	// Timeout is one attempt's StartToClose timeout. Default DefaultTimeout.
	Timeout time.Duration
	// PairedRead names the read tool that tells whether an external call of
	// this tool took effect. It is run with the call's own arguments and
	// must return a JSON object whose boolean "found" says whether the effect
	// exists. Optional; without it an unknown outcome is escalated to a
	// human.
	PairedRead string
	// KeyLifetime, for an external tool whose provider deduplicates
	// requests by the idempotency key we send, is how long the provider
	// keeps keys (24 h at Stripe, 30 minutes at some banks). Zero: the
	// provider does not deduplicate by our key. A retry of a step whose
	// first attempt is older than this never resends without resolving the
	// outcome first (by the paired read, or a person).
	KeyLifetime time.Duration
	// Edits says what an approver may change in a call's arguments before
	// approving it (see [EditRule]). The zero value, EditDefault, is
	// EditNoIncrease for a tool that declares Amounts and EditAllowed for
	// one that does not: loosening the rule on money is written down.
	Edits EditRule
	// Amounts names the arguments that are sums of money, in minor units,
	// with their currency: the inbox shows them as money, EditNoIncrease
	// keeps them from growing, and a call whose amount is below zero is
	// refused unless the schema gives the property a negative minimum.
	Amounts []Amount
	// Repeatable lets one run make the same call (same tool, same canonical
	// arguments) more than once: a reminder e-mail meant to be sent twice.
	// Without it, a keyed or external tool's call that repeats an earlier
	// applied step of the same run is not executed again (see
	// [Tool.OncePerRun]).
	Repeatable bool
	// InDatabase, for a read tool, says that it reads oncerun's own
	// database only (call.DB) and calls nothing outside it: its steps then
	// run inside the run's workflow task, as a natural or keyed tool's do
	// (see [Tool.Local]). A read that calls out (a provider's API, an MCP
	// server) leaves it false and runs as an activity, with heartbeats.
	InDatabase bool
	// Run performs the call. For natural and keyed tools every write must go
	// through call.Tx. An external tool classifies its errors (see
	// ErrNotApplied and Permanent): an error that is neither leaves the
	// outcome unknown.
	Run func(ctx context.Context, call Call) (any, error)
	// Resume, for an external tool whose provider answers with a handle
	// on an effect still in progress (an MCP server's task, an
	// asynchronous transfer), follows the handle an earlier attempt
	// recorded with RecordInProgress to the effect's end, when that
	// attempt's outcome is unknown (its worker died while it followed).
	// It returns the effect's result; an error it classifies as Run's
	// (NotApplied and Permanent: the provider answered that the effect
	// failed); an error wrapping ErrHandleLost when the provider no longer
	// knows the handle (the paired read, or a person, then tells); or any
	// other error, and the next attempt resumes again. Optional.
	Resume func(ctx context.Context, call Call, handle json.RawMessage) (any, error)
}

// RecordInProgress records, from an external tool's Run, the handle of
// its effect in progress at the provider (a JSON document: the provider's
// id for it, and what reaches it), with the step's key and under its
// lease: if the worker dies before the effect ends, the next attempt
// calls the tool's Resume with it rather than Run. It fails outside an
// external step's call.
func RecordInProgress(ctx context.Context, handle json.RawMessage) error {
	return idempotency.RecordInProgress(ctx, handle)
}

// ErrHandleLost is what a tool's Resume wraps when the provider no longer
// knows the handle it was given.
var ErrHandleLost = idempotency.ErrHandleLost

// EditRule says what an approver may change in a call's arguments.
type EditRule int

// Edit rules.
const (
	// EditDefault, the zero value, is the rule a tool gets when it names
	// none: EditNoIncrease when it declares Amounts, EditAllowed otherwise.
	// The registry resolves it, so that a registered tool's Edits is one of
	// the others.
	EditDefault EditRule = iota
	// EditAllowed: any edit whose arguments match the tool's schema, amounts
	// included (declared explicitly for a tool with Amounts).
	EditAllowed
	// EditForbidden: the call is approved or rejected as proposed.
	EditForbidden
	// EditNoIncrease: an edit may not raise any of the tool's [Amount]
	// fields (for money, editing down is the common case), flip their sign,
	// add one the call did not propose, nor change their currency. An
	// amount that may be below zero may not grow in magnitude.
	EditNoIncrease
)

// String names the rule as `oncerun tools` and the docs spell it.
func (r EditRule) String() string {
	switch r {
	case EditDefault:
		return "default"
	case EditForbidden:
		return "forbidden"
	case EditNoIncrease:
		return "no-increase"
	}
	return "allowed"
}

// Amount names an argument that is a sum of money: Field, a top-level
// integer property in minor units (cents), and Currency, the top-level
// string property holding its ISO 4217 code. An amount is at least zero
// unless the schema gives Field a negative "minimum" (or
// "exclusiveMinimum"): a call with a negative amount is then an invalid
// call, whatever the rest of the schema says.
type Amount struct {
	Field    string
	Currency string
}

// OncePerRun reports whether the runtime refuses to execute a second call
// of this tool with the same canonical arguments in one run: by default
// for keyed and external tools, whose keys hold a step, not an intent.
// Natural tools keep their own constraint; reads have no effect.
func (t Tool) OncePerRun() bool {
	return !t.Repeatable && (t.Class == ClassKeyed || t.Class == ClassExternal)
}

// Guarantees a tool gives about its effect, as [Tool.Guarantee] reports
// them.
const (
	// GuaranteeOnce: the effect happens at most once per step (and, once a
	// step is done, exactly once).
	GuaranteeOnce = "once"
	// GuaranteeAtLeastOnce: the effect may be repeated, for a provider that
	// neither deduplicates by our key nor can be asked whether the effect
	// exists (e-mail): a person who answers not_applied about an unknown
	// outcome may be wrong.
	GuaranteeAtLeastOnce = "at-least-once"
)

// Local reports whether the tool's steps may run as local activities,
// inside the run's workflow task: a natural or keyed tool's effect is one
// short transaction in oncerun's database, and a read tool that declares
// InDatabase reads nothing else. A worker that dies in such a step loses
// its workflow task, and the worker that takes the run over runs the step
// again, which the dedup store replays (or which reads again).
func (t Tool) Local() bool {
	switch t.Class {
	case ClassNatural, ClassKeyed:
		return true
	case ClassRead:
		return t.InDatabase
	}
	return false
}

// Guarantee says what the tool promises about its effect.
func (t Tool) Guarantee() string {
	if t.Class == ClassExternal && t.PairedRead == "" && t.KeyLifetime == 0 {
		return GuaranteeAtLeastOnce
	}
	return GuaranteeOnce
}

// ErrNotApplied is what an external tool's error wraps when its effect
// provably did not happen: the request was never sent (a refused connection,
// a DNS failure, a request refused on our side), or the provider answered
// definitely that nothing happened (a 4xx such as "amount too large"). Such
// a failure frees the key for a retry; any other error leaves the outcome
// unknown until the paired read, or a person, resolves it.
var ErrNotApplied = errors.New("effect not applied")

// ErrUnstorable is what an external tool's error wraps when the provider
// answered, so that its effect was made, but the answer cannot be kept as
// it came (the MCP client read an integer beyond 2⁵³ as a double, say).
// The step then waits in needs_resolution for a person to say what the
// result was; it is never sent again blind. A result that Run returns is
// held to the same rules whatever the tool (a NUL in a string, a number
// beyond the range of a double, more than 1 MiB): an external call's step
// then waits for a person too, and a database tool's call fails for good,
// its effect rolled back.
var ErrUnstorable = idempotency.ErrUnstorable

// NotApplied wraps err as a failure before the effect ([ErrNotApplied]).
func NotApplied(err error) error {
	if err == nil || errors.Is(err, ErrNotApplied) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrNotApplied, err)
}

// BeforeSend returns a [NotApplied] error when ctx has ended, or when the
// moment past which an external call must not send ([idempotency.SendBy]:
// its key's lease may have expired by this process's clock, moved on by
// each renewal) has passed. An external tool's client calls it right before
// the effect's request leaves, so that a worker that was frozen past its
// lease sends nothing when it comes back: another worker may have taken the
// key over and sent already. Reads need no such check.
func BeforeSend(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return NotApplied(fmt.Errorf("not sent: %w", context.Cause(ctx)))
	}
	if by, ok := idempotency.SendBy(ctx); ok && !time.Now().Before(by) {
		return NotApplied(fmt.Errorf("not sent: the key's lease may have expired %s ago: %w",
			time.Since(by).Round(time.Millisecond), idempotency.ErrLeaseLost))
	}
	return nil
}

// ErrTypePermanent is the Temporal application error type of a [Permanent]
// failure.
const ErrTypePermanent = "ToolFailed"

// Permanent marks a tool's error as one that retrying cannot fix (a
// definite refusal): the step fails at once instead of being retried. It
// keeps err's classification: Permanent(NotApplied(err)) is a definite
// failure that left nothing behind.
func Permanent(err error) error {
	return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypePermanent, err)
}

// Outbox receives the follow-on messages of a natural or keyed tool's
// effect (an e-mail after a credit). A message is written in the effect's
// transaction, so it commits or vanishes with the effect, and the run
// delivers it after the step, through the named external tool, under a key
// derived from the step's.
type Outbox interface {
	// Add queues a call of the external tool with args (any JSON object
	// the tool's schema accepts).
	Add(ctx context.Context, tool string, args any) error
}

// Call is what a tool's Run receives.
type Call struct {
	// Key is the step's idempotency key: tenant, run, step and tool. An
	// external tool sends Key.String() as the provider's idempotency key.
	Key Key
	// Args are the arguments in canonical JSON, already checked against the
	// tool's schema.
	Args json.RawMessage
	// ArgsHash is the SHA-256 of Args, hex encoded.
	ArgsHash string
	// Tx is the transaction that holds the step's key, for natural and
	// keyed tools; nil for the others. Run must not commit or roll it back.
	Tx pgx.Tx
	// DB is the worker's pool, for read and external tools; nil for the
	// others, whose reads go through Tx.
	DB *pgxpool.Pool
	// Outbox queues follow-on messages in Tx, for natural and keyed tools;
	// nil for the others.
	Outbox Outbox
}

// Decode unmarshals the call's arguments into v.
func (c Call) Decode(v any) error {
	if err := json.Unmarshal(c.Args, v); err != nil {
		return fmt.Errorf("decode arguments of %s: %w", c.Key.Tool, err)
	}
	return nil
}

// Found reads a paired read's answer (see [Tool.PairedRead]): the boolean
// "found" of the JSON object it returned. An answer without one is an
// error naming read, the read tool.
func Found(read string, answer json.RawMessage) (bool, error) {
	var a struct {
		Found *bool `json:"found"`
	}
	if err := json.Unmarshal(answer, &a); err != nil || a.Found == nil {
		return false, fmt.Errorf("paired read %s returned no boolean \"found\" field", read)
	}
	return *a.Found, nil
}
