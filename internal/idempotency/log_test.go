package idempotency_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/oncerun/oncerun/internal/idempotency"
)

func TestEveryLogLineNamesTheCall(t *testing.T) {
	t.Parallel()
	pool := setup(t).pool
	core, logs := observer.New(zapcore.DebugLevel)
	store, err := idempotency.New(pool, idempotency.Config{Owner: "worker-a", Logger: zap.New(core)})
	require.NoError(t, err)
	ctx := context.Background()
	c := claim(t, "acme", "r/1", 3, "add_order_note", `{"text":"hi"}`)
	var runs atomic.Int64

	_, err = store.Do(ctx, c, addNote(&runs, c, "hi"))
	require.NoError(t, err)
	_, err = store.Do(ctx, c, addNote(&runs, c, "hi"))
	require.NoError(t, err)
	_, err = store.Do(ctx, claim(t, "acme", "r/1", 3, "add_order_note", `{"text":"other"}`), addNote(&runs, c, "x"))
	require.ErrorIs(t, err, idempotency.ErrKeyReuse)
	ext := claim(t, "acme", "r/1", 4, "refund_payment", `{}`)
	b, err := store.Begin(ctx, ext)
	require.NoError(t, err)
	_, err = store.Complete(ctx, b.Lease, json.RawMessage(`{}`))
	require.NoError(t, err)

	entries := logs.AllUntimed()
	require.Len(t, entries, 5)
	for _, e := range entries {
		fields := e.ContextMap()
		assert.Equal(t, "acme", fields["tenant"], e.Message)
		assert.Equal(t, "r/1", fields["run_id"], e.Message)
		assert.Contains(t, []any{int64(3), int64(4)}, fields["step"], e.Message)
		assert.Contains(t, []any{"add_order_note", "refund_payment"}, fields["tool"], e.Message)
		assert.Contains(t, fields["key"], "v1/acme/r%2F1/", e.Message)
	}
	reuse := logs.FilterMessage("key reused with different arguments").All()
	require.Len(t, reuse, 1)
	assert.Equal(t, zapcore.ErrorLevel, reuse[0].Level)
}
