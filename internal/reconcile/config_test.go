package reconcile_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/reconcile"
	"github.com/oncerun/oncerun/internal/settings"
)

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	env := func(vars map[string]string) func(string) string { return func(n string) string { return vars[n] } }
	for name, value := range map[string]string{
		settings.EnvReconcileInterval:   "soon",
		settings.EnvReconcileSettlement: "-1m",
		settings.EnvReconcileLookback:   "1m",
		settings.EnvReconcileAlertAge:   "0s",
	} {
		_, err := reconcile.ConfigFromEnv(env(map[string]string{name: value}))
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), name)
	}
	cfg, err := reconcile.ConfigFromEnv(env(map[string]string{
		settings.EnvReconcileInterval: "2m", settings.EnvReconcileSettlement: "15m", settings.EnvReconcileLookback: "72h",
	}))
	require.NoError(t, err)
	assert.Equal(t, reconcile.Config{Interval: 2 * time.Minute, Settlement: 15 * time.Minute, Lookback: 72 * time.Hour}, cfg)
}
