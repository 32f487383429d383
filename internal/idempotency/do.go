package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oncerun/oncerun/internal/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// maxClaimTries bounds how often a claim starts over on a key that changed
// under it: pruned between the refused claim and the read, taken over by a
// concurrent caller, or claimed by an external call while a transactional
// effect ran. Each round makes progress, so this is rarely above 2.
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
func (s *Store) Do(ctx context.Context, claim Claim, effect Effect) (out Outcome, err error) {
	if telemetry.On() {
		var span trace.Span
		ctx, span = telemetry.Tracer().Start(ctx, "oncerun.do", trace.WithAttributes(attribute.String("oncerun.key", claim.Key.String())))
		defer func() { endDo(span, out, err) }()
	}
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
// A key without a row, the common case, costs the effect's own statements
// and two round trips: BEGIN travels with the claim (idempotency_claim_in_tx
// holds the key's lock and refuses a key that has a row), and the key's row,
// written completed with the result, travels with the COMMIT. That is as
// many as a bare transaction making the same effect. The transaction is
// begun on a connection Do holds itself, rather than a pool transaction, so
// that the completion and the COMMIT can go in one pipelined batch.
func (s *Store) doOnce(ctx context.Context, a claimArgs, effect Effect) (out Outcome, again bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return Outcome{}, false, fmt.Errorf("claim %s: acquire connection: %w", a.key, err)
	}
	// Release returns the connection to the pool only if it is idle, outside
	// any transaction; otherwise the pool closes it.
	defer conn.Release()
	begin, err := beginClaimSQL(conn.Conn().PgConn(), a)
	if err != nil {
		return Outcome{}, false, fmt.Errorf("claim %s: %w", a.key, err)
	}
	tx, err := conn.Conn().BeginTx(ctx, pgx.TxOptions{BeginQuery: begin})
	if err != nil {
		// A refused claim, or another error of the server's, left the
		// transaction aborted: end it, so that the connection goes back to
		// the pool, then decide from the key's row.
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
			_, rerr := conn.Exec(rctx, "ROLLBACK")
			cancel()
			if rerr == nil && isKeyRecorded(err) {
				return s.doRecorded(ctx, conn, a, effect)
			}
		}
		return Outcome{}, false, fmt.Errorf("claim %s: begin: %w", a.key, err)
	}
	return s.apply(ctx, tx, a, 1, effect, func(ctx context.Context, tx pgx.Tx, result json.RawMessage) (json.RawMessage, error) {
		return insertCompletedAndCommit(ctx, tx, a, s.cfg.Owner, result)
	})
}

// doRecorded decides what a transactional call does with a key that has a
// row: replay it, report it, or, when an earlier attempt failed before its
// effect, take it over and run the effect in a new transaction.
func (s *Store) doRecorded(ctx context.Context, conn *pgxpool.Conn, a claimArgs, effect Effect) (Outcome, bool, error) {
	d, row, again, err := s.meet(ctx, conn, a)
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
	tx, err := conn.Conn().BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return Outcome{}, false, fmt.Errorf("claim %s: begin: %w", a.key, err)
	}
	lease, err := takeover(ctx, tx, a, s.cfg.Owner, row.Attempts)
	if err != nil || lease == nil {
		rollback(ctx, tx)
		return Outcome{}, err == nil, err
	}
	return s.apply(ctx, tx, a, lease.Attempt, effect, func(ctx context.Context, tx pgx.Tx, result json.RawMessage) (json.RawMessage, error) {
		return completeAndCommit(ctx, tx, lease, result)
	})
}

// finishFunc records a transactional call's result and commits tx in one
// round trip, returning the result as stored. tx must not be used
// afterwards.
type finishFunc func(ctx context.Context, tx pgx.Tx, result json.RawMessage) (json.RawMessage, error)

// apply runs effect in tx, which holds a's key, and finishes with finish.
// Any failure rolls tx back. again reports that the key's row appeared
// while the effect ran (an external call claimed it): nothing was
// committed, and the call should look again.
func (s *Store) apply(ctx context.Context, tx pgx.Tx, a claimArgs, attempt int32, effect Effect, finish finishFunc) (out Outcome, again bool, err error) {
	committed := false
	defer func() {
		if !committed {
			rollback(ctx, tx)
		}
	}()
	result, err := effect(ctx, effectTx{tx})
	if err != nil {
		return Outcome{}, false, fmt.Errorf("effect of %s: %w", a.key, err)
	}
	if result, err = storedResult(result); err != nil {
		return Outcome{}, false, fmt.Errorf("effect of %s: %w", a.key, err)
	}
	stored, err := finish(ctx, tx, result)
	if err != nil {
		if isKeyTaken(err) {
			s.log.Info("key claimed elsewhere while the effect ran; the effect was rolled back", a.fields(zap.Error(err))...)
			return Outcome{}, true, nil
		}
		return Outcome{}, false, err
	}
	committed = true
	s.debug("tool call executed", a, attempt)
	return Outcome{Result: stored}, false, nil
}

// rollback rolls tx back even when ctx is done (an activity timed out, say),
// so that the connection goes back to the pool instead of being closed.
func rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	tx.Rollback(rctx) //nolint:errcheck // on failure Release discards the connection
}

// beginClaimSQL returns the simple query that begins a's transaction and
// claims its key. A simple query carries no parameters, so tenant and key
// are written as literals, escaped by pgconn for the connection's settings.
func beginClaimSQL(pc *pgconn.PgConn, a claimArgs) (string, error) {
	tenant, err := pc.EscapeString(a.Key.Tenant)
	if err != nil {
		return "", err
	}
	key, err := pc.EscapeString(a.key)
	if err != nil {
		return "", err
	}
	return "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT idempotency_claim_in_tx('" + tenant + "', '" + key + "')", nil
}

// insertCompletedAndCommit writes a's key row, completed with result, and
// commits tx, in one pipelined batch.
func insertCompletedAndCommit(ctx context.Context, tx pgx.Tx, a claimArgs, owner string, result json.RawMessage) (json.RawMessage, error) {
	batch := &pgx.Batch{}
	var stored json.RawMessage
	batch.Queue(insertCompletedInTxSQL,
		a.Key.Tenant, a.key, a.Key.RunID, a.Key.Step, a.Key.Tool, a.ArgsHash, result, owner, a.retention,
	).QueryRow(func(row pgx.Row) error { return row.Scan(&stored) })
	batch.Queue("COMMIT")
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		// On a network error after sending, the COMMIT may or may not have
		// happened; a retry of Do finds out.
		return nil, fmt.Errorf("record and commit %s: %w", a.key, err)
	}
	return stored, nil
}

// completeAndCommit records the result of a taken-over key and commits tx
// in one pipelined batch.
func completeAndCommit(ctx context.Context, tx pgx.Tx, l *Lease, result json.RawMessage) (json.RawMessage, error) {
	key := l.Claim.Key.String()
	batch := &pgx.Batch{}
	var stored json.RawMessage
	batch.Queue(completeInTxSQL, l.Claim.Key.Tenant, key, l.Owner, l.Attempt, result).QueryRow(func(row pgx.Row) error {
		return row.Scan(&stored)
	})
	batch.Queue("COMMIT")
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		// The transaction holds the key's row from its takeover on, so the
		// completion fails only if the effect itself changed
		// idempotency_keys; the server then aborts before COMMIT.
		return nil, fmt.Errorf("complete and commit %s: %w", key, err)
	}
	return stored, nil
}

// isKeyRecorded reports whether err is idempotency_claim_in_tx refusing a
// key that has a row.
func isKeyRecorded(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == keyRecordedCode
}

// isKeyTaken reports whether err is the key row's insert meeting a row
// that another caller committed meanwhile.
func isKeyTaken(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "idempotency_keys_pkey"
}

// errEffectEndsTx is returned to an effect that tries to end the claim's
// transaction, which would commit or drop the effect apart from its key.
var errEffectEndsTx = errors.New("an effect must not commit or roll back the claim's transaction")

// effectTx is the transaction an effect sees: the claim's, minus the power to
// end it. Savepoints (Begin) remain available.
type effectTx struct{ pgx.Tx }

func (effectTx) Commit(context.Context) error   { return errEffectEndsTx }
func (effectTx) Rollback(context.Context) error { return errEffectEndsTx }

// endDo ends the span of one Do with what it did: the effect committed with
// its key, or the key's result replayed, or the error.
func endDo(span trace.Span, out Outcome, err error) {
	span.SetAttributes(attribute.Bool("oncerun.replayed", out.Replayed))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "the effect did not commit")
	}
	span.End()
}
