package worker_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/testcerts"
	"github.com/oncerun/oncerun/worker"
)

// TestConfigFromEnvReachesTemporalAsTheTemporalCLIDoes: the worker's
// configuration carries the address, namespace, TLS and API key that the
// temporal CLI's variables give, its own TEMPORAL_CONNECT_WAIT, and the
// client options it dials with.
func TestConfigFromEnvReachesTemporalAsTheTemporalCLIDoes(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "test CA")
	env := map[string]string{
		"TEMPORAL_CONFIG_FILE":             filepath.Join(t.TempDir(), "none.toml"),
		"TEMPORAL_ADDRESS":                 "ns.acct.tmprl.cloud:7233",
		"TEMPORAL_NAMESPACE":               "ns.acct",
		"TEMPORAL_API_KEY":                 "secret",
		"TEMPORAL_TLS_SERVER_CA_CERT_PATH": ca.CertPath,
		"TEMPORAL_CONNECT_WAIT":            "5m",
	}
	cfg, _, err := worker.ConfigFromEnv(func(k string) string { return env[k] })
	require.NoError(t, err)
	assert.Equal(t, "ns.acct.tmprl.cloud:7233", cfg.TemporalAddress)
	assert.Equal(t, "ns.acct", cfg.Namespace)
	assert.Equal(t, 5*time.Minute, cfg.TemporalConnectWait)
	opts := cfg.WithDefaults().TemporalClientOptions(cfg.WithDefaults().Logger)
	assert.Equal(t, "ns.acct.tmprl.cloud:7233", opts.HostPort)
	assert.Equal(t, "ns.acct", opts.Namespace)
	assert.NotNil(t, opts.Credentials, "the API key")
	require.NotNil(t, opts.ConnectionOptions.TLS)
	assert.NotNil(t, opts.ConnectionOptions.TLS.RootCAs, "the server CA")
	assert.NotNil(t, opts.Logger)

	env["TEMPORAL_TLS_CLIENT_CERT_PATH"] = filepath.Join(t.TempDir(), "missing.pem")
	_, _, err = worker.ConfigFromEnv(func(k string) string { return env[k] })
	assert.ErrorContains(t, err, "TEMPORAL_TLS_CLIENT_CERT_PATH "+env["TEMPORAL_TLS_CLIENT_CERT_PATH"])
}

func TestEnvNamesListTheTemporalCLIsVariables(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"TEMPORAL_ADDRESS", "TEMPORAL_API_KEY", "TEMPORAL_TLS_CLIENT_CERT_PATH",
		"TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_PROFILE", "TEMPORAL_CONFIG_FILE", "TEMPORAL_CONNECT_WAIT"} {
		assert.Contains(t, settings.EnvNames, name)
	}
	seen := map[string]bool{}
	for _, name := range settings.EnvNames {
		assert.False(t, seen[name], "%s listed once", name)
		seen[name] = true
	}
}
