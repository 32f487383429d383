package temporalconn

import (
	"path/filepath"
	"strings"
)

// LocalEnv is environ for a child process that must reach a plain local
// Temporal server of its parent's (the demo's, the chaos harness's): every
// TEMPORAL_ variable is dropped and TEMPORAL_CONFIG_FILE names a file in dir
// that does not exist, so that an API key, TLS settings or a temporal.toml
// profile meant for another Temporal do not reach it. The caller adds the
// TEMPORAL_ variables the child needs.
func LocalEnv(environ []string, dir string) []string {
	out := make([]string, 0, len(environ)+1)
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "TEMPORAL_") {
			out = append(out, kv)
		}
	}
	return append(out, EnvConfigFile+"="+filepath.Join(dir, "no-temporal-profile.toml"))
}
