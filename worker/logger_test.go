package worker

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// TestLoggerEscapesWhatATerminalWouldObey: a log line carries text from
// requests and runs (a path, a run id); what a terminal would obey is
// escaped, in the JSON lines (which stay JSON) and in the console format of
// oncerun dev.
func TestLoggerEscapesWhatATerminalWouldObey(t *testing.T) {
	t.Parallel()
	path := "/v1/runs/r\u009b2J\u202e\x1b[31m"
	for _, console := range []bool{false, true} {
		var buf bytes.Buffer
		log, err := newLogger("info", console, &buf)
		require.NoError(t, err)
		log.Warn("approvals request with an unknown token", zap.String("path", path))
		require.NoError(t, log.Sync())
		out := buf.String()
		for _, raw := range []string{"\u009b", "\u202e", "\x1b"} {
			assert.NotContains(t, out, raw, "console %v", console)
		}
		assert.Contains(t, out, `\u009b`)
		assert.Contains(t, out, `\u202e`)
		if !console {
			var line map[string]any
			require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &line), out)
			assert.Equal(t, path, line["path"], "the JSON line keeps its meaning")
		}
	}
}
