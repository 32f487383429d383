package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// ErrResolvedOtherwise means a person's answer contradicts what the store
// already holds: not_applied for a key that completed. Nothing was written.
var ErrResolvedOtherwise = errors.New("the key's outcome is already known otherwise")

// Answer is what a person found out about an effect whose outcome was
// unknown.
type Answer struct {
	// Applied says the effect happened; Result is then its result (JSON;
	// default null). Otherwise it provably did not, and the key may be
	// claimed again under the same key.
	Applied bool
	Result  json.RawMessage
	// By names the person, and Note says how they know.
	By   string
	Note string
}

// resolveAppliedSQL completes a key whose outcome was unknown (failed after
// the effect may have begun, or in flight with an expired lease), or
// inserts it completed when it is gone.
const resolveAppliedSQL = `
INSERT INTO idempotency_keys AS k
    (tenant, key, run_id, step, tool, state, args_hash, result, completed_at, expires_at)
VALUES ($1, $2, $3, $4, $5, 'completed', $6, $7, statement_timestamp(), statement_timestamp() + $8::interval)
ON CONFLICT (tenant, key) DO UPDATE
SET state = 'completed', result = excluded.result, failure = NULL, lease_owner = NULL, lease_expiry = NULL,
    completed_at = excluded.completed_at, expires_at = greatest(k.expires_at, excluded.expires_at)
WHERE k.args_hash = excluded.args_hash
  AND (k.state = 'failed' OR (k.state = 'in_flight' AND k.lease_expiry < statement_timestamp()))
RETURNING result`

// resolveNotAppliedSQL marks a key whose outcome was unknown as failed
// before its effect, so that the next claim makes the effect again.
const resolveNotAppliedSQL = `
UPDATE idempotency_keys
SET state = 'failed', failure = $4, lease_owner = NULL, lease_expiry = NULL, handle = NULL
WHERE tenant = $1 AND key = $2 AND args_hash = $3
  AND (state = 'failed' OR (state = 'in_flight' AND lease_expiry < statement_timestamp()))`

// Resolve records a person's answer about claim's key, whose earlier
// attempt's outcome was unknown. Applied completes the key with the answer's
// result (a key already completed keeps its stored result, which is
// returned); not applied frees it for a new attempt under the same key. A
// key in flight under a live lease is [ErrInFlight]: its attempt is still
// running. Not applied for a completed key is [ErrResolvedOtherwise].
func (s *Store) Resolve(ctx context.Context, claim Claim, ans Answer) (Outcome, error) {
	a, err := s.prepare(claim)
	if err != nil {
		return Outcome{}, err
	}
	fields := a.fields(zap.Bool("applied", ans.Applied), zap.String("by", ans.By), zap.String("note", ans.Note))
	if ans.Applied {
		result, err := storedResult(ans.Result)
		if err != nil {
			return Outcome{}, fmt.Errorf("resolve %s: %w", a.key, err)
		}
		var stored json.RawMessage
		err = s.pool.QueryRow(ctx, resolveAppliedSQL, a.Key.Tenant, a.key, a.Key.RunID, a.Key.Step, a.Key.Tool,
			a.ArgsHash, result, a.retention).Scan(&stored)
		if err == nil {
			s.log.Info("unknown outcome resolved by a person: applied", fields...)
			return Outcome{Result: stored}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return Outcome{}, fmt.Errorf("resolve %s: %w", a.key, err)
		}
		return s.resolvedAlready(ctx, a, ans)
	}
	f := Failure{Message: fmt.Sprintf("resolved by %s: not applied (%s)", ans.By, ans.Note), BeforeEffect: true}
	tag, err := s.pool.Exec(ctx, resolveNotAppliedSQL, a.Key.Tenant, a.key, a.ArgsHash, f.stored())
	if err != nil {
		return Outcome{}, fmt.Errorf("resolve %s: %w", a.key, err)
	}
	if tag.RowsAffected() == 1 {
		s.log.Info("unknown outcome resolved by a person: not applied", fields...)
		return Outcome{}, nil
	}
	return s.resolvedAlready(ctx, a, ans)
}

// resolvedAlready explains why an answer changed nothing.
func (s *Store) resolvedAlready(ctx context.Context, a claimArgs, ans Answer) (Outcome, error) {
	row, found, err := loadRow(ctx, s.pool, a)
	switch {
	case err != nil:
		return Outcome{}, fmt.Errorf("resolve %s: %w", a.key, err)
	case !found && !ans.Applied:
		// Nothing to free: the next claim starts afresh.
		return Outcome{}, nil
	case !found:
		return Outcome{}, fmt.Errorf("resolve %s: the key vanished while being resolved: %w", a.key, ErrContended)
	case row.ArgsHash != a.ArgsHash:
		return Outcome{}, &KeyReuseError{Key: a.key, StoredHash: row.ArgsHash, ProposedHash: a.ArgsHash}
	case row.State == StateCompleted && ans.Applied:
		return Outcome{Result: row.Result, Replayed: true}, nil
	case row.State == StateCompleted:
		return Outcome{}, fmt.Errorf("resolve %s as not applied: the key completed: %w", a.key, ErrResolvedOtherwise)
	case row.State == StateInFlight:
		return Outcome{}, inFlightError(a, row)
	}
	return Outcome{}, fmt.Errorf("resolve %s: the key changed while being resolved: %w", a.key, ErrContended)
}

// KeyInfo is what [Store.Peek] reads of a key.
type KeyInfo struct {
	State State
	// Failure is the last attempt's failure, if the key is failed.
	Failure *Failure
	// FirstAttemptAt is when the key was first claimed.
	FirstAttemptAt time.Time
	// LeaseLive is true while an attempt holds the key.
	LeaseLive bool
	// Handle is what an attempt recorded of its effect in progress at the
	// provider ([RecordInProgress]), or nil.
	Handle json.RawMessage
}

// OutcomeUnknown reports whether an attempt may have made the key's
// effect without its outcome being recorded: the key is failed after the
// effect may have begun, or in flight.
func (k KeyInfo) OutcomeUnknown() bool {
	switch k.State {
	case StateInFlight:
		return true
	case StateFailed:
		return k.Failure == nil || !k.Failure.BeforeEffect
	}
	return false
}

// Peek reads claim's key without changing it; found is false when there is
// no row.
func (s *Store) Peek(ctx context.Context, claim Claim) (info KeyInfo, found bool, err error) {
	a, err := s.prepare(claim)
	if err != nil {
		return KeyInfo{}, false, err
	}
	row, found, err := loadRow(ctx, s.pool, a)
	if err != nil || !found {
		return KeyInfo{}, found, err
	}
	return KeyInfo{State: row.State, Failure: row.Failure, FirstAttemptAt: row.CreatedAt,
		LeaseLive: row.State == StateInFlight && !row.LeaseExpired, Handle: row.Handle}, true, nil
}
