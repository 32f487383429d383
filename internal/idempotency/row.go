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

// The statements below are the whole protocol. Every lease decision compares
// against the database's clock, never a worker's: statement_timestamp() rather
// than now(), the start of the transaction, which in Do may be long before a
// statement that waited on the index or followed a slow effect.
const (
	// insertClaimSQL claims a key. It returns no row when the key exists;
	// when another transaction holds an uncommitted claim on the same key it
	// first waits for that transaction to end.
	insertClaimSQL = `
INSERT INTO idempotency_keys
    (tenant, key, run_id, step, tool, state, args_hash, lease_owner, lease_expiry, expires_at)
VALUES ($1, $2, $3, $4, $5, 'in_flight', $6, $7, statement_timestamp() + $8::interval, statement_timestamp() + $9::interval)
ON CONFLICT (tenant, key) DO NOTHING
RETURNING attempts, lease_expiry, created_at`

	// loadRowSQL reads the row a conflicting claim met. Run as a new
	// statement it sees the row the blocking transaction committed.
	loadRowSQL = `
SELECT state, args_hash, result, failure, handle, lease_owner, lease_expiry, attempts, created_at,
       extract(epoch FROM statement_timestamp() - created_at)::float8 AS age_seconds,
       coalesce(lease_expiry < statement_timestamp(), false) AS lease_expired
FROM idempotency_keys
WHERE tenant = $1 AND key = $2`

	// takeoverSQL moves the key to a new owner and attempt when the row is
	// still as the caller saw it: same attempt, and failed or in flight with
	// an expired lease. The attempt number is the fencing token. The earlier
	// failure is cleared (the caller has read it), and the key's retention
	// restarts so that the new lease cannot outlive the key.
	takeoverSQL = `
UPDATE idempotency_keys
SET state = 'in_flight', lease_owner = $3, lease_expiry = statement_timestamp() + $4::interval,
    attempts = attempts + 1, failure = NULL,
    expires_at = greatest(expires_at, statement_timestamp() + $7::interval)
WHERE tenant = $1 AND key = $2 AND args_hash = $5 AND attempts = $6
  AND (state = 'failed' OR (state = 'in_flight' AND lease_expiry < statement_timestamp()))
RETURNING attempts, lease_expiry, created_at`

	// completeSQL records the result, if the caller still holds the lease.
	completeSQL = `
UPDATE idempotency_keys
SET state = 'completed', result = $5, failure = NULL, completed_at = statement_timestamp()
WHERE tenant = $1 AND key = $2 AND state = 'in_flight' AND lease_owner = $3 AND attempts = $4
RETURNING result`

	// completeInTxSQL is completeSQL for the transactional path, whose COMMIT
	// travels in the same pipeline: if no row was completed the cast fails,
	// the transaction aborts and the COMMIT never applies the effect.
	completeInTxSQL = `
WITH done AS (` + completeSQL + `)
SELECT (SELECT result FROM done)::idempotency_completed_result`

	// insertCompletedInTxSQL writes a transactional call's key row, completed
	// with the effect's result, in the pipeline that carries its COMMIT. The
	// claim (idempotency_claim_in_tx) found no row and holds the key's lock,
	// so a row can be there only if a caller that does not take the lock, an
	// external call's claim, committed one while the effect ran. Then the
	// insert fails on the primary key (there is deliberately no ON CONFLICT
	// clause), the transaction aborts and the COMMIT never applies the
	// effect.
	insertCompletedInTxSQL = `
INSERT INTO idempotency_keys
    (tenant, key, run_id, step, tool, state, args_hash, result, lease_owner, completed_at, expires_at)
VALUES ($1, $2, $3, $4, $5, 'completed', $6, $7, $8, statement_timestamp(), statement_timestamp() + $9::interval)
RETURNING result`

	// failSQL records a failure, if the caller still holds the lease. A
	// failure before the effect clears the effect's handle: the next
	// attempt starts afresh.
	failSQL = `
UPDATE idempotency_keys
SET state = 'failed', failure = $5,
    handle = CASE WHEN coalesce(($5::jsonb ->> 'before_effect')::boolean, false) THEN NULL ELSE handle END
WHERE tenant = $1 AND key = $2 AND state = 'in_flight' AND lease_owner = $3 AND attempts = $4`

	// recordHandleSQL records the handle of an effect in progress at the
	// provider, if the caller still holds the lease.
	recordHandleSQL = `
UPDATE idempotency_keys
SET handle = $5
WHERE tenant = $1 AND key = $2 AND state = 'in_flight' AND lease_owner = $3 AND attempts = $4`
)

// keyRecordedCode is the SQLSTATE with which idempotency_claim_in_tx
// refuses a key that has a row (migrations/010_transactional_claim.sql).
const keyRecordedCode = "OC409"

// State is the state of a key.
type State string

// The three states of a key.
const (
	StateInFlight  State = "in_flight"
	StateCompleted State = "completed"
	StateFailed    State = "failed"
)

// keyRow is the part of a key's row that decides what a claim does.
type keyRow struct {
	State        State           `db:"state"`
	ArgsHash     string          `db:"args_hash"`
	Result       json.RawMessage `db:"result"`
	Failure      *Failure        `db:"failure"`
	Handle       json.RawMessage `db:"handle"`
	LeaseOwner   *string         `db:"lease_owner"`
	LeaseExpiry  *time.Time      `db:"lease_expiry"`
	Attempts     int32           `db:"attempts"`
	CreatedAt    time.Time       `db:"created_at"`
	AgeSeconds   float64         `db:"age_seconds"`
	LeaseExpired bool            `db:"lease_expired"`
}

// Lease is a caller's exclusive hold on a key in flight. Owner and Attempt
// form the fencing token that Complete and Fail check.
type Lease struct {
	// Claim is the claim the lease was granted for.
	Claim Claim
	// Owner is the store owner holding the lease.
	Owner string
	// Attempt counts the leases granted on the key, this one included.
	Attempt int32
	// Expiry is when another caller may take the key over.
	Expiry time.Time
	// FirstAttemptAt is when the key was first claimed, by the database's
	// clock.
	FirstAttemptAt time.Time
}

// querier is what the statements need: a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// insertClaim claims a.key for owner. It returns (nil, nil) when the key
// already exists.
func insertClaim(ctx context.Context, q querier, a claimArgs, owner string) (*Lease, error) {
	l := &Lease{Claim: a.Claim, Owner: owner}
	err := q.QueryRow(ctx, insertClaimSQL,
		a.Key.Tenant, a.key, a.Key.RunID, a.Key.Step, a.Key.Tool, a.ArgsHash, owner, a.lease, a.retention,
	).Scan(&l.Attempt, &l.Expiry, &l.FirstAttemptAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("claim %s: %w", a.key, err)
	}
	return l, nil
}

// loadRow reads the row of a.key; found is false when it is gone (pruned
// between the conflicting insert and this read).
func loadRow(ctx context.Context, q querier, a claimArgs) (row keyRow, found bool, err error) {
	rows, err := q.Query(ctx, loadRowSQL, a.Key.Tenant, a.key)
	if err != nil {
		return keyRow{}, false, fmt.Errorf("load %s: %w", a.key, err)
	}
	row, err = pgx.CollectOneRow(rows, pgx.RowToStructByName[keyRow])
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return keyRow{}, false, nil
	case err != nil:
		return keyRow{}, false, fmt.Errorf("load %s: %w", a.key, err)
	}
	return row, true, nil
}

// takeover moves a.key to owner if its row still has attempt seen and is
// failed or expired. It returns (nil, nil) when the row changed meanwhile.
func takeover(ctx context.Context, q querier, a claimArgs, owner string, seen int32) (*Lease, error) {
	l := &Lease{Claim: a.Claim, Owner: owner}
	err := q.QueryRow(ctx, takeoverSQL, a.Key.Tenant, a.key, owner, a.lease, a.ArgsHash, seen, a.retention).Scan(&l.Attempt, &l.Expiry, &l.FirstAttemptAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("take over %s: %w", a.key, err)
	}
	return l, nil
}

// complete marks l's key completed with result and returns the result as
// stored. It returns ErrLeaseLost when l no longer holds the key.
func complete(ctx context.Context, q querier, l *Lease, result json.RawMessage) (json.RawMessage, error) {
	key := l.Claim.Key.String()
	var stored json.RawMessage
	err := q.QueryRow(ctx, completeSQL, l.Claim.Key.Tenant, key, l.Owner, l.Attempt, result).Scan(&stored)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("complete %s as %s attempt %d: %w", key, l.Owner, l.Attempt, ErrLeaseLost)
	case err != nil:
		return nil, fmt.Errorf("complete %s: %w", key, err)
	}
	return stored, nil
}

// decision is what a claim that met an existing row does next.
type decision int

const (
	decideReplay   decision = iota // completed: return the stored result
	decideInFlight                 // live lease: back off
	decideReclaim                  // failed before the effect: take over and run
	decideUnknown                  // expired lease, or failed after the effect may have begun
)

// decide classifies the row a claim met. A different arguments hash is key
// reuse whatever the row's state.
func decide(a claimArgs, r keyRow) (decision, error) {
	if r.ArgsHash != a.ArgsHash {
		return 0, &KeyReuseError{Key: a.key, StoredHash: r.ArgsHash, ProposedHash: a.ArgsHash}
	}
	switch r.State {
	case StateCompleted:
		return decideReplay, nil
	case StateInFlight:
		if r.LeaseExpired {
			return decideUnknown, nil
		}
		return decideInFlight, nil
	case StateFailed:
		if r.Failure != nil && r.Failure.BeforeEffect {
			return decideReclaim, nil
		}
		return decideUnknown, nil
	}
	return 0, fmt.Errorf("key %s has unknown state %q", a.key, r.State)
}

// meet reads the row that a claim found in its way and decides what the
// claim does next. Key reuse and a live lease come back as errors; again
// reports that the row vanished (pruned) and the claim should start over.
// Decisions are logged here, once for both paths.
func (s *Store) meet(ctx context.Context, q querier, a claimArgs) (d decision, row keyRow, again bool, err error) {
	row, found, err := loadRow(ctx, q, a)
	if err != nil || !found {
		return 0, keyRow{}, err == nil, err
	}
	d, err = decide(a, row)
	var reuse *KeyReuseError
	switch {
	case errors.As(err, &reuse):
		s.log.Error("key reused with different arguments", a.fields(zap.Error(err))...)
		return 0, row, false, err
	case err != nil:
		s.log.Error("key row is unreadable", a.fields(zap.Error(err))...)
		return 0, row, false, err
	case d == decideReplay:
		s.debug("tool call replayed", a, row.Attempts)
	case d == decideInFlight:
		err = inFlightError(a, row)
		s.log.Info("tool call in flight elsewhere", a.fields(zap.Error(err))...)
		return d, row, false, err
	}
	return d, row, false, nil
}

func inFlightError(a claimArgs, r keyRow) error {
	e := &InFlightError{Key: a.key}
	if r.LeaseOwner != nil {
		e.Owner = *r.LeaseOwner
	}
	if r.LeaseExpiry != nil {
		e.LeaseExpiry = *r.LeaseExpiry
	}
	return e
}
