package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/replay"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/workflows"
)

// replayCLI runs `<bin> replay args...` against the test's Temporal
// server and returns what it printed and its exit status.
func replayCLI(t testing.TB, bin string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"replay"}, args...)...)
	cmd.Env = append(localEnv(t, cmd.Environ()), "TEMPORAL_ADDRESS="+frontend, "TEMPORAL_NAMESPACE="+namespace)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode()
	}
	require.NoError(t, err, "%s replay %s:\n%s", bin, strings.Join(args, " "), out)
	return string(out), 0
}

// listed waits until the visibility query q (ANDed with the agent run's
// workflow type) matches n runs: visibility lags the runs' own state.
func listed(t testing.TB, q string, n int, within time.Duration) {
	t.Helper()
	var got int64
	require.Eventually(t, func() bool {
		resp, err := temporalClient.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{
			Namespace: namespace, Query: replay.ListQuery(q),
		})
		if err != nil {
			return false
		}
		got = resp.GetCount()
		return got == int64(n)
	}, within, 100*time.Millisecond, "%s matches %d runs, not %d", q, got, n)
}

// `oncerun replay` checks a build against runs a worker recorded: the
// loyalty build's worker (oncerun with award_points) made a run that
// waits for the approval of a credit, one that waits for the approval of
// an award of points, and one that completed. The loyalty build finds
// every run ok, and so does oncerun's build of the runs whose tools it
// has; oncerun's build checked against all three names the run, the step
// and the tool it lacks: once approved, the award would fail on it.
func TestReplayChecksABuildAgainstTheRunsOfItsDeployment(t *testing.T) {
	t.Parallel()
	e := setup(t)
	oncerunCmd, loyaltyCmd := buildOncerun(t), buildLoyalty(t)
	w := startCommandWorker(t, e, loyaltyCmd)
	w.logged("worker started")
	ctx := context.Background()
	credit, points, done := e.id("replay-credit"), e.id("replay-points"), e.id("replay-done")
	for run, plan := range map[string][]planner.Call{
		credit: refundPlan("25900"),
		points: {
			jsonCall(shop.ToolLookupOrder, `{"order_id":"1001"}`),
			jsonCall("award_points", `{"customer_id":"c-42","points":2500,"reason":"apology for the damaged parcel"}`),
		},
		done: {
			jsonCall(shop.ToolLookupOrder, `{"order_id":"1001"}`),
			jsonCall(shop.ToolAddOrderNote, `{"order_id":"1001","text":"checked"}`),
		},
	} {
		_, err := e.runs.Start(ctx, workflows.RunInput{Tenant: "acme", RunID: run, Plan: plan})
		require.NoError(t, err)
	}
	for _, run := range []string{credit, points} {
		e.waitFor("acme", run, "its approval", func(s workflows.Status) bool { return s.State == workflows.RunWaitingForApproval })
	}
	require.Equal(t, workflows.RunCompleted, e.result("acme", done).State)
	queue := fmt.Sprintf(`TaskQueue = %q`, e.queue)
	listed(t, queue, 3, time.Minute)
	listed(t, queue+` AND ExecutionStatus = "Completed"`, 1, time.Minute)

	out, code := replayCLI(t, loyaltyCmd, "--query", queue)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "checked 3 runs: 3 ok, 0 replay failed, 0 identity would change")

	out, code = replayCLI(t, oncerunCmd, "--run-id", credit, "--tenant", "acme")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "run "+credit+" of tenant acme: ok")
	out, code = replayCLI(t, oncerunCmd, "--query", queue+` AND WorkflowId != "`+workflows.WorkflowID("acme", points)+`"`)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "checked 2 runs: 2 ok, 0 replay failed, 0 identity would change")

	out, code = replayCLI(t, oncerunCmd, "--query", queue, "--limit", "10")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "run "+points+" of tenant acme: identity would change: "+
		"step 2 award_points waits for approval, and this build has no tool award_points: once approved it would fail")
	assert.Contains(t, out, "run "+credit+" of tenant acme: ok")
	assert.Contains(t, out, "run "+done+" of tenant acme: ok")
	assert.Contains(t, out, "checked 3 runs: 2 ok, 0 replay failed, 1 identity would change")
}

// A history this build's code does not produce (a recorded one, its
// first step's activity renamed) fails its replay: `oncerun replay
// --history` exits 1 naming the event; the history as recorded is ok.
func TestReplayOfAHistoryTheBuildDoesNotProduceNamesTheEvent(t *testing.T) {
	t.Parallel()
	bin := buildOncerun(t)
	recorded := filepath.Join("..", "..", "workflows", "testdata", "histories", "TestCreditEmailsTheCustomerOnce.json")
	h, err := replay.ReadFile(recorded)
	require.NoError(t, err)
	renamed := false
	for _, ev := range h.GetEvents() {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a.GetActivityType().GetName() == "RunTool" {
			a.ActivityType.Name, renamed = "RunToolBefore", true
			break
		}
	}
	require.True(t, renamed)
	altered := filepath.Join(t.TempDir(), "altered.json")
	writeHistory(t, altered, h)

	out, code := replayCLI(t, bin, "--history", recorded)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, ": ok")

	out, code = replayCLI(t, bin, "--history", altered)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "history "+altered+" (run credit-mail-2 of tenant acme): replay failed at event 11 ActivityTaskScheduled: "+
		"[TMPRL1100] nondeterministic workflow: history event is ActivityTaskScheduled")
	assert.Contains(t, out, "checked 1 run: 0 ok, 1 replay failed, 0 identity would change")

	out, code = replayCLI(t, bin, "--history", altered, "--run-id", "r1")
	assert.Equal(t, 2, code, "a usage error:\n%s", out)
}

// writeHistory writes h to path as JSON, as `temporal workflow show
// --output json` does.
func writeHistory(t *testing.T, path string, h *historypb.History) {
	t.Helper()
	b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(h)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o644))
}
