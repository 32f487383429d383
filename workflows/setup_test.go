package workflows

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/tools"
)

// Test runs belong to this tenant and run id and start at t0.
const (
	testTenant = "acme/eu"
	testRunID  = "run 7/retry"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// maxTurns is how many times the fake planner answers before it fails the
// run, so that a run that never stops fails fast instead of hanging.
const maxTurns = 100

// harness is a test workflow environment whose activities are fakes that
// record how they were called. Its planner proposes calls one per turn, the
// call at PlanInput.PlanOffset + PlanInput.Proposed, and is done when they
// run out.
type harness struct {
	env   *testsuite.TestWorkflowEnvironment
	calls []activities.PlannedCall
	// Set before the run: batch makes the planner propose all the remaining
	// calls in one turn; silent makes it end by proposing nothing rather
	// than saying done; toolTime is how long each RunTool attempt takes;
	// replayed makes RunTool report results replayed from the dedup store.
	batch    bool
	parallel bool
	silent   bool
	toolTime time.Duration
	planTime time.Duration
	replayed bool
	// onTool, when set before the run, is called at each RunTool attempt;
	// a non-nil error is the attempt's result.
	onTool func(env *testsuite.TestWorkflowEnvironment, in activities.ToolInput) error
	// park, when set before the run, is called at each RunTool attempt: a
	// non-nil answer is the attempt's (the step would cross a limit).
	park func(in activities.ToolInput) *activities.Parked
	// onQuestion, when set before the run, is called at each RunTool
	// attempt: a non-nil answer is the attempt's (its server asks).
	onQuestion func(in activities.ToolInput) *activities.Question
	// treeDup, when set before the run, is called at each RunTool attempt:
	// a non-nil answer is the attempt's (another step of the run's tree
	// made the intent).
	treeDup func(in activities.ToolInput) *activities.TreeDuplicate
	// approvalErr, when set before the run, is what every RequestApproval
	// attempt returns; requestErr, when set, what the attempts of one step
	// return; requestTime is how long each attempt takes.
	approvalErr error
	requestErr  func(step int64) error
	requestTime time.Duration
	// resolveTime is how long each ResolveApproval attempt takes.
	resolveTime time.Duration
	// followUps, when set before the run, are the follow-on messages every
	// RunTool attempt reports.
	followUps []activities.FollowUpMessage
	// warnBefore, when set before the run, are the deadline warning points
	// RequestApproval answers; edits, when set, is the registry CheckEdit
	// checks edits against.
	warnBefore []time.Duration
	edits      *tools.Registry
	// made, when set before the run, are the steps the dedup store holds
	// completed (as a worker that died before recording them left them),
	// which MadeSteps answers.
	made map[int64]activities.MadeStep

	mu          sync.Mutex
	plans       []activities.PlanInput
	tools       []toolCall
	facts       []activities.RunFact
	requests    []activities.ApprovalRequest
	resolutions []activities.ApprovalResolution
	warnings    []warning
	editsOff    []activities.EditRefusal
	madeReads   []activities.MadeQuery
	started     []activity.Info // every activity attempt, in start order
}

// warning is one WarnApprovalDeadline attempt and the (test) time it ran.
type warning struct {
	In activities.DeadlineWarning
	At time.Time
}

// toolCall is one RunTool attempt and the (test) time it started.
type toolCall struct {
	In activities.ToolInput
	At time.Time
}

func setup(t *testing.T, calls ...activities.PlannedCall) *harness {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(testLogger(t))
	env := suite.NewTestWorkflowEnvironment()
	env.SetStartTime(t0)
	env.SetTestTimeout(time.Minute)
	env.RegisterWorkflow(AgentRun)
	h := &harness{env: env, calls: calls}
	env.OnActivity(a.Plan, mock.Anything, mock.Anything).Return(h.plan).
		AfterFn(func() time.Duration { return h.planTime })
	env.OnActivity(a.RunTool, mock.Anything, mock.Anything).Return(h.runTool).
		AfterFn(func() time.Duration { return h.toolTime })
	env.OnActivity(a.RequestApproval, mock.Anything, mock.Anything).Return(h.requestApproval).
		AfterFn(func() time.Duration { return h.requestTime })
	env.OnActivity(a.ResolveApproval, mock.Anything, mock.Anything).Return(h.resolveApproval).
		AfterFn(func() time.Duration { return h.resolveTime })
	env.OnActivity(a.WarnApprovalDeadline, mock.Anything, mock.Anything).Return(h.warnDeadline)
	env.OnActivity(a.CheckEdit, mock.Anything, mock.Anything).Return(h.checkEdit)
	env.OnActivity(a.MadeSteps, mock.Anything, mock.Anything).Return(h.madeSteps)
	env.OnActivity(a.RecordFacts, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.RecordFactsInput) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.facts = append(h.facts, in.Facts...)
		return nil
	})
	env.OnActivity(a.RecordEditRefused, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.EditRefusal) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.editsOff = append(h.editsOff, in)
		return nil
	})
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.started = append(h.started, *info)
	})
	env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.started = append(h.started, *info)
	})
	return h
}

func (h *harness) plan(_ context.Context, in activities.PlanInput) (activities.PlanOutput, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.facts = append(h.facts, in.Facts...)
	in.Facts = nil
	h.plans = append(h.plans, in)
	next := in.PlanOffset + in.Proposed
	switch {
	case len(h.plans) > maxTurns:
		return activities.PlanOutput{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("the run asked for more than %d turns", maxTurns), activities.ErrTypePlanner, nil)
	case next >= len(h.calls) && h.silent:
		return activities.PlanOutput{Message: "nothing more"}, nil
	case next >= len(h.calls):
		return activities.PlanOutput{Done: true, Message: "all done"}, nil
	case h.batch:
		return activities.PlanOutput{Calls: h.calls[next:], Parallel: h.parallel && len(h.calls[next:]) > 1}, nil
	}
	// As the script planner does: the calls the run sent, each checked,
	// and as the Plan activity answers a compact turn.
	n := max(1, len(in.Plan)-in.Proposed)
	calls := slices.Clone(h.calls[next:min(next+n, len(h.calls))])
	if in.Compact {
		for i := range calls {
			if calls[i].Invalid == "" && bytes.Equal(calls[i].Args, calls[i].Proposed.Args) {
				calls[i].Args = nil
			}
			calls[i].Proposed = planner.Call{}
		}
	}
	return activities.PlanOutput{Calls: calls}, nil
}

func (h *harness) runTool(_ context.Context, in activities.ToolInput) (activities.ToolOutput, error) {
	h.mu.Lock()
	// The run's facts are the story tests' (see events_test.go).
	h.facts = append(h.facts, in.Facts...)
	in.Facts = nil
	h.tools = append(h.tools, toolCall{In: in, At: h.env.Now()})
	h.mu.Unlock()
	if h.onTool != nil {
		if err := h.onTool(h.env, in); err != nil {
			return activities.ToolOutput{}, err
		}
	}
	if h.park != nil {
		if p := h.park(in); p != nil {
			return activities.ToolOutput{Parked: p}, nil
		}
	}
	if h.onQuestion != nil {
		if q := h.onQuestion(in); q != nil {
			return activities.ToolOutput{Question: q}, nil
		}
	}
	if h.treeDup != nil {
		if d := h.treeDup(in); d != nil {
			return activities.ToolOutput{Duplicate: d}, nil
		}
	}
	key, err := keys.New(in.Tenant, in.RunID, in.Step, in.Tool)
	if err != nil {
		return activities.ToolOutput{}, err
	}
	return activities.ToolOutput{Key: key.String(), Result: result(in.Step), Replayed: h.replayed, FollowUps: h.followUps}, nil
}

func (h *harness) madeSteps(_ context.Context, q activities.MadeQuery) (activities.MadeSteps, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.madeReads = append(h.madeReads, q)
	var out activities.MadeSteps
	for n := q.First; n <= q.Last; n++ {
		m, ok := h.made[n]
		if !ok {
			continue
		}
		m.Step = n
		out.Steps = append(out.Steps, m)
	}
	return out, nil
}

// storeReads returns the MadeSteps queries the run made.
func (h *harness) storeReads() []activities.MadeQuery {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]activities.MadeQuery(nil), h.madeReads...)
}

func (h *harness) requestApproval(_ context.Context, in activities.ApprovalRequest) (activities.ApprovalRecorded, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests = append(h.requests, in)
	if h.requestErr != nil {
		if err := h.requestErr(in.Step); err != nil {
			return activities.ApprovalRecorded{}, err
		}
	}
	return activities.ApprovalRecorded{WarnBefore: h.warnBefore}, h.approvalErr
}

func (h *harness) warnDeadline(_ context.Context, in activities.DeadlineWarning) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.warnings = append(h.warnings, warning{In: in, At: h.env.Now()})
	return nil
}

// checkEdit is the real CheckEdit against h.edits.
func (h *harness) checkEdit(ctx context.Context, in activities.EditCheck) (activities.EditChecked, error) {
	return (&activities.Activities{Tools: h.edits}).CheckEdit(ctx, in)
}

func (h *harness) resolveApproval(_ context.Context, in activities.ApprovalResolution) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.resolutions = append(h.resolutions, in)
	return nil
}

// testLogger logs through t, so a run's log shows only when its test fails
// or runs with -v, and nothing is logged once the test has ended.
func testLogger(t *testing.T) log.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.done = true
	})
	return log.NewStructuredLogger(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})))
}

type testWriter struct {
	t    *testing.T
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// beforeStepIdentity makes the run one that began before step identity
// (under spendLimits), as runs of the release before it replay.
func (h *harness) beforeStepIdentity() {
	h.env.OnGetVersion(bundledChanges, workflow.DefaultVersion, runEvents).Return(spendLimits)
}

// run executes the workflow to its end and returns its result.
func (h *harness) run(t *testing.T, in RunInput) Status {
	t.Helper()
	return runToEnd[Status](t, h.env, AgentRun, in)
}

// runToEnd executes workflow wf with in on env, requires it to complete
// without error, and returns its result.
func runToEnd[R any](t *testing.T, env *testsuite.TestWorkflowEnvironment, wf, in any) R {
	t.Helper()
	env.ExecuteWorkflow(wf, in)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res R
	require.NoError(t, env.GetWorkflowResult(&res))
	return res
}

// continuedAsNew returns the input with which the run, executed to its
// end, continued as new; it fails t if the run did otherwise.
func (h *harness) continuedAsNew(t *testing.T) RunInput {
	t.Helper()
	require.True(t, h.env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	require.True(t, errors.As(h.env.GetWorkflowError(), &can), "got %v", h.env.GetWorkflowError())
	var next RunInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	return next
}

// signalAt sends ap at d after the run started.
func (h *harness) signalAt(d time.Duration, ap ...Approval) {
	h.env.RegisterDelayedCallback(func() {
		for _, s := range ap {
			h.env.SignalWorkflow(SignalApproval, s)
		}
	}, d)
}

// queryAt returns the status the run reports at d after it started, filled
// in when the run gets there.
func (h *harness) queryAt(t *testing.T, d time.Duration) *Status {
	st := new(Status)
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(QueryStatus)
		if assert.NoError(t, err) {
			assert.NoError(t, v.Get(st))
		}
	}, d)
	return st
}

// Recorded calls, copied under the lock.

func (h *harness) planInputs() []activities.PlanInput {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]activities.PlanInput(nil), h.plans...)
}

func (h *harness) toolCalls() []toolCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]toolCall(nil), h.tools...)
}

func (h *harness) approvalRequests() []activities.ApprovalRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]activities.ApprovalRequest(nil), h.requests...)
}

func (h *harness) approvalResolutions() []activities.ApprovalResolution {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]activities.ApprovalResolution(nil), h.resolutions...)
}

// startedInfos returns the infos of the attempts of activityType.
func (h *harness) startedInfos(activityType string) []activity.Info {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []activity.Info
	for _, info := range h.started {
		if info.ActivityType.Name == activityType {
			out = append(out, info)
		}
	}
	return out
}

// stepKeys returns the idempotency keys of the RunTool attempts, in start
// order: the key RunTool derives from its input, whether the step ran as
// an activity or as a local activity.
func (h *harness) stepKeys(t *testing.T) []string {
	var out []string
	for _, c := range h.toolCalls() {
		k, err := keys.New(c.In.Tenant, c.In.RunID, c.In.Step, c.In.Tool)
		require.NoError(t, err)
		out = append(out, k.String())
	}
	return out
}

// startedIDs returns the activity IDs of the attempts of activityType.
func (h *harness) startedIDs(activityType string) []string {
	var out []string
	for _, info := range h.startedInfos(activityType) {
		out = append(out, info.ActivityID)
	}
	return out
}
