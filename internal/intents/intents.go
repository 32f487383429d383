package intents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncerun/oncerun/internal/idempotency"
)

// Claim is a step's claim on its intent in its run tree.
type Claim struct {
	Tenant string
	// Tree is the run tree's first run.
	Tree     string
	Tool     string
	ArgsHash string
	// RunID, Step and Key are the claiming step's.
	RunID string
	Step  int64
	Key   string
}

// Holder is the step that holds an intent.
type Holder struct {
	RunID string `json:"run_id"`
	Step  int64  `json:"step"`
	Key   string `json:"key"`
}

// DuplicateError says the intent is held by another step of the tree,
// whose effect exists: Result is the holder's, or nil when its key was
// pruned.
type DuplicateError struct {
	Holder Holder
	Result json.RawMessage
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("the run tree made this intent in run %s step %d (key %s)", e.Holder.RunID, e.Holder.Step, e.Holder.Key)
}

// HeldError says the intent is held by another step of the tree whose
// call has not ended, or whose outcome is not known yet: the claiming step
// waits. It matches idempotency.ErrInFlight.
type HeldError struct{ Holder Holder }

func (e *HeldError) Error() string {
	return fmt.Sprintf("the run tree is making this intent in run %s step %d (key %s): wait for its outcome",
		e.Holder.RunID, e.Holder.Step, e.Holder.Key)
}

// Is reports that a HeldError is an in-flight error.
func (e *HeldError) Is(target error) bool { return target == idempotency.ErrInFlight }

// maxTries bounds how often a claim starts over on a holder that changed
// under it.
const maxTries = 5

const (
	insertSQL = `
INSERT INTO tree_intents (tenant, tree, tool, args_hash, run_id, step, key)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT DO NOTHING`
	holderSQL = `
SELECT t.run_id, t.step, t.key, k.state, k.result, k.failure
FROM tree_intents t
LEFT JOIN idempotency_keys k ON k.tenant = t.tenant AND k.key = t.key
WHERE t.tenant = $1 AND t.tree = $2 AND t.tool = $3 AND t.args_hash = $4`
	takeOverSQL = `
UPDATE tree_intents SET run_id = $5, step = $6, key = $7, claimed_at = now()
WHERE tenant = $1 AND tree = $2 AND tool = $3 AND args_hash = $4 AND key = $8`
)

// ClaimTx claims c's intent in tx, the transaction of a natural or keyed
// step's effect: nil when the step holds it (now, or since an earlier
// attempt), a [*DuplicateError] when another step of the tree made it.
// A concurrent claim of the same intent waits for the other transaction,
// as the dedup store's claims do.
func ClaimTx(ctx context.Context, tx pgx.Tx, c Claim) error {
	return claim(ctx, tx, c, true)
}

// ClaimCall claims c's intent for an external step's call, in a
// transaction of its own, before the call: nil when the step holds it, a
// [*DuplicateError] when another step of the tree made it, a [*HeldError]
// while another's call has not ended.
func ClaimCall(ctx context.Context, pool *pgxpool.Pool, c Claim) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return claim(ctx, tx, c, false) })
}

func claim(ctx context.Context, tx pgx.Tx, c Claim, inEffect bool) error {
	for range maxTries {
		tag, err := tx.Exec(ctx, insertSQL, c.Tenant, c.Tree, c.Tool, c.ArgsHash, c.RunID, c.Step, c.Key)
		if err != nil {
			return fmt.Errorf("claim the intent of %s: %w", c.Key, err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		var (
			h       Holder
			state   *string
			result  json.RawMessage
			failure *idempotency.Failure
		)
		err = tx.QueryRow(ctx, holderSQL, c.Tenant, c.Tree, c.Tool, c.ArgsHash).Scan(&h.RunID, &h.Step, &h.Key, &state, &result, &failure)
		if errors.Is(err, pgx.ErrNoRows) {
			// Given up between the insert and the read: claim again.
			continue
		}
		if err != nil {
			return fmt.Errorf("read who holds the intent of %s: %w", c.Key, err)
		}
		if h.Key == c.Key {
			return nil
		}
		switch {
		case state == nil && inEffect:
			// A natural or keyed holder's claim committed with its effect;
			// its key has since been pruned.
			return &DuplicateError{Holder: h}
		case state == nil:
			return &HeldError{Holder: h}
		case *state == string(idempotency.StateCompleted):
			return &DuplicateError{Holder: h, Result: result}
		case *state == string(idempotency.StateFailed) && failure != nil && failure.BeforeEffect:
			// The holder's call was refused before any effect: this step
			// makes the intent instead.
			tag, err := tx.Exec(ctx, takeOverSQL, c.Tenant, c.Tree, c.Tool, c.ArgsHash, c.RunID, c.Step, c.Key, h.Key)
			if err != nil {
				return fmt.Errorf("take the intent of %s over from %s: %w", c.Key, h.Key, err)
			}
			if tag.RowsAffected() == 1 {
				return nil
			}
		default:
			return &HeldError{Holder: h}
		}
	}
	return fmt.Errorf("claim the intent of %s: its holder kept changing: %w", c.Key, idempotency.ErrContended)
}
