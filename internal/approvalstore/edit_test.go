package approvalstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/approvalstore"
)

// editRequest is dana's edit of the pending step to amount, checked by a
// CheckEdit that refuses a negative amount and hashes the amount as hashB.
func editRequest(amount int) approvalstore.DecisionRequest {
	r := request()
	r.Decision = approvalstore.DecisionEdit
	r.EditedArgs = json.RawMessage(`{"order_id":"1001","amount_cents":` + itoa(amount) + `}`)
	r.CheckEdit = func(tool string, proposed, edited json.RawMessage) (json.RawMessage, string, error) {
		if amount < 0 {
			return nil, "", errors.New("at /amount_cents: must be >= 1")
		}
		return edited, hashB, nil
	}
	return r
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestEditIsRecordedWithBothHashes(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := context.Background()
	d, err := approvalstore.Decide(ctx, pool, editRequest(100))
	require.NoError(t, err)
	assert.True(t, d.Deliver)
	assert.Equal(t, hashA, d.Decision.ArgsHash, "the hash reviewed")
	assert.Equal(t, hashB, d.Decision.EditedArgsHash, "the hash of what is to run")
	again, err := approvalstore.Decide(ctx, pool, editRequest(100))
	require.NoError(t, err)
	assert.True(t, again.Repeated)
	_, err = approvalstore.Decide(ctx, pool, request())
	require.ErrorIs(t, err, approvalstore.ErrConflict)
}

func TestStaleEditIsAMismatchBeforeItsArgumentsAreChecked(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	r := editRequest(-1)
	r.ArgsHash = hashB
	_, err := approvalstore.Decide(context.Background(), pool, r)
	require.ErrorIs(t, err, approvalstore.ErrArgsHashMismatch, "a stale hash is 409 whatever the arguments")
	_, err = approvalstore.Decide(context.Background(), pool, editRequest(-1))
	require.ErrorIs(t, err, approvalstore.ErrEditInvalid)
	assert.Contains(t, err.Error(), "/amount_cents")
	assert.Equal(t, 1, audited(t, pool, "decision = 'edit' AND outcome = 'invalid' AND detail LIKE '%amount_cents%'"))
}

func TestEditTheRunRefusedCanBeDecidedAgain(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := context.Background()
	_, err := approvalstore.Decide(ctx, pool, editRequest(100))
	require.NoError(t, err)
	found, err := approvalstore.RecordEditRefused(ctx, pool, "acme", "r1", 2, hashB, "the worker's schema refuses it")
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, 1, audited(t, pool, "outcome = 'refused_by_run' AND detail = 'the worker''s schema refuses it'"))

	d, err := approvalstore.Decide(ctx, pool, request())
	require.NoError(t, err, "the step is pending again, with no decision of record")
	assert.Equal(t, approvalstore.DecisionApprove, d.Decision.Decision)
	found, err = approvalstore.RecordEditRefused(ctx, pool, "acme", "r1", 2, hashB, "again")
	require.NoError(t, err)
	assert.False(t, found, "an approval of record is never taken off")
}
