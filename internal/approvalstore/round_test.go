package approvalstore_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/approvalstore"
)

// A step approved under its rule that then meets a spend limit waits again
// in round 2 of the same row: a decision for round 1 is no decision of
// round 2, an approve of round 2 is an exception, and each round has its
// own decision of record.
func TestALimitsRoundIsDecidedOnItsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := setup(t) // r1 step 2, round 1, the rule's
	_, err := approvalstore.Decide(ctx, pool, request())
	require.NoError(t, err)
	decidedAt := t0.Add(time.Hour)
	ok, err := approvalstore.RecordOutcome(ctx, pool, approvalstore.Approval{Request: approvalstore.Request{
		Tenant: "acme", RunID: "r1", Step: 2, Round: 1,
	}, State: approvalstore.StateApproved, DecidedBy: "dana", DecidedAt: &decidedAt, Comment: "ok"})
	require.NoError(t, err)
	require.True(t, ok)

	limit := "over the daily cap for issue_credit: 1,950.00 of 2,000.00 EUR spent, this call 150.00"
	require.NoError(t, approvalstore.RecordPending(ctx, pool, approvalstore.Request{
		Tenant: "acme", RunID: "r1", Step: 2, Tool: "issue_credit", Args: json.RawMessage(`{"order_id":"1001"}`),
		ArgsHash: hashA, Goal: "refund", Reason: limit, RequestedBy: "ops", RequestedAt: t0.Add(2 * time.Hour),
		Deadline: t0.Add(74 * time.Hour), Kind: approvalstore.KindLimit, Round: 2,
	}))
	a, err := approvalstore.Lookup(ctx, pool, "acme", "r1", 2)
	require.NoError(t, err)
	assert.Equal(t, approvalstore.StatePending, a.State)
	assert.Equal(t, approvalstore.KindLimit, a.Kind)
	assert.Equal(t, 2, a.Round)
	assert.Equal(t, limit, a.Reason)

	// dana's approve of round 1, sent again: refused, the step now waits
	// at a limit.
	stale := request()
	stale.Round = 1
	_, err = approvalstore.Decide(ctx, pool, stale)
	require.ErrorIs(t, err, approvalstore.ErrRoundChanged)
	assert.Contains(t, err.Error(), "round 2")
	assert.Contains(t, err.Error(), "spend limit")
	assert.Equal(t, 1, audited(t, pool, "outcome = 'not_pending' AND round = 2"))
	// A request that names no round is for the first.
	_, err = approvalstore.Decide(ctx, pool, request())
	require.ErrorIs(t, err, approvalstore.ErrRoundChanged)

	// An approve of round 2 is accepted as an exception; round 1's
	// decision of record stays.
	exc := request()
	exc.Round, exc.By, exc.Comment = 2, "erin", "the customer is owed it"
	d, err := approvalstore.Decide(ctx, pool, exc)
	require.NoError(t, err)
	assert.False(t, d.Repeated)
	assert.True(t, d.Deliver)
	assert.Equal(t, 1, audited(t, pool, "outcome = 'accepted' AND round = 1 AND approver = 'dana' AND NOT exception"))
	assert.Equal(t, 1, audited(t, pool, "outcome = 'accepted' AND round = 2 AND approver = 'erin' AND exception"))

	// A reject of round 2 after it is a conflict with round 2's record,
	// not with round 1's.
	rej := request()
	rej.Decision, rej.Round = approvalstore.DecisionReject, 2
	_, err = approvalstore.Decide(ctx, pool, rej)
	require.ErrorIs(t, err, approvalstore.ErrConflict)
	assert.Contains(t, err.Error(), "erin")
}
