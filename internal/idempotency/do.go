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

// maxClaimTries bounds how often a claim re-reads a key that changed under
// it (pruned between the conflicting insert and the read, or taken over by a
// concurrent caller). Each round makes progress, so this is rarely above 2.
const maxClaimTries = 5

// rollbackTimeout bounds the rollback of an abandoned claim.
const rollbackTimeout = 5 * time.Second

// Effect is a write to the store's own database. It runs inside the claim's
// transaction and must do all its work through tx; its result is stored and
// replayed to later duplicates. A nil result is stored as JSON null.
type Effect func(ctx context.Context, tx pgx.Tx) (json.RawMessage, error)

// Do applies effect once for claim. In one READ COMMITTED transaction it
// claims the key, runs effect and records its result, then commits; if any
// step fails the transaction rolls back and neither the key nor the effect
// remains, so a retry starts afresh.
//
// If the key was already completed with the same arguments, Do returns the
// stored result with Replayed set and does not run effect. A concurrent
// duplicate waits for the first transaction and then replays its result.
// Errors: [ErrInvalidClaim], [ErrKeyReuse], [ErrInFlight], [ErrContended] and
// [ErrOutcomeUnknown] (the key is held by an external call through
// [Store.Begin]), or effect's own error, wrapped.
func (s *Store) Do(ctx context.Context, claim Claim, effect Effect) (Outcome, error) {
	a, err := s.prepare(claim)
	if err != nil {
		return Outcome{}, err
	}
	for range maxClaimTries {
		out, again, err := s.doOnce(ctx, a, effect)
		if !again {
			return out, err
		}
	}
	return Outcome{}, fmt.Errorf("claim %s: %w", a.key, ErrContended)
}

// doOnce makes one attempt at Do; again reports that the key changed under
// the claim and the attempt should be repeated.
//
// The transaction is begun on a connection Do holds itself, rather than a
// pool transaction, so that the completion and the COMMIT can travel in one
// pipelined batch: one round trip fewer on every executed call.
func (s *Store) doOnce(ctx context.Context, a claimArgs, effect Effect) (out Outcome, again bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return Outcome{}, false, fmt.Errorf("claim %s: acquire connection: %w", a.key, err)
	}
	// Release returns the connection to the pool only if it is idle, outside
	// any transaction; otherwise the pool closes it.
	defer conn.Release()
	tx, err := conn.Conn().BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return Outcome{}, false, fmt.Errorf("claim %s: begin: %w", a.key, err)
	}
	committed := false
	defer func() {
		if !committed {
			// Roll back even when ctx is done (an activity timed out, say), so
			// the connection goes back to the pool instead of being closed.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
			defer cancel()
			tx.Rollback(rctx) //nolint:errcheck // on failure Release discards the connection
		}
	}()

	lease, err := insertClaim(ctx, tx, a, s.cfg.Owner)
	if err != nil {
		return Outcome{}, false, err
	}
	if lease == nil {
		d, row, again, err := s.meet(ctx, tx, a)
		if err != nil || again {
			return Outcome{}, again, err
		}
		switch d {
		case decideReplay:
			return Outcome{Result: row.Result, Replayed: true}, false, nil
		case decideUnknown:
			err := &OutcomeUnknownError{Key: a.key, Previous: row.Failure}
			s.log.Warn("transactional call met a key with an unknown external outcome", a.fields(zap.Error(err))...)
			return Outcome{}, false, err
		}
		// decideReclaim: an earlier attempt failed before its effect.
		if lease, err = takeover(ctx, tx, a, s.cfg.Owner, row.Attempts); err != nil || lease == nil {
			return Outcome{}, err == nil, err
		}
	}

	result, err := effect(ctx, effectTx{tx})
	if err != nil {
		return Outcome{}, false, fmt.Errorf("effect of %s: %w", a.key, err)
	}
	if result == nil {
		result = json.RawMessage("null")
	} else if !json.Valid(result) {
		return Outcome{}, false, fmt.Errorf("effect of %s: result is not valid JSON", a.key)
	}
	stored, err := completeAndCommit(ctx, tx, lease, result)
	if err != nil {
		return Outcome{}, false, err
	}
	committed = true
	s.debug("tool call executed", a, lease.Attempt)
	return Outcome{Result: stored}, false, nil
}

// completeAndCommit records the result and commits tx in one pipelined
// batch. tx must not be used afterwards.
func completeAndCommit(ctx context.Context, tx pgx.Tx, l *Lease, result json.RawMessage) (json.RawMessage, error) {
	key := l.Claim.Key.String()
	batch := &pgx.Batch{}
	var stored json.RawMessage
	batch.Queue(completeInTxSQL, l.Claim.Key.Tenant, key, l.Owner, l.Attempt, result).QueryRow(func(row pgx.Row) error {
		return row.Scan(&stored)
	})
	batch.Queue("COMMIT")
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		// The claim's transaction holds the key's row from its INSERT or
		// takeover on, so the completion fails only if the effect itself
		// changed idempotency_keys; the server then aborts before COMMIT. On
		// a network error after sending, the COMMIT may or may not have
		// happened; a retry of Do finds out.
		return nil, fmt.Errorf("complete and commit %s: %w", key, err)
	}
	return stored, nil
}

// errEffectEndsTx is returned to an effect that tries to end the claim's
// transaction, which would commit or drop the effect apart from its key.
var errEffectEndsTx = errors.New("an effect must not commit or roll back the claim's transaction")

// effectTx is the transaction an effect sees: the claim's, minus the power to
// end it. Savepoints (Begin) remain available.
type effectTx struct{ pgx.Tx }

func (effectTx) Commit(context.Context) error   { return errEffectEndsTx }
func (effectTx) Rollback(context.Context) error { return errEffectEndsTx }
