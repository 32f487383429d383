package idempotency

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// ErrUnresolved means an earlier attempt's outcome is unknown and could not
// be resolved: the tool has no paired read and the provider cannot be
// trusted to deduplicate a resend, or the paired read failed. Nothing was
// sent. See [UnresolvedError].
var ErrUnresolved = errors.New("outcome unknown and unresolved")

// UnresolvedError reports a key whose outcome nobody could tell. The key
// stays failed with an unknown outcome until [Store.Resolve] records what a
// person found.
type UnresolvedError struct {
	// Key is the key's string form.
	Key string
	// FirstAttemptAt is when the key was first claimed.
	FirstAttemptAt time.Time
	// Known says what is known of the outcome: the earlier failure, and why
	// the paired read did not settle it.
	Known string
}

// Error names the key and what is known.
func (e *UnresolvedError) Error() string {
	return fmt.Sprintf("%s: key %s (first attempt %s): %s", ErrUnresolved, e.Key,
		e.FirstAttemptAt.UTC().Format(time.RFC3339), e.Known)
}

// Is reports whether target is [ErrUnresolved].
func (e *UnresolvedError) Is(target error) bool { return target == ErrUnresolved }

// Default of [External.ReadTries].
const DefaultReadTries = 3

// External is an effect outside the database, for [Store.External].
type External struct {
	// Call makes the effect and returns its result as JSON (see
	// [CheckResult] for what the store keeps). It must send the
	// key as the provider's idempotency key where the provider takes one.
	// Its context ends when the lease is lost or may have expired by this
	// process's clock, and carries that moment for [SendBy]: a client
	// checks it right before the effect's request leaves
	// (tools.BeforeSend), so that a process that was frozen past its lease
	// does not send when it comes back, before its renewal or the cut-off
	// has run. This narrows the window rather than closing it: a process
	// frozen between the check and the write still sends, and the
	// provider's idempotency key and the fencing of our record are what
	// remain. The context's deadline is the caller's own.
	Call func(ctx context.Context) (json.RawMessage, error)
	// BeforeEffect reports that an error of Call provably happened before
	// the effect could begin (nothing was sent, or the provider answered
	// that nothing happened). Only such a failure frees the key for a blind
	// retry; every other error leaves the outcome unknown. Required.
	BeforeEffect func(error) bool
	// Read, when set, asks the provider whether the effect exists: found and
	// its result, or an error when the provider cannot tell now.
	Read func(ctx context.Context) (found bool, result json.RawMessage, err error)
	// ReadTries bounds the attempts of Read before the outcome is declared
	// unresolved. Default DefaultReadTries.
	ReadTries int
	// ReadBackoff is the pause before the second attempt of Read, doubled
	// after each. Default one second.
	ReadBackoff time.Duration
	// KeyLifetime is how long the provider keeps idempotency keys; zero
	// means it does not deduplicate by our key at all. Within it, an
	// unknown outcome of a tool with no paired read is resolved by sending
	// again under the same key (the provider returns the first result);
	// past it, and for a provider that does not deduplicate, the outcome
	// stays unresolved.
	KeyLifetime time.Duration
	// Renew is how often the lease is extended while Call runs, each time
	// by the claim's Lease. Default a third of the claim's Lease.
	Renew time.Duration
	// OnRenew is called after each renewal, and before each attempt of
	// Read (an activity's heartbeat).
	OnRenew func()
	// Resume, when set, follows an earlier attempt's effect still in
	// progress at the provider by the handle that attempt recorded
	// ([RecordInProgress]: an MCP server's task), to its end, instead of
	// asking Read or sending again: its result completes the key; an error
	// BeforeEffect accepts is a definite failure that made nothing; an
	// error wrapping [ErrHandleLost] (the provider no longer knows the
	// handle) leaves the outcome to Read, or to a person; any other error
	// leaves the outcome unknown, and the next attempt resumes again. It
	// runs under the lease, renewed, like Call, and may record a new
	// handle.
	Resume func(ctx context.Context, handle json.RawMessage) (json.RawMessage, error)
}

// ErrHandleLost is what [External.Resume] wraps when the effect's handle
// can no longer be followed: the provider does not know it any more (a
// task that expired, or a server that restarted and forgot it).
var ErrHandleLost = errors.New("the effect's handle can no longer be followed")

// ErrNoRecorder is what RecordInProgress answers outside a call of
// [Store.External] (a read, or a tool run on its own).
var ErrNoRecorder = errors.New("no external call records a handle here")

type handleRecorderKey struct{}

// RecordInProgress records, from within [External.Call] or
// [External.Resume], the handle of the call's effect in progress at the
// provider (a JSON document: the provider's task id, and what reaches it),
// on the call's key, under its lease: if the process dies before the
// effect ends, the next attempt follows the handle instead of sending the
// call again.
func RecordInProgress(ctx context.Context, handle json.RawMessage) error {
	rec, ok := ctx.Value(handleRecorderKey{}).(func(context.Context, json.RawMessage) error)
	if !ok {
		return ErrNoRecorder
	}
	return rec(ctx, handle)
}

// RecordingTo returns ctx whose [RecordInProgress] calls record: what a
// caller that keeps handles itself (a test) passes a tool's call.
func RecordingTo(ctx context.Context, record func(context.Context, json.RawMessage) error) context.Context {
	return context.WithValue(ctx, handleRecorderKey{}, record)
}

// withRecorder returns ctx recording handles on lease's key.
func (s *Store) withRecorder(ctx context.Context, lease *Lease) context.Context {
	return context.WithValue(ctx, handleRecorderKey{}, func(ctx context.Context, h json.RawMessage) error {
		return s.RecordHandle(detached(ctx), lease, h)
	})
}

// ExternalOutcome is what [Store.External] returns.
type ExternalOutcome struct {
	Outcome
	// Resolved is true when an earlier attempt's unknown outcome was found
	// applied by the paired read, and Result is the read's.
	Resolved bool
}

// External makes an effect outside the database under claim's key, owning
// the whole protocol so that no caller can get its order wrong:
//
//  1. Begin: a new key (or one whose earlier attempt failed before its
//     effect) is leased and committed in flight before anything is sent; a
//     completed key returns its stored result, Replayed; a live lease
//     elsewhere is [ErrInFlight].
//  2. An earlier attempt with an unknown outcome is resolved first: by
//     ext.Read (found: the key completes with the read's result; not found:
//     the effect is made under the same key), or, for a tool with no read,
//     by sending again while the provider still knows the key
//     (ext.KeyLifetime). Otherwise the key stays unknown and External
//     returns an [*UnresolvedError]: a person must find out.
//  3. ext.Call runs while the lease is renewed every ext.Renew; a lost
//     lease cancels it, and so does a lease that may have expired by this
//     process's clock (no renewal for the lease less one renewal interval).
//  4. Its result completes the key; its error fails it, before the effect
//     only when ext.BeforeEffect says so. Both are recorded even if ctx has
//     ended meanwhile. A result the store refuses ([CheckResult]), or an
//     error of Call that wraps [ErrUnstorable] (the provider answered, but
//     with something that cannot be kept exactly), means the effect was
//     made: ext.Read, when set, is asked for a result that can be kept;
//     otherwise, or when it has none, the key is left unresolved, with an
//     [*UnresolvedError] that says why. It is never sent again: a resend
//     would only get the same answer. A paired read's result is held to
//     the same rule as Call's.
func (s *Store) External(ctx context.Context, claim Claim, ext External) (ExternalOutcome, error) {
	if ext.Call == nil || ext.BeforeEffect == nil {
		return ExternalOutcome{}, fmt.Errorf("external %s: Call and BeforeEffect are required: %w", claim.Key, ErrInvalidClaim)
	}
	// The lease is held, by this process's clock, from before the statement
	// that grants it: the database's lease starts later than this.
	held := &heldSince{t: time.Now()}
	begun, err := s.Begin(ctx, claim)
	lease := begun.Lease
	var unknown *OutcomeUnknownError
	switch {
	case errors.As(err, &unknown):
		lease = unknown.Lease
		out, done, err := s.resolveUnknown(ctx, lease, held, unknown, ext)
		if done || err != nil {
			return out, err
		}
		// The effect provably did not happen, or the provider will answer a
		// resend with the first result: make it under the new lease.
	case err != nil:
		return ExternalOutcome{}, err
	case lease == nil:
		return ExternalOutcome{Outcome: begun.Outcome}, nil
	}
	return s.call(ctx, lease, held, ext)
}

// resolveUnknown decides what to do about an earlier attempt whose outcome
// is unknown, holding its new lease: done with the outcome when the read
// found the effect, an error when nothing can be decided, neither when the
// effect may be made.
func (s *Store) resolveUnknown(ctx context.Context, lease *Lease, held *heldSince, unknown *OutcomeUnknownError, ext External) (ExternalOutcome, bool, error) {
	a, err := s.prepare(lease.Claim)
	if err != nil {
		return ExternalOutcome{}, false, err
	}
	// What is known is the first failure's account; a failure recorded by
	// an earlier unresolved round carries it as it was, so that it does not
	// grow with every round.
	known := unknown.Error()
	if unknown.Previous != nil && unknown.Previous.Unresolved {
		known = unknown.Previous.Message
	}
	// An effect that was in progress at the provider and can no longer be
	// followed may still be in progress there: it is never sent again on
	// the provider's key, and a read that does not find it yet settles
	// nothing.
	inProgress := len(unknown.Handle) > 0
	if inProgress {
		lostWhy := "the effect's handle was recorded, and the tool cannot follow it"
		if ext.Resume != nil {
			out, done, why, err := s.resume(ctx, lease, held, unknown, ext, known)
			if done || err != nil {
				return out, done, err
			}
			lostWhy = why
		}
		known += "; " + lostWhy
		if ext.Read == nil {
			return ExternalOutcome{}, false, s.unresolved(ctx, lease, known,
				"the tool has no paired read, and the effect may still be in progress at the provider")
		}
	}
	if ext.Read == nil {
		age := unknown.Age
		if ext.KeyLifetime > 0 && age < ext.KeyLifetime {
			s.log.Info("unknown outcome: resending under the same key, which the provider still knows",
				a.fields(zap.Duration("key_age", age), zap.Duration("key_lifetime", ext.KeyLifetime))...)
			return ExternalOutcome{}, false, nil
		}
		why := "the tool has no paired read and its provider does not deduplicate by our key"
		if ext.KeyLifetime > 0 {
			why = fmt.Sprintf("the tool has no paired read and the provider forgets keys after %s; the key was first used %s ago",
				ext.KeyLifetime, age.Round(time.Second))
		}
		return ExternalOutcome{}, false, s.unresolved(ctx, lease, known, why)
	}
	found, result, err, lost := s.readUnderLease(ctx, lease, held, ext)
	if lost != nil {
		return ExternalOutcome{}, false, fmt.Errorf("resolve the unknown outcome of %s: %w", unknown.Key, lost)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		// The attempt's own deadline ended the read, not the provider:
		// the next attempt reads again.
		if ferr := s.Fail(detached(ctx), lease, Failure{Message: known, Unresolved: unknown.Previous != nil && unknown.Previous.Unresolved}); ferr != nil {
			err = errors.Join(err, fmt.Errorf("record the unknown outcome: %w", ferr))
		}
		return ExternalOutcome{}, false, fmt.Errorf("resolve the unknown outcome of %s: %w", unknown.Key, err)
	case err != nil:
		return ExternalOutcome{}, false, s.unresolved(ctx, lease, known, fmt.Sprintf("the paired read failed: %v", err))
	case found && CheckResult(result) != nil:
		reason, ask := unstorable(CheckResult(result))
		return ExternalOutcome{}, false, s.unresolved(ctx, lease, known, "the paired read found the effect, but "+reason+"; "+ask)
	case found:
		out, err := s.Complete(detached(ctx), lease, result)
		if err != nil {
			return ExternalOutcome{}, false, err
		}
		s.log.Info("unknown outcome resolved by the paired read: applied", a.fields()...)
		return ExternalOutcome{Outcome: out, Resolved: true}, true, nil
	}
	if inProgress {
		return ExternalOutcome{}, false, s.unresolved(ctx, lease, known,
			"the paired read does not find the effect, which may still be in progress at the provider")
	}
	s.log.Info("unknown outcome resolved by the paired read: not applied", a.fields()...)
	return ExternalOutcome{}, false, nil
}

// resume follows the handle an earlier attempt recorded to the effect's
// end, under lease: done with the outcome when it ended (its result
// completes the key; a definite failure fails it, before the effect); an
// error when the attempt must end with the outcome still unknown; neither,
// with lostWhy, when the handle can no longer be followed.
func (s *Store) resume(ctx context.Context, lease *Lease, held *heldSince, unknown *OutcomeUnknownError, ext External,
	known string) (out ExternalOutcome, done bool, lostWhy string, err error) {
	a, _ := s.prepare(lease.Claim)
	s.log.Info("unknown outcome: following the effect's handle", a.fields()...)
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lctx, stop := s.keepLease(rctx, lease, held, ext, cancel)
	result, rerr := ext.Resume(s.withRecorder(lctx, lease), unknown.Handle)
	stop()
	if cause := context.Cause(rctx); errors.Is(cause, ErrLeaseLost) {
		return ExternalOutcome{}, false, "", fmt.Errorf("follow the effect of %s: %w", unknown.Key, cause)
	}
	unresolved := unknown.Previous != nil && unknown.Previous.Unresolved
	switch {
	case rerr == nil:
		if cerr := CheckResult(result); cerr != nil {
			o, err := s.settleUnstorable(ctx, lease, held, ext, cerr)
			return o, true, "", err
		}
		o, err := s.Complete(detached(ctx), lease, result)
		if err != nil {
			return ExternalOutcome{}, false, "", err
		}
		s.log.Info("unknown outcome settled: the effect's handle led to its result", a.fields()...)
		return ExternalOutcome{Outcome: o}, true, "", nil
	case errors.Is(rerr, ErrHandleLost):
		s.log.Warn("the effect's handle can no longer be followed", a.fields(zap.Error(rerr))...)
		return ExternalOutcome{}, false, rerr.Error(), nil
	case ext.BeforeEffect(rerr):
		// The provider answered that the effect failed: a definite
		// failure, which made nothing.
		if ferr := s.Fail(detached(ctx), lease, Failure{Message: rerr.Error(), BeforeEffect: true}); ferr != nil {
			rerr = errors.Join(rerr, fmt.Errorf("record failure: %w", ferr))
		}
		return ExternalOutcome{}, true, "", rerr
	}
	// Not ended, or not readable now: the next attempt follows it again.
	if ferr := s.Fail(detached(ctx), lease, Failure{Message: known, Unresolved: unresolved}); ferr != nil {
		rerr = errors.Join(rerr, fmt.Errorf("record the unknown outcome: %w", ferr))
	}
	return ExternalOutcome{}, false, "", fmt.Errorf("follow the effect of %s: %w", unknown.Key, rerr)
}

// readUnderLease runs the paired read, renewing the lease meanwhile, as
// during Call: the read may take long (ReadTries, with backoff), and
// another caller could otherwise take the key over and send while this one
// is about to. lost is the ErrLeaseLost that ended the read, if one did.
func (s *Store) readUnderLease(ctx context.Context, lease *Lease, held *heldSince, ext External) (found bool, result json.RawMessage, err, lost error) {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lctx, stop := s.keepLease(rctx, lease, held, ext, cancel)
	found, result, err = s.read(lctx, ext)
	stop()
	if cause := context.Cause(rctx); errors.Is(cause, ErrLeaseLost) {
		return false, nil, err, cause
	}
	return found, result, err, nil
}

// read runs ext.Read up to ext.ReadTries times.
func (s *Store) read(ctx context.Context, ext External) (found bool, result json.RawMessage, err error) {
	tries := ext.ReadTries
	if tries <= 0 {
		tries = DefaultReadTries
	}
	backoff := ext.ReadBackoff
	if backoff <= 0 {
		backoff = time.Second
	}
	for i := range tries {
		if i > 0 {
			select {
			case <-ctx.Done():
				return false, nil, errors.Join(err, ctx.Err())
			case <-time.After(backoff):
			}
			backoff *= 2
		}
		if ext.OnRenew != nil {
			ext.OnRenew()
		}
		if found, result, err = ext.Read(ctx); err == nil {
			return found, result, nil
		}
	}
	return false, nil, fmt.Errorf("%d attempts: %w", tries, err)
}

// unresolved fails lease with what is known, leaving the outcome unknown,
// and returns the UnresolvedError for the caller, which says why nothing
// settled it.
func (s *Store) unresolved(ctx context.Context, lease *Lease, known, why string) error {
	uerr := &UnresolvedError{Key: lease.Claim.Key.String(), FirstAttemptAt: lease.FirstAttemptAt, Known: known + "; " + why}
	if ferr := s.Fail(detached(ctx), lease, Failure{Message: known, Unresolved: true}); ferr != nil {
		return errors.Join(uerr, fmt.Errorf("record the unknown outcome: %w", ferr))
	}
	return uerr
}

// unstorable says why a result that came back was not recorded, and
// what a person is asked instead.
func unstorable(err error) (reason, ask string) {
	var ue *UnstorableError
	reason = err.Error()
	if errors.As(err, &ue) {
		reason = ue.Reason + "; the answer: " + ue.Excerpt
	}
	return "its result cannot be stored: " + reason,
		"a person must answer applied with a result that can be stored, or not_applied if the provider shows no effect"
}

// call runs ext.Call under lease, renewing it, and records the outcome.
func (s *Store) call(ctx context.Context, lease *Lease, held *heldSince, ext External) (ExternalOutcome, error) {
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lctx, stop := s.keepLease(cctx, lease, held, ext, cancel)
	result, err := ext.Call(s.withRecorder(lctx, lease))
	stop()
	if err == nil {
		err = CheckResult(result)
	}
	if errors.Is(err, ErrUnstorable) {
		return s.settleUnstorable(ctx, lease, held, ext, err)
	}
	if err != nil {
		f := Failure{Message: err.Error(), BeforeEffect: ext.BeforeEffect(err)}
		if cause := context.Cause(cctx); cause != nil && errors.Is(cause, ErrLeaseLost) && !errors.Is(err, ErrLeaseLost) {
			err = withCause(err, cause)
		}
		if ferr := s.Fail(detached(ctx), lease, f); ferr != nil {
			err = errors.Join(err, fmt.Errorf("record failure: %w", ferr))
		}
		return ExternalOutcome{}, err
	}
	// The effect happened: record it even if the attempt's deadline has just
	// passed, or the next attempt would have to resolve it again.
	out, err := s.Complete(detached(ctx), lease, result)
	return ExternalOutcome{Outcome: out}, err
}

// withCause is err, wrapping cause too; cause is named in the message
// unless err's says it already (an HTTP client's error quotes its
// context's cause without wrapping it).
func withCause(err, cause error) error {
	if strings.Contains(err.Error(), cause.Error()) {
		return causeOf{err: err, cause: cause}
	}
	return fmt.Errorf("%w (%w)", err, cause)
}

// causeOf is an error whose message is err's and which wraps cause too.
type causeOf struct{ err, cause error }

func (e causeOf) Error() string   { return e.err.Error() }
func (e causeOf) Unwrap() []error { return []error{e.err, e.cause} }

// settleUnstorable settles a call that answered, so that its effect was
// made, with an answer the store refuses (err). The tool's paired read,
// when it has one, may tell the effect's result in a form that can be
// kept; otherwise, or when it cannot, the key is left unresolved for a
// person. A resend would only get the same answer, so none is made.
func (s *Store) settleUnstorable(ctx context.Context, lease *Lease, held *heldSince, ext External, err error) (ExternalOutcome, error) {
	reason, ask := unstorable(err)
	known := "the call answered, so its effect was made, but " + reason
	if ext.Read == nil {
		return ExternalOutcome{}, s.unresolved(ctx, lease, known, ask)
	}
	found, result, err, lost := s.readUnderLease(ctx, lease, held, ext)
	switch {
	case lost != nil:
		return ExternalOutcome{}, fmt.Errorf("settle the answer of %s: %w", lease.Claim.Key, lost)
	case err != nil:
		return ExternalOutcome{}, s.unresolved(ctx, lease, known, fmt.Sprintf("the paired read failed: %v; %s", err, ask))
	case !found:
		return ExternalOutcome{}, s.unresolved(ctx, lease, known, "the paired read did not find the effect; "+ask)
	case CheckResult(result) != nil:
		readReason, _ := unstorable(CheckResult(result))
		return ExternalOutcome{}, s.unresolved(ctx, lease, known, "the paired read found the effect, but "+readReason+"; "+ask)
	}
	out, err := s.Complete(detached(ctx), lease, result)
	if err != nil {
		return ExternalOutcome{}, err
	}
	a, _ := s.prepare(lease.Claim)
	s.log.Info("an answer that cannot be stored settled by the paired read", a.fields()...)
	return ExternalOutcome{Outcome: out, Resolved: true}, nil
}

// keepLease extends lease every ext.Renew, counted from the last renewal
// (or the grant, held), until stop is called. The lease may have expired,
// by this process's clock, once the last renewal is older than the lease
// less one renewal interval: at that moment the call is cancelled with
// ErrLeaseLost, whether a renewal failed meanwhile (the database is away)
// or the process was frozen, and the returned context carries that moment
// for SendBy, moved on by each renewal, so that a client can refuse to send
// past it even before the cancellation is seen. A renewal that finds the
// lease taken over cancels the call with ErrLeaseLost at once; one that
// fails for another reason is tried again half an interval later.
//
// The context's own deadline stays the caller's: a client's timeout on a
// slow call is unaffected by the lease.
func (s *Store) keepLease(ctx context.Context, lease *Lease, held *heldSince, ext External, cancel context.CancelCauseFunc) (context.Context, func()) {
	length := cmp.Or(lease.Claim.Lease, s.cfg.Lease)
	every := ext.Renew
	if every <= 0 || every > length/2 {
		every = length / 3
	}
	giveUp := length - every
	cutOff := func() {
		cancel(fmt.Errorf("no renewal for %s, and the lease may have expired: %w",
			time.Since(held.get()).Round(time.Millisecond), ErrLeaseLost))
	}
	timer := time.AfterFunc(time.Until(held.get().Add(giveUp)), cutOff)
	done := make(chan struct{})
	finished := make(chan struct{})
	next := held.get().Add(every)
	go func() {
		defer close(finished)
		defer timer.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-time.After(time.Until(next)):
			}
			// The call may have ended while the timer ran out.
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			default:
			}
			sent := time.Now()
			err := s.Renew(ctx, lease)
			switch {
			case errors.Is(err, ErrLeaseLost):
				cancel(err)
				return
			case err != nil:
				a, _ := s.prepare(lease.Claim)
				s.log.Warn("lease renewal failed; trying again", a.fields(zap.Error(err))...)
				next = sent.Add(every / 2)
			default:
				held.set(sent)
				next = sent.Add(every)
				timer.Reset(time.Until(sent.Add(giveUp)))
				if ext.OnRenew != nil {
					ext.OnRenew()
				}
			}
		}
	}()
	return context.WithValue(ctx, sendByKey{}, func() time.Time { return held.get().Add(giveUp) }), func() {
		close(done)
		<-finished
	}
}

// sendByKey is the context key of SendBy's moment.
type sendByKey struct{}

// SendBy returns the moment past which an external call running under
// [Store.External] must not send its effect: its key's lease may have
// expired by then, by this process's clock, and another worker may have
// taken the key over. It moves on with each renewal of the lease. ok is
// false outside such a call.
func SendBy(ctx context.Context) (t time.Time, ok bool) {
	f, ok := ctx.Value(sendByKey{}).(func() time.Time)
	if !ok {
		return time.Time{}, false
	}
	return f(), true
}

// WithSendBy returns ctx carrying t as the moment [SendBy] reports: for a
// caller that runs an effect under a lease of its own, and for tests of
// clients.
func WithSendBy(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, sendByKey{}, func() time.Time { return t })
}

// heldSince is the time, by this process's clock, from which a lease is
// known to be held: taken before the statement that granted or last
// renewed it was sent.
type heldSince struct {
	mu sync.Mutex
	t  time.Time
}

func (h *heldSince) get() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.t
}

func (h *heldSince) set(t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.t = t
}

// renewSQL extends a lease its owner still holds.
const renewSQL = `
UPDATE idempotency_keys
SET lease_expiry = statement_timestamp() + $5::interval,
    expires_at = greatest(expires_at, statement_timestamp() + $5::interval)
WHERE tenant = $1 AND key = $2 AND state = 'in_flight' AND lease_owner = $3 AND attempts = $4
RETURNING lease_expiry`

// Renew extends l's lease by its claim's Lease from now, by the database's
// clock, and updates l.Expiry. It returns [ErrLeaseLost] if l no longer
// holds the key.
func (s *Store) Renew(ctx context.Context, l *Lease) error {
	a, err := s.prepare(l.Claim)
	if err != nil {
		return err
	}
	var expiry time.Time
	err = s.pool.QueryRow(ctx, renewSQL, a.Key.Tenant, a.key, l.Owner, l.Attempt, a.lease).Scan(&expiry)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("renew %s as %s attempt %d: %w", a.key, l.Owner, l.Attempt, ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("renew %s: %w", a.key, err)
	}
	l.Expiry = expiry
	return nil
}

// recordTimeout bounds the writes that record an outcome after the
// caller's own context may have ended.
const recordTimeout = 10 * time.Second

// detached is ctx without its cancellation, bounded by recordTimeout.
func detached(ctx context.Context) context.Context {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	context.AfterFunc(c, cancel)
	return c
}
