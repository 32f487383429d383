package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// IntentClaim is a step's claim on its intent in its run tree.
type IntentClaim struct {
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

// IntentHolder is the step that holds an intent.
type IntentHolder struct {
	RunID string `json:"run_id"`
	Step  int64  `json:"step"`
	Key   string `json:"key"`
}

// IntentDuplicateError says the intent is held by another step of the tree,
// whose effect exists: Result is the holder's, or nil when its key was
// pruned.
type IntentDuplicateError struct {
	Holder IntentHolder
	Result json.RawMessage
}

func (e *IntentDuplicateError) Error() string {
	return fmt.Sprintf("the run tree made this intent in run %s step %d (key %s)", e.Holder.RunID, e.Holder.Step, e.Holder.Key)
}

// IntentHeldError says the intent is held by another step of the tree whose
// call has not ended, or whose outcome is not known yet: the claiming step
// waits. It matches [ErrInFlight].
type IntentHeldError struct{ Holder IntentHolder }

func (e *IntentHeldError) Error() string {
	return fmt.Sprintf("the run tree is making this intent in run %s step %d (key %s): wait for its outcome",
		e.Holder.RunID, e.Holder.Step, e.Holder.Key)
}

// Is reports that an IntentHeldError is an in-flight error.
func (e *IntentHeldError) Is(target error) bool { return target == ErrInFlight }

// maxIntentTries bounds how often a claim starts over on a holder that changed
// under it.
const maxIntentTries = 5

const (
	insertIntentSQL = `
INSERT INTO tree_intents (tenant, tree, tool, args_hash, run_id, step, key)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT DO NOTHING`
	intentHolderSQL = `
SELECT t.run_id, t.step, t.key, k.state, k.result, k.failure
FROM tree_intents t
LEFT JOIN idempotency_keys k ON k.tenant = t.tenant AND k.key = t.key
WHERE t.tenant = $1 AND t.tree = $2 AND t.tool = $3 AND t.args_hash = $4`
	// takeOverIntentSQL moves a claim to the claiming step while its holder's
	// key is still failed before any effect: a holder whose retry took its
	// lease again in the meantime keeps the claim.
	takeOverIntentSQL = `
UPDATE tree_intents t SET run_id = $5, step = $6, key = $7, claimed_at = now()
WHERE t.tenant = $1 AND t.tree = $2 AND t.tool = $3 AND t.args_hash = $4 AND t.key = $8
  AND EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.tenant = t.tenant AND k.key = t.key
              AND k.state = 'failed' AND coalesce((k.failure->>'before_effect')::boolean, false))`
	// releaseIntentSQL gives a claim up while its key holds nothing that may
	// have taken effect: no row, or a failure before any effect.
	releaseIntentSQL = `
DELETE FROM tree_intents t
WHERE t.tenant = $1 AND t.tree = $2 AND t.tool = $3 AND t.args_hash = $4 AND t.key = $5
  AND NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.tenant = t.tenant AND k.key = t.key
                  AND NOT (k.state = 'failed' AND coalesce((k.failure->>'before_effect')::boolean, false)))`
	// intentHolderKeySQL reads the key that holds an intent.
	intentHolderKeySQL = `
SELECT key FROM tree_intents WHERE tenant = $1 AND tree = $2 AND tool = $3 AND args_hash = $4`
)

// ClaimIntentTx claims c's intent in tx, the transaction of a natural or keyed
// step's effect: nil when the step holds it (now, or since an earlier
// attempt), a [*IntentDuplicateError] when another step of the tree made it.
// A concurrent claim of the same intent waits for the other transaction,
// as the dedup store's claims do.
func ClaimIntentTx(ctx context.Context, tx pgx.Tx, c IntentClaim) error {
	return claimIntent(ctx, tx, c, true)
}

// ClaimIntent claims c's intent for an external step's call, in a
// transaction of its own, before the call: nil when the step holds it, a
// [*IntentDuplicateError] when another step of the tree made it, a [*IntentHeldError]
// while another's call has not ended.
func ClaimIntent(ctx context.Context, pool *pgxpool.Pool, c IntentClaim) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return claimIntent(ctx, tx, c, false) })
}

// HoldsIntent reports whether c's step holds its intent: an external step asks
// it once it holds its key's lease, before it sends anything, since
// another step may have taken the claim over between its claim and its
// lease (its key was then failed before any effect).
func HoldsIntent(ctx context.Context, pool *pgxpool.Pool, c IntentClaim) (bool, error) {
	var key string
	err := pool.QueryRow(ctx, intentHolderKeySQL, c.Tenant, c.Tree, c.Tool, c.ArgsHash).Scan(&key)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read who holds the intent of %s: %w", c.Key, err)
	}
	return key == c.Key, nil
}

// ReleaseIntent gives c's intent up when its step's key holds nothing that may
// have taken effect (no row: the step parked at a limit or was asked a
// question before its call; or a failure before any effect), so that
// another step of the tree may make it. A claim whose key is in flight,
// of unknown outcome or completed, or that another step holds, is kept.
func ReleaseIntent(ctx context.Context, pool *pgxpool.Pool, c IntentClaim) error {
	if _, err := pool.Exec(ctx, releaseIntentSQL, c.Tenant, c.Tree, c.Tool, c.ArgsHash, c.Key); err != nil {
		return fmt.Errorf("give up the intent of %s: %w", c.Key, err)
	}
	return nil
}

func claimIntent(ctx context.Context, tx pgx.Tx, c IntentClaim, inEffect bool) error {
	for range maxIntentTries {
		tag, err := tx.Exec(ctx, insertIntentSQL, c.Tenant, c.Tree, c.Tool, c.ArgsHash, c.RunID, c.Step, c.Key)
		if err != nil {
			return fmt.Errorf("claim the intent of %s: %w", c.Key, err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		var (
			h       IntentHolder
			state   *string
			result  json.RawMessage
			failure *Failure
		)
		err = tx.QueryRow(ctx, intentHolderSQL, c.Tenant, c.Tree, c.Tool, c.ArgsHash).Scan(&h.RunID, &h.Step, &h.Key, &state, &result, &failure)
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
			return &IntentDuplicateError{Holder: h}
		case state == nil:
			return &IntentHeldError{Holder: h}
		case *state == string(StateCompleted):
			return &IntentDuplicateError{Holder: h, Result: result}
		case *state == string(StateFailed) && failure != nil && failure.BeforeEffect:
			// The holder's call was refused before any effect: this step
			// makes the intent instead.
			tag, err := tx.Exec(ctx, takeOverIntentSQL, c.Tenant, c.Tree, c.Tool, c.ArgsHash, c.RunID, c.Step, c.Key, h.Key)
			if err != nil {
				return fmt.Errorf("take the intent of %s over from %s: %w", c.Key, h.Key, err)
			}
			if tag.RowsAffected() == 1 {
				return nil
			}
		default:
			return &IntentHeldError{Holder: h}
		}
	}
	return fmt.Errorf("claim the intent of %s: its holder kept changing: %w", c.Key, ErrContended)
}
