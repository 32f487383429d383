package idempotency

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what the functions of this package that read or maintain keys
// outside a call run their statements on: a *pgxpool.Pool, a *pgx.Conn or
// a pgx.Tx.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// KeyRef names a key's row: its tenant and its key as [keys.Key.String]
// spells it.
type KeyRef struct {
	Tenant string
	Key    string
}

// ExpiringKey is a key whose retention has run out, or soon will: what the
// expiry watchdog and `oncerun keys --expiring` look at.
type ExpiringKey struct {
	Tenant    string    `db:"tenant"`
	Key       string    `db:"key"`
	RunID     string    `db:"run_id"`
	Step      int64     `db:"step"`
	Tool      string    `db:"tool"`
	State     State     `db:"state"`
	CreatedAt time.Time `db:"created_at"`
	ExpiresAt time.Time `db:"expires_at"`
}

// Ref returns the key's [KeyRef].
func (k ExpiringKey) Ref() KeyRef { return KeyRef{Tenant: k.Tenant, Key: k.Key} }

// InFlight reports whether an attempt holds or held the key and its outcome
// is not recorded: such a key may be pruned only once its run has closed,
// since deleting it would let the next attempt make the effect again.
func (k ExpiringKey) InFlight() bool { return k.State == StateInFlight }

// KeyHold is a new expiry for a key: [HoldKeys] keeps it until Until.
type KeyHold struct {
	KeyRef
	Until time.Time
}

const expiringColumns = `tenant, key, run_id, step, tool, state, created_at, expires_at`

// dueSQL selects the keys that expired before $1, leaving out keys in
// flight under a lease live at $1: an attempt may be making their effect
// right now. It is the one statement of which keys are due.
const dueSQL = `
SELECT ` + expiringColumns + `
FROM idempotency_keys
WHERE expires_at < $1 AND (state <> 'in_flight' OR lease_expiry < $1)`

// The expiry statements. The watchdog walks idempotency_keys_expires_at_idx
// in expiry order and finds or changes the keys it chose by primary key.
const (
	// dueKeysSQL reads a batch of due keys, oldest first, without locking.
	dueKeysSQL = dueSQL + ` ORDER BY expires_at LIMIT $2`

	// lockDueKeysSQL locks those of the keys named that are still due.
	// SKIP LOCKED: concurrent watchdogs take disjoint keys, and a claim
	// waits at most for the locking transaction.
	lockDueKeysSQL = dueSQL + `
  AND (tenant, key) IN (SELECT * FROM unnest($2::text[], $3::text[]))
ORDER BY expires_at
FOR UPDATE SKIP LOCKED`

	// deleteKeysSQL deletes the keys named, and the run trees' claims on
	// intents that they hold (see package intents), in one statement.
	deleteKeysSQL = `
WITH gone AS (
    DELETE FROM idempotency_keys k
    USING unnest($1::text[], $2::text[]) AS d(tenant, key)
    WHERE k.tenant = d.tenant AND k.key = d.key
    RETURNING k.tenant, k.key
), claims AS (
    DELETE FROM tree_intents t USING gone WHERE t.tenant = gone.tenant AND t.key = gone.key
)
SELECT count(*) FROM gone`

	// holdKeysSQL sets each key's expiry.
	holdKeysSQL = `
UPDATE idempotency_keys k SET expires_at = h.until
FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS h(tenant, key, until)
WHERE k.tenant = h.tenant AND k.key = h.key`

	// expiringKeysSQL lists the keys that expire within $1 of the
	// database's clock (expired ones included), of tenant $2 or of every
	// tenant when $2 is empty, soonest first.
	expiringKeysSQL = `
SELECT ` + expiringColumns + `
FROM idempotency_keys
WHERE expires_at < statement_timestamp() + $1::interval AND ($2 = '' OR tenant = $2)
ORDER BY expires_at
LIMIT $3`

	// runKeysExpiringSQL lists a run's keys that expire before $3, by
	// step.
	runKeysExpiringSQL = `
SELECT ` + expiringColumns + `
FROM idempotency_keys
WHERE run_id = $1 AND tenant = $2 AND expires_at < $3
ORDER BY step`
)

// DueKeys reads up to limit keys that expired before cutoff, oldest first,
// without locking them. A key in flight under a lease still live at cutoff
// is never due: an attempt may be making its effect right now. A key that
// failed, or whose lease expired, is due like a completed one.
func DueKeys(ctx context.Context, db DB, cutoff time.Time, limit int) ([]ExpiringKey, error) {
	rows, err := db.Query(ctx, dueKeysSQL, cutoff, limit)
	if err != nil {
		return nil, fmt.Errorf("select expired keys: %w", err)
	}
	ks, err := pgx.CollectRows(rows, pgx.RowToStructByName[ExpiringKey])
	if err != nil {
		return nil, fmt.Errorf("select expired keys: %w", err)
	}
	return ks, nil
}

// LockDueKeys locks, in tx, those of refs that are still due at cutoff (as
// [DueKeys] decides), oldest first, and returns them as they are now. A key
// another transaction has locked is left out (FOR UPDATE SKIP LOCKED), so
// concurrent watchdogs take disjoint keys, and a claim of a locked key
// waits at most until tx ends.
func LockDueKeys(ctx context.Context, tx pgx.Tx, cutoff time.Time, refs []KeyRef) ([]ExpiringKey, error) {
	tenants, names := split(refs)
	rows, err := tx.Query(ctx, lockDueKeysSQL, cutoff, tenants, names)
	if err != nil {
		return nil, fmt.Errorf("lock expired keys: %w", err)
	}
	ks, err := pgx.CollectRows(rows, pgx.RowToStructByName[ExpiringKey])
	if err != nil {
		return nil, fmt.Errorf("lock expired keys: %w", err)
	}
	return ks, nil
}

// DeleteKeys deletes the keys of refs, in tx, and returns how many it
// deleted, with the claims on run trees' intents they hold. A deleted key
// can be claimed again: call it only for keys whose run has closed, or
// knowing the risk.
func DeleteKeys(ctx context.Context, tx pgx.Tx, refs []KeyRef) (int64, error) {
	if len(refs) == 0 {
		return 0, nil
	}
	tenants, names := split(refs)
	var n int64
	if err := tx.QueryRow(ctx, deleteKeysSQL, tenants, names).Scan(&n); err != nil {
		return 0, fmt.Errorf("delete expired keys: %w", err)
	}
	return n, nil
}

// HoldKeys sets the expiry of each key of holds to its Until, in tx.
func HoldKeys(ctx context.Context, tx pgx.Tx, holds []KeyHold) error {
	if len(holds) == 0 {
		return nil
	}
	tenants, names := make([]string, len(holds)), make([]string, len(holds))
	until := make([]time.Time, len(holds))
	for i, h := range holds {
		tenants[i], names[i], until[i] = h.Tenant, h.Key, h.Until
	}
	if _, err := tx.Exec(ctx, holdKeysSQL, tenants, names, until); err != nil {
		return fmt.Errorf("hold expired keys: %w", err)
	}
	return nil
}

// ExpiringKeys lists up to limit keys, in any state, that expire within
// the given time of the database's clock (already expired ones included),
// soonest first: of tenant, or of every tenant when tenant is empty.
func ExpiringKeys(ctx context.Context, db DB, within time.Duration, tenant string, limit int) ([]ExpiringKey, error) {
	rows, err := db.Query(ctx, expiringKeysSQL, within, tenant, limit)
	if err != nil {
		return nil, fmt.Errorf("list expiring keys: %w", err)
	}
	ks, err := pgx.CollectRows(rows, pgx.RowToStructByName[ExpiringKey])
	if err != nil {
		return nil, fmt.Errorf("list expiring keys: %w", err)
	}
	return ks, nil
}

// RunKeysExpiringBefore lists the keys of the tenant's run that expire
// before t, by step: the keys a run pausing until t would outlive.
func RunKeysExpiringBefore(ctx context.Context, db DB, tenant, runID string, t time.Time) ([]ExpiringKey, error) {
	rows, err := db.Query(ctx, runKeysExpiringSQL, runID, tenant, t)
	if err != nil {
		return nil, fmt.Errorf("list the keys of run %s expiring before %s: %w", runID, t.Format(time.RFC3339), err)
	}
	ks, err := pgx.CollectRows(rows, pgx.RowToStructByName[ExpiringKey])
	if err != nil {
		return nil, fmt.Errorf("list the keys of run %s expiring before %s: %w", runID, t.Format(time.RFC3339), err)
	}
	return ks, nil
}

// split returns the tenants and the keys of refs, as two arrays for unnest.
func split(refs []KeyRef) (tenants, names []string) {
	tenants, names = make([]string, len(refs)), make([]string, len(refs))
	for i, r := range refs {
		tenants[i], names[i] = r.Tenant, r.Key
	}
	return tenants, names
}
