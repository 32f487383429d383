package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Begun is what [Store.Begin] returns.
type Begun struct {
	// Outcome is set, with Replayed true, when the key was already completed:
	// the effect must not be attempted again.
	Outcome Outcome
	// Lease is set when the caller now holds the key and must attempt the
	// effect, then [Store.Complete] or [Store.Fail] the lease.
	Lease *Lease
}

// Begin claims claim's key for an effect outside the database. It commits an
// in-flight row with a lease before returning, so the claim survives a crash
// of the caller.
//
//   - A new key, or one whose earlier attempt failed provably before its
//     effect: the caller gets a Lease.
//   - A completed key: the stored result, Replayed.
//   - A key whose lease is live: [ErrInFlight]; retry after a backoff.
//   - A key whose lease expired, or whose earlier attempt failed after the
//     effect may have begun: the caller takes the lease over and gets an
//     [*OutcomeUnknownError] carrying it. The caller must find out whether
//     the effect happened before doing anything else; Begin never hands out
//     a silent re-run.
//   - The key claimed with other arguments: [ErrKeyReuse].
func (s *Store) Begin(ctx context.Context, claim Claim) (Begun, error) {
	a, err := s.prepare(claim)
	if err != nil {
		return Begun{}, err
	}
	for range maxClaimTries {
		b, again, err := s.beginOnce(ctx, a)
		if !again {
			return b, err
		}
	}
	return Begun{}, fmt.Errorf("claim %s: %w", a.key, ErrContended)
}

func (s *Store) beginOnce(ctx context.Context, a claimArgs) (b Begun, again bool, err error) {
	lease, err := insertClaim(ctx, s.pool, a, s.cfg.Owner)
	if err != nil {
		return Begun{}, false, err
	}
	if lease != nil {
		s.debug("tool call claimed", a, lease.Attempt)
		return Begun{Lease: lease}, false, nil
	}
	d, row, again, err := s.meet(ctx, s.pool, a)
	if err != nil || again {
		return Begun{}, again, err
	}
	if d == decideReplay {
		return Begun{Outcome: Outcome{Result: row.Result, Replayed: true}}, false, nil
	}
	lease, err = takeover(ctx, s.pool, a, s.cfg.Owner, row.Attempts)
	if err != nil || lease == nil {
		return Begun{}, err == nil, err
	}
	if d == decideReclaim {
		s.log.Info("tool call reclaimed after a failure before its effect", a.fields(zap.Int32("attempt", lease.Attempt))...)
		return Begun{Lease: lease}, false, nil
	}
	err = &OutcomeUnknownError{Key: a.key, Lease: lease, Previous: row.Failure, FirstAttemptAt: row.CreatedAt,
		Age: time.Duration(row.AgeSeconds * float64(time.Second)), Handle: row.Handle}
	s.log.Warn("lease taken over; earlier outcome unknown", a.fields(zap.Int32("attempt", lease.Attempt), zap.Error(err))...)
	return Begun{}, false, err
}

// Complete records result as the outcome of l's effect. It returns the
// outcome as stored, [ErrLeaseLost] if l no longer holds the key (its
// lease was taken over after it expired), or [ErrUnstorable] for a result
// the store refuses ([CheckResult]); then nothing is written.
func (s *Store) Complete(ctx context.Context, l *Lease, result json.RawMessage) (Outcome, error) {
	a, err := s.prepare(l.Claim)
	if err != nil {
		return Outcome{}, err
	}
	result, err = storedResult(result)
	if err != nil {
		return Outcome{}, fmt.Errorf("complete %s: %w", a.key, err)
	}
	stored, err := complete(ctx, s.pool, l, result)
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			s.log.Warn("stale owner's completion refused", a.fields(zap.String("owner", l.Owner), zap.Int32("attempt", l.Attempt))...)
		}
		return Outcome{}, err
	}
	s.debug("tool call completed", a, l.Attempt)
	return Outcome{Result: stored}, nil
}

// Fail records that l's attempt failed, its message escaped and cut as
// every failure's is. If f.BeforeEffect, the next Begin
// may claim the key again and run the effect; otherwise the next Begin gets
// [ErrOutcomeUnknown]. It returns [ErrLeaseLost] if l no longer holds the key.
func (s *Store) Fail(ctx context.Context, l *Lease, f Failure) error {
	a, err := s.prepare(l.Claim)
	if err != nil {
		return err
	}
	if f.Message == "" {
		return fmt.Errorf("fail %s: Failure.Message is empty", a.key)
	}
	f = f.stored()
	tag, err := s.pool.Exec(ctx, failSQL, a.Key.Tenant, a.key, l.Owner, l.Attempt, f)
	if err != nil {
		return fmt.Errorf("fail %s: %w", a.key, err)
	}
	if tag.RowsAffected() == 0 {
		s.log.Warn("stale owner's failure refused", a.fields(zap.String("owner", l.Owner), zap.Int32("attempt", l.Attempt))...)
		return fmt.Errorf("fail %s as %s attempt %d: %w", a.key, l.Owner, l.Attempt, ErrLeaseLost)
	}
	s.log.Info("tool call failed", a.fields(zap.Int32("attempt", l.Attempt), zap.Bool("before_effect", f.BeforeEffect), zap.String("failure", f.Message))...)
	return nil
}

// RecordHandle records, on l's key, the handle of its effect in progress
// at the provider (an MCP server's task), so that a later attempt whose
// outcome is unknown can follow it ([External.Resume]). It returns
// [ErrLeaseLost] if l no longer holds the key.
func (s *Store) RecordHandle(ctx context.Context, l *Lease, handle json.RawMessage) error {
	a, err := s.prepare(l.Claim)
	if err != nil {
		return err
	}
	if !json.Valid(handle) {
		return fmt.Errorf("record the handle of %s: not JSON", a.key)
	}
	tag, err := s.pool.Exec(ctx, recordHandleSQL, a.Key.Tenant, a.key, l.Owner, l.Attempt, handle)
	if err != nil {
		return fmt.Errorf("record the handle of %s: %w", a.key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("record the handle of %s as %s attempt %d: %w", a.key, l.Owner, l.Attempt, ErrLeaseLost)
	}
	s.log.Info("effect in progress at the provider; its handle recorded", a.fields(zap.Int32("attempt", l.Attempt))...)
	return nil
}
