package host_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/host"
)

func TestReconcileConfigFromEnv(t *testing.T) {
	t.Parallel()
	env := func(vars map[string]string) func(string) string { return func(n string) string { return vars[n] } }
	for name, value := range map[string]string{
		host.EnvReconcileInterval:   "soon",
		host.EnvReconcileSettlement: "-1m",
		host.EnvReconcileLookback:   "1m",
		host.EnvReconcileAlertAge:   "0s",
	} {
		_, err := host.ReconcileConfigFromEnv(env(map[string]string{name: value}))
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), name)
	}
	cfg, err := host.ReconcileConfigFromEnv(env(map[string]string{
		host.EnvReconcileInterval: "2m", host.EnvReconcileSettlement: "15m", host.EnvReconcileLookback: "72h",
	}))
	require.NoError(t, err)
	assert.Equal(t, host.ReconcileConfig{Interval: 2 * time.Minute, Settlement: 15 * time.Minute, Lookback: 72 * time.Hour}, cfg)
}
