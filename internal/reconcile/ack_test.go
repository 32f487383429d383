package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/reconcile"
	"github.com/oncerun/oncerun/internal/untrusted"
)

// open records one finding and returns its id.
func open(t *testing.T, f *fixture) int64 {
	t.Helper()
	f.ledger = append(f.ledger, refund("re_1", key(t, "r1", 3), 2500, "eur", f.now.Add(-time.Hour)))
	rep, err := reconcile.Pass(context.Background(), f.config())
	require.NoError(t, err)
	require.Len(t, rep.Findings, 1)
	return rep.Findings[0].ID
}

func TestAckUnknownFinding(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := reconcile.Ack(context.Background(), f.pool, 4242, "alice", "checked")
	require.ErrorIs(t, err, reconcile.ErrNotFound)
}

func TestAckTwice(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	id := open(t, f)
	first, err := reconcile.Ack(ctx, f.pool, id, "alice", "refunded by hand")
	require.NoError(t, err)

	again, err := reconcile.Ack(ctx, f.pool, id, "alice", "refunded by hand")
	require.NoError(t, err, "the same acknowledgement again is a harmless retry")
	assert.Equal(t, first, again)

	other, err := reconcile.Ack(ctx, f.pool, id, "bob", "something else")
	require.ErrorIs(t, err, reconcile.ErrAlreadyAcked)
	assert.Equal(t, first, other, "returned as it stands, unchanged")
}

func TestAckRefusesBadText(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	id := open(t, f)
	_, err := reconcile.Ack(ctx, f.pool, id, "alice", "")
	require.ErrorContains(t, err, "note is empty")
	_, err = reconcile.Ack(ctx, f.pool, id, "", "checked")
	require.ErrorContains(t, err, "no one named")
	_, err = reconcile.Ack(ctx, f.pool, id, "alice", "ok\x1b[2J")
	require.ErrorIs(t, err, untrusted.ErrInvalid)

	rep, err := reconcile.Pass(ctx, f.config())
	require.NoError(t, err)
	assert.Equal(t, 1, rep.DriftCount, "still open")
}

func TestOpenSumsTheFindingsNobodyAcknowledged(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	id := open(t, f)
	rep, err := reconcile.Open(ctx, f.pool)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.DriftCount)
	_, err = reconcile.Ack(ctx, f.pool, id, "alice", "refunded by hand")
	require.NoError(t, err)
	rep, err = reconcile.Open(ctx, f.pool)
	require.NoError(t, err)
	assert.Zero(t, rep.DriftCount, "an acknowledged finding leaves the sums")
}
