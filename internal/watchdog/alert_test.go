package watchdog_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/oncerun/oncerun/internal/watchdog"
)

// A key of a live run that the watchdog holds or prunes is an alert, and an
// alert is, among other things, an error log line naming the key, its run,
// its tool and its age: at the default level nothing about it may be
// silent.
func TestKeyOfALiveRunExpiringLogsAnError(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{watchdog.PolicyHold, watchdog.PolicyPrune} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			ctx := context.Background()
			core, logs := observer.New(zapcore.InfoLevel)
			f.acts.Log = zap.New(core)
			f.acts.Runs = fakeRuns{"r-open": "open"}
			_, err := f.pool.Exec(ctx, `
INSERT INTO idempotency_keys (tenant, key, run_id, step, tool, state, args_hash, result, completed_at, created_at, expires_at)
VALUES ('acme', 'v1/acme/r-open/1/add_order_note', 'r-open', 1, 'add_order_note', 'completed', repeat('a', 64), '{}',
        now() - interval '31 days', now() - interval '31 days', now() - interval '1 hour')`)
			require.NoError(t, err)

			out, err := f.acts.PruneExpired(ctx, watchdog.PruneInput{Cutoff: time.Now(), BatchSize: 10, Policy: policy})

			require.NoError(t, err)
			require.Equal(t, 1, out.Alerts)
			lines := logs.FilterMessage("key expired while its run is alive").All()
			require.Len(t, lines, 1)
			assert.Equal(t, zapcore.ErrorLevel, lines[0].Level)
			fields := lines[0].ContextMap()
			assert.Equal(t, "v1/acme/r-open/1/add_order_note", fields["key"])
			assert.Equal(t, "r-open", fields["run_id"])
			assert.Equal(t, "add_order_note", fields["tool"])
			assert.Equal(t, policy, fields["policy"])
			assert.Greater(t, fields["age"], 30*24*time.Hour)
		})
	}
}
