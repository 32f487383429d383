package idempotency

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

var (
	// ErrInvalidClaim is returned, wrapped, for a claim whose key or arguments
	// hash is malformed. Nothing was written.
	ErrInvalidClaim = errors.New("invalid claim")

	// ErrKeyReuse means the key was first claimed with other arguments. It is
	// a defect in whatever derived the key, never a replay, and retrying it
	// cannot succeed. See [KeyReuseError].
	ErrKeyReuse = errors.New("idempotency key reused with different arguments")

	// ErrInFlight means another caller holds a live lease on the key. The
	// effect was not attempted; retry after a backoff. See [InFlightError].
	ErrInFlight = errors.New("idempotency key in flight")

	// ErrOutcomeUnknown means an earlier attempt may or may not have taken
	// effect: its lease expired, or it failed after the effect may have begun.
	// See [OutcomeUnknownError], which carries the lease the caller now holds.
	ErrOutcomeUnknown = errors.New("outcome of an earlier attempt unknown")

	// ErrContended means the key kept changing under a claim (taken over or
	// pruned) for several rounds in a row. Nothing was applied; retry later.
	ErrContended = errors.New("idempotency key kept changing while being claimed")

	// ErrLeaseLost means a Complete or Fail came from an owner whose lease was
	// taken over (or whose key is no longer in flight). Nothing was written.
	ErrLeaseLost = errors.New("lease lost")
)

// KeyReuseError reports a key claimed again with different arguments.
type KeyReuseError struct {
	// Key is the key's string form.
	Key string
	// StoredHash is the arguments hash the key was first claimed with.
	StoredHash string
	// ProposedHash is the arguments hash of the refused claim.
	ProposedHash string
}

// Error names the key and both hashes.
func (e *KeyReuseError) Error() string {
	return fmt.Sprintf("%s: key %s was claimed with args hash %s, not %s",
		ErrKeyReuse, e.Key, e.StoredHash, e.ProposedHash)
}

// Is reports whether target is [ErrKeyReuse].
func (e *KeyReuseError) Is(target error) bool { return target == ErrKeyReuse }

// InFlightError reports a key whose lease another owner holds.
type InFlightError struct {
	// Key is the key's string form.
	Key string
	// Owner is the store owner holding the lease.
	Owner string
	// LeaseExpiry is when the lease may be taken over, by the database's clock.
	LeaseExpiry time.Time
}

// Error names the key, its owner and the lease's expiry.
func (e *InFlightError) Error() string {
	return fmt.Sprintf("%s: key %s is held by %s until %s",
		ErrInFlight, e.Key, e.Owner, e.LeaseExpiry.UTC().Format(time.RFC3339Nano))
}

// Is reports whether target is [ErrInFlight].
func (e *InFlightError) Is(target error) bool { return target == ErrInFlight }

// OutcomeUnknownError reports a key whose earlier attempt has an unknown
// outcome. When returned by [Store.Begin], Lease is the lease the caller now
// holds: it must find out whether the effect happened (the tool's paired read,
// or the provider's idempotency key) and then [Store.Complete] the lease with
// the effect's result, run the effect under it, or [Store.Fail] it. When
// returned by [Store.Do], Lease is nil: a transactional effect cannot resolve
// an external one.
type OutcomeUnknownError struct {
	// Key is the key's string form.
	Key string
	// Lease is the lease now held by the caller, or nil.
	Lease *Lease
	// Previous is the failure the earlier attempt recorded, or nil if its lease
	// expired without a word.
	Previous *Failure
	// FirstAttemptAt is when the key was first claimed, by the database's
	// clock: a provider that keeps idempotency keys for less than the time
	// since then has forgotten ours.
	FirstAttemptAt time.Time
	// Age is the time since FirstAttemptAt, by the database's clock.
	Age time.Duration
	// Handle is what an earlier attempt recorded of its effect in progress
	// at the provider ([Store.RecordHandle]), or nil.
	Handle json.RawMessage
}

// Error names the key and what is known of the earlier attempt.
func (e *OutcomeUnknownError) Error() string {
	if e.Previous != nil {
		return fmt.Sprintf("%s: key %s: earlier attempt failed after the effect may have begun: %s",
			ErrOutcomeUnknown, e.Key, e.Previous.Message)
	}
	return fmt.Sprintf("%s: key %s: earlier attempt's lease expired without an outcome", ErrOutcomeUnknown, e.Key)
}

// Is reports whether target is [ErrOutcomeUnknown].
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }
