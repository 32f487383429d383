package temporalconn_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/temporalconn"
)

func TestLocalEnvKeepsNoneOfTheUsersTemporalSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := temporalconn.LocalEnv([]string{"PATH=/bin", "TEMPORAL_API_KEY=secret", "TEMPORAL_TLS=true",
		"TEMPORAL_PROFILE=cloud", "TEMPORAL_GRPC_META_X=1", "HOME=/root", "XTEMPORAL_KEEP=1"}, dir)
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	opts, err := temporalconn.Load(func(k string) string { return m[k] })
	require.NoError(t, err)
	assert.Nil(t, opts.Credentials)
	assert.Nil(t, opts.ConnectionOptions.TLS)
	assert.Nil(t, opts.HeadersProvider)
	assert.Equal(t, "/bin", m["PATH"])
	assert.Equal(t, "1", m["XTEMPORAL_KEEP"])
	assert.Contains(t, m[temporalconn.EnvConfigFile], dir, "no profile of the user's is read")
}
