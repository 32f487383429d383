package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// replayOf runs `oncerun replay args...` in an environment that reaches
// no Temporal server and returns what it printed and its exit status.
func replayOf(t *testing.T, args ...string) (string, int) {
	t.Helper()
	root := NewRoot(Env{TemporalAddress: "127.0.0.1:1"})
	root.SetArgs(append([]string{"replay"}, args...))
	var out bytes.Buffer
	err := Execute(context.Background(), root, &out, &out)
	return out.String(), ExitCode(err)
}

var recordedHistory = filepath.Join("..", "..", "workflows", "testdata", "histories", "TestCLIStartApproveStatus.json")

func TestReplayUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no way to find runs", nil, "give one of --run-id R (with --tenant T), --query Q or --history FILE"},
		{"two ways", []string{"--run-id", "r1", "--tenant", "acme", "--history", recordedHistory}, "give one of"},
		{"a run with no tenant", []string{"--run-id", "r1"}, "give --tenant T with --run-id"},
		{"a tenant with no run", []string{"--query", "x", "--tenant", "acme"}, "--tenant goes with --run-id"},
		{"an empty query", []string{"--query", ""}, "--query is empty"},
		{"a limit with no query", []string{"--history", recordedHistory, "--limit", "5"}, "--limit goes with --query"},
		{"a limit of none", []string{"--query", "x", "--limit", "0"}, "--limit 0: want at least 1"},
		{"an unknown flag", []string{"--all"}, "unknown flag: --all"},
		{"an argument", []string{"r1"}, "unknown command \"r1\""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, code := replayOf(t, tt.args...)
			assert.Equal(t, 2, code, out)
			assert.Contains(t, out, tt.want)
		})
	}
}

func TestReplayOfARecordedHistoryExits0(t *testing.T) {
	t.Parallel()
	out, code := replayOf(t, "--history", recordedHistory, "--json")
	require.Equal(t, 0, code, out)
	var rep struct {
		Runs []struct {
			RunID string `json:"run_id"`
			OK    bool   `json:"ok"`
		} `json:"runs"`
		Checked int `json:"checked"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Len(t, rep.Runs, 1)
	assert.True(t, rep.Runs[0].OK)
	assert.Equal(t, "r1-1", rep.Runs[0].RunID)
	assert.Equal(t, 1, rep.Checked)
}

func TestReplayWithTemporalUnreachableExits2(t *testing.T) {
	t.Parallel()
	out, code := replayOf(t, "--query", `ExecutionStatus = "Running"`)
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "127.0.0.1:1")
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	assert.Equal(t, 0, ExitCode(nil))
	assert.Equal(t, 1, ExitCode(errors.New("failed")))
	assert.Equal(t, 2, ExitCode(errors.Join(&ExitError{Code: 2, Err: errors.New("usage")}, nil)))
	assert.Equal(t, 1, ExitCode(&ExitError{Code: 1, Err: errors.New("runs break")}))
}
