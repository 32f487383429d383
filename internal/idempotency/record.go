package idempotency

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// KeyRecord is a key's row as the store keeps it, for readers that check
// what became of calls: reconciliation against a provider's ledger, a
// demo's or a drill's checks.
type KeyRecord struct {
	Tenant string `db:"tenant"`
	Key    string `db:"key"`
	RunID  string `db:"run_id"`
	Step   int64  `db:"step"`
	Tool   string `db:"tool"`
	State  State  `db:"state"`
	// ArgsHash is the hash of the arguments the key was claimed with.
	ArgsHash string `db:"args_hash"`
	// Result is the effect's result, for a completed key.
	Result json.RawMessage `db:"result"`
	// Failure is a failed key's [Failure], as JSON.
	Failure json.RawMessage `db:"failure"`
	// Attempts counts the leases granted on the key.
	Attempts    int32      `db:"attempts"`
	CreatedAt   time.Time  `db:"created_at"`
	CompletedAt *time.Time `db:"completed_at"`
	ExpiresAt   time.Time  `db:"expires_at"`
}

const recordColumns = `tenant, key, run_id, step, tool, state, args_hash, result, failure, attempts, created_at, completed_at, expires_at`

// The statements of the readers.
const (
	// keysOfSQL reads the keys named, by primary key.
	keysOfSQL = `
SELECT ` + recordColumns + `
FROM idempotency_keys
WHERE (tenant, key) IN (SELECT * FROM unnest($1::text[], $2::text[]))`

	// keysOfRunSQL reads a run's keys, by step.
	keysOfRunSQL = `
SELECT ` + recordColumns + `
FROM idempotency_keys
WHERE run_id = $1 AND tenant = $2
ORDER BY step`

	// completedKeysSQL reads a tool's keys created since $2 and completed
	// before $3. No index serves it: it reads the table once per
	// reconciliation pass and tool, never on a call's path.
	completedKeysSQL = `
SELECT ` + recordColumns + `
FROM idempotency_keys
WHERE tool = $1 AND state = 'completed' AND created_at >= $2 AND completed_at < $3
ORDER BY completed_at`

	// completedStepsSQL reads the completed keys of a run's steps from $3
	// to $4, by the run's index.
	completedStepsSQL = `
SELECT ` + recordColumns + `
FROM idempotency_keys
WHERE run_id = $1 AND tenant = $2 AND step BETWEEN $3 AND $4 AND state = 'completed'
ORDER BY step`

	// countInFlightSQL counts the keys of the runs named that are in
	// flight.
	countInFlightSQL = `
SELECT count(*) FROM idempotency_keys WHERE state = 'in_flight' AND run_id = ANY($1)`
)

// KeysOf reads the keys of refs, in any state; a key with no row is not in
// the result, which is in no particular order.
func KeysOf(ctx context.Context, db DB, refs []KeyRef) ([]KeyRecord, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	tenants, names := split(refs)
	ks, err := collectRecords(db.Query(ctx, keysOfSQL, tenants, names))
	if err != nil {
		return nil, fmt.Errorf("read %d keys: %w", len(refs), err)
	}
	return ks, nil
}

// KeysOfRun reads the keys of the tenant's run, by step.
func KeysOfRun(ctx context.Context, db DB, tenant, runID string) ([]KeyRecord, error) {
	ks, err := collectRecords(db.Query(ctx, keysOfRunSQL, runID, tenant))
	if err != nil {
		return nil, fmt.Errorf("read the keys of run %s: %w", runID, err)
	}
	return ks, nil
}

// CompletedSteps reads the completed keys of the tenant's run whose steps
// are from first to last, by step.
func CompletedSteps(ctx context.Context, db DB, tenant, runID string, first, last int64) ([]KeyRecord, error) {
	ks, err := collectRecords(db.Query(ctx, completedStepsSQL, runID, tenant, first, last))
	if err != nil {
		return nil, fmt.Errorf("read the completed keys of steps %d to %d of run %s: %w", first, last, runID, err)
	}
	return ks, nil
}

// CompletedKeys reads the keys of tool created at or after since and
// completed before cutoff, in completion order.
func CompletedKeys(ctx context.Context, db DB, tool string, since, cutoff time.Time) ([]KeyRecord, error) {
	ks, err := collectRecords(db.Query(ctx, completedKeysSQL, tool, since, cutoff))
	if err != nil {
		return nil, fmt.Errorf("read the completed %s keys: %w", tool, err)
	}
	return ks, nil
}

// CountInFlight counts the keys of the runs named (of any tenant) that are
// in flight: after a run closed, none should be.
func CountInFlight(ctx context.Context, db DB, runIDs []string) (int, error) {
	var n int
	if err := db.QueryRow(ctx, countInFlightSQL, runIDs).Scan(&n); err != nil {
		return 0, fmt.Errorf("count keys in flight: %w", err)
	}
	return n, nil
}

func collectRecords(rows pgx.Rows, err error) ([]KeyRecord, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByName[KeyRecord])
}
