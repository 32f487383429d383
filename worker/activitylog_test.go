package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/activities"
)

// TestActivityLogLinesAroundEachAttempt: a worker logs a line as each
// activity attempt starts and one as it returns, with what the chaos
// harness pairs them by: the pid, the workflow, the activity and the
// attempt; a step's lines name the step too.
func TestActivityLogLinesAroundEachAttempt(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log, err := newLogger("info", false, &buf)
	require.NoError(t, err)
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.SetWorkerOptions(sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{newActivityLog(log)}})
	var startedLines int
	env.RegisterActivityWithOptions(func(ctx context.Context, in activities.ToolInput) (string, error) {
		startedLines = bytes.Count(buf.Bytes(), []byte(`"msg":"`+LogActivityStarted+`"`))
		if in.Step == 2 {
			return "", errors.New("tool failed")
		}
		return "ok", nil
	}, activity.RegisterOptions{Name: "RunTool"})

	_, err = env.ExecuteActivity("RunTool", activities.ToolInput{Tenant: "acme", RunID: "run-1", Step: 1, Tool: "add_order_note"})
	require.NoError(t, err)
	assert.Equal(t, 1, startedLines, "the start is logged before the activity runs")
	_, err = env.ExecuteActivity("RunTool", activities.ToolInput{Tenant: "acme", RunID: "run-1", Step: 2, Tool: "issue_credit"})
	require.Error(t, err)
	require.NoError(t, log.Sync())

	var lines []map[string]any
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		var line map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line), sc.Text())
		lines = append(lines, line)
	}
	require.Len(t, lines, 4)
	for i, want := range []struct {
		msg    string
		step   float64
		failed any
	}{
		{LogActivityStarted, 1, nil}, {LogActivityFinished, 1, false},
		{LogActivityStarted, 2, nil}, {LogActivityFinished, 2, true},
	} {
		l := lines[i]
		assert.Equal(t, "info", l["level"], "line %d", i)
		assert.Equal(t, want.msg, l["msg"], "line %d", i)
		assert.Equal(t, float64(os.Getpid()), l["pid"], "line %d", i)
		assert.Equal(t, "RunTool", l["activity_type"], "line %d", i)
		assert.Equal(t, float64(1), l["attempt"], "line %d", i)
		assert.Equal(t, false, l["local"], "line %d", i)
		assert.Equal(t, want.step, l["step"], "line %d", i)
		assert.Equal(t, "run-1", l["run_id"], "line %d", i)
		assert.Equal(t, want.failed, l["failed"], "line %d", i)
		for _, k := range []string{"ts", "workflow_id", "workflow_run_id", "activity_id"} {
			assert.Contains(t, l, k, "line %d", i)
		}
	}
}
