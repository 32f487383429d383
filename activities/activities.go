package activities

import (
	"context"
	"time"

	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/agents"
	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/telemetry"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/tools"
)

// Application error types of the activities' failures, as Temporal reports
// them. All but ErrTypeInFlight and ErrTypeToolFailed are non-retryable.
const (
	ErrTypeKeyReuse    = "KeyReuse"
	ErrTypeInvalidArgs = "InvalidArgs"
	ErrTypeUnknownTool = "UnknownTool"
	// ErrTypeToolElsewhere: the step's tool is not registered on the
	// worker that took the attempt, and another worker of the task queue
	// may have it (a rolling deploy): retried a few times, then
	// ErrTypeUnknownTool.
	ErrTypeToolElsewhere  = "ToolElsewhere"
	ErrTypeUnknownPlanner = "UnknownPlanner"
	ErrTypePlanner        = "PlannerFailed"
	ErrTypeInFlight       = "InFlight"
	ErrTypeOutcomeUnknown = "OutcomeUnknown"
	ErrTypeToolFailed     = "ToolFailed"
	// ErrTypeUnstorable: a value was refused as data, by the store's
	// rules for results (idempotency.CheckResult: a NUL character, a number
	// that cannot be read back) or by PostgreSQL (not UTF-8, a violated
	// check): the same value fails every time.
	ErrTypeUnstorable = "Unstorable"
)

// Activities carries what the activities need. Register a pointer to it on
// a worker.
type Activities struct {
	// Pool is the worker's PostgreSQL pool.
	Pool *pgxpool.Pool
	// Store is the dedup store every keyed call goes through.
	Store *Store
	// Tools is the worker's validated tool registry.
	Tools *tools.Registry
	// Planners maps a planner name, as runs spell it, to the planner.
	Planners map[string]Planner
	// Agents are the deployment's sub-agents, which a planner sees as
	// tools (agent_<name>) and a run starts as child runs. Nil: none.
	Agents *AgentSet
	// Log receives one line per tool call outcome. Default: none.
	Log *zap.Logger
	// Metrics counts tool calls. Nil counts nothing.
	Metrics *Metrics
	// DeadlineWarnings are how long before an approval deadline a pending
	// step is warned about, once each. Nil: DefaultDeadlineWarnings; an
	// empty, non-nil slice warns never.
	DeadlineWarnings []time.Duration
	// Warner delivers deadline warnings beyond the log line (a metric, the
	// alert webhook). Nil: the log line only.
	Warner DeadlineWarner
	// SpendAlerts delivers the alerts at 80% and 100% of a spend cap
	// beyond the log line (the alert webhook). Nil: the log line only.
	SpendAlerts SpendAlerter

	// liveHoldFor, when set (by tests), stands for liveHold.
	liveHoldFor time.Duration
}

// AgentSet is a deployment's checked sub-agents (see docs/agent-runs.md).
type AgentSet = agents.Set

// log is the activities' logger, with the trace_id and span_id of ctx's
// span on every line.
func (a *Activities) log(ctx context.Context) *zap.Logger {
	if a.Log == nil {
		return zap.NewNop()
	}
	return telemetry.Logger(ctx, a.Log)
}

// callFields are the fields of every log line about a tool call.
func callFields(k keys.Key, extra ...zap.Field) []zap.Field {
	return append([]zap.Field{
		zap.String("tenant", k.Tenant),
		zap.String("run_id", k.RunID),
		zap.Int64("step", k.Step),
		zap.String("tool", k.Tool),
		zap.String("key", k.String()),
	}, extra...)
}

// temporalError maps a dedup store or registry error to the Temporal error
// that makes the right retry decision.
func temporalError(err error) error {
	var app *temporal.ApplicationError
	switch {
	case errors.As(err, &app):
		if top, ok := err.(*temporal.ApplicationError); ok {
			return top
		}
		// Temporal reads the type and retryability of the outermost error
		// only: a wrapped application error (a tool's Permanent error under
		// the store's context) would turn into a retryable one. Restate them
		// on top, keeping the whole message but for the inner error's own
		// type and retryability, which would read twice.
		msg := strings.Replace(err.Error(), app.Error(), app.Message(), 1)
		if app.NonRetryable() {
			return temporal.NewNonRetryableApplicationError(msg, app.Type(), app)
		}
		return temporal.NewApplicationErrorWithCause(msg, app.Type(), app)
	case errors.Is(err, idempotency.ErrKeyReuse):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeKeyReuse, err)
	case errors.Is(err, tools.ErrInvalidCall), errors.Is(err, keys.ErrInvalidArgs),
		errors.Is(err, keys.ErrInvalidKey), errors.Is(err, idempotency.ErrInvalidClaim):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidArgs, err)
	case errors.Is(err, idempotency.ErrOutcomeUnknown):
		// Only an external call's key can be in this state; a transactional
		// tool meeting it is a key shared across classes, for a human.
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeOutcomeUnknown, err)
	case errors.Is(err, idempotency.ErrInFlight):
		return temporal.NewApplicationErrorWithOptions(err.Error(), ErrTypeInFlight,
			temporal.ApplicationErrorOptions{Cause: err, NextRetryDelay: inFlightRetry(err)})
	}
	return fmt.Errorf("%w", err)
}

// inFlightRetry is when a step that met another worker's live lease tries
// again: just after that lease expires (by this process's clock, which the
// margin allows to differ from the database's a little), so that a step
// whose worker was cut off is taken over as soon as it may be, and not at
// the retry policy's next backoff, which by then may be tens of seconds
// away. Zero, the retry policy's own backoff, when the expiry is unknown.
func inFlightRetry(err error) time.Duration {
	var e *idempotency.InFlightError
	if !errors.As(err, &e) || e.LeaseExpiry.IsZero() {
		return 0
	}
	return min(max(time.Until(e.LeaseExpiry)+inFlightMargin, inFlightMargin), time.Minute)
}

// inFlightMargin is added to a lease's remaining time before a step tries
// to take it over.
const inFlightMargin = 500 * time.Millisecond

// dataError is temporalError for work whose writes all roll back when it
// fails (a transaction of our own database): when PostgreSQL refused the
// values themselves, the same values fail every time, so the failure is
// non-retryable (ErrTypeUnstorable) rather than retried for the whole retry
// horizon. An external call must not use it: there the effect may have
// happened before our write failed, and the outcome is unknown, not failed.
func dataError(err error) error {
	if unstorable(err) {
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeUnstorable, err)
	}
	return temporalError(err)
}

// unstorable reports an error that refuses the data itself: a result the
// store refuses ([idempotency.ErrUnstorable]), or an error of PostgreSQL's,
// a data exception (class 22: an invalid byte sequence, a NUL character, a
// value out of range), a NOT NULL or a CHECK violation. Retrying the same
// values cannot succeed.
func unstorable(err error) bool {
	if errors.Is(err, idempotency.ErrUnstorable) {
		return true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return strings.HasPrefix(pgErr.Code, "22") || pgErr.Code == "23502" || pgErr.Code == "23514"
}

// cleanError returns a tool's error as it may travel: unchanged when its
// text is valid UTF-8, as it nearly always is; otherwise restated with its
// text escaped (\xff for a byte that is not UTF-8), still matching what it
// matched (tools.ErrNotApplied, idempotency.ErrUnstorable) and as permanent
// as it was. Temporal carries failures as protocol buffers, which refuse
// such text: the attempt's failure would be lost, and the attempt retried
// blind. A provider's or a server's answer quoted in an error can hold
// anything.
func cleanError(err error) error {
	text := err.Error()
	if utf8.ValidString(text) {
		return err
	}
	clean := &escapedError{text: untrusted.Escape(text), err: err}
	var app *temporal.ApplicationError
	if errors.As(err, &app) && app.NonRetryable() {
		return temporal.NewNonRetryableApplicationError(clean.text, app.Type(), clean)
	}
	return clean
}

// escapedError is an error restated with its text escaped. It matches the
// sentinels the original matched, but unwraps to nothing, so that no
// unescaped text travels with it.
type escapedError struct {
	text string
	err  error
}

func (e *escapedError) Error() string { return e.text }

func (e *escapedError) Is(target error) bool { return errors.Is(e.err, target) }
