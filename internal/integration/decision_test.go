package integration

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/workflows"
)

// decide decides a step of a run of tenant acme that waits for approval,
// for the step's arguments, through the one path every decision takes (as
// the CLI without ONCERUN_API does: an audit row via cli, then the signal),
// and waits up to 30 seconds for the run to apply it.
func (e *env) decide(runID string, step int64, decision workflows.Decision, approver, comment string) workflows.Step {
	e.t.Helper()
	ctx := context.Background()
	st := e.status("acme", runID)
	require.Greater(e.t, len(st.Steps), int(step-1))
	d, err := e.runs.Decide(ctx, e.pool, approvalstore.DecisionRequest{StepRequest: approvalstore.Local("acme", runID, step, approver), Decision: string(decision), ArgsHash: st.Steps[step-1].ArgsHash, Comment: comment})
	require.NoError(e.t, err)
	s, err := e.runs.AwaitDecision(ctx, d.Decision, 30*time.Second)
	require.NoError(e.t, err)
	return s
}

// startCLIRun starts the example refund run with the CLI and waits for its
// credit (step 3) to ask for approval.
func (e *env) startCLIRun(run string) {
	e.t.Helper()
	out, err := e.oncerun("start", "--tenant", "acme", "--run-id", run, "--plan", filepath.Join("..", "..", "examples", "refund.json"))
	require.NoError(e.t, err, out)
	e.waitFor("acme", run, "the credit's approval", func(s workflows.Status) bool {
		return s.State == workflows.RunWaitingForApproval
	})
}

// TestCLIDirectDecisionIsAudited: `oncerun approve` without ONCERUN_API
// records exactly one audit row naming the approver (--as, or $USER) and
// the channel (via cli, role local), and the run proceeds.
func TestCLIDirectDecisionIsAudited(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", worker.Options{})
	run := e.id("audited")
	e.startCLIRun(run)

	out, err := e.oncerun("approve", "--tenant", "acme", "--run-id", run, "--step", "3", "--as", "sam", "--comment", "photos ok", "--json")
	require.NoError(t, err, out)
	var res approvals.DecideResponse
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	assert.False(t, res.Repeated)
	d := res.Decision
	assert.Equal(t, []string{run, "approve", "sam", "local", "photos ok", "cli"},
		[]string{d.RunID, string(d.Decision), d.Approver, string(d.Role), d.Comment, d.Via})
	assert.EqualValues(t, 3, d.Step)
	assert.Len(t, d.ArgsHash, 64)

	final := e.result("acme", run)
	assert.Equal(t, workflows.RunCompleted, final.State)
	assert.Equal(t, workflows.StepDone, final.Steps[2].State)
	assert.Equal(t, "sam", final.Steps[2].Approval.Approver)
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme'"))
	assert.Equal(t, 1, e.count("approval_decisions", "run_id = $1", run), "exactly one audit row")
	assert.Equal(t, 1, e.count("approval_decisions", `run_id = $1 AND step = 3 AND outcome = 'accepted' AND decision = 'approve'
		AND approver = 'sam' AND via = 'cli' AND role = 'local' AND remote_addr = 'local' AND comment = 'photos ok'
		AND args_hash = $2`, run, d.ArgsHash))
	assert.Equal(t, 1, e.count("approvals", "run_id = $1 AND state = 'approved' AND decided_by = 'sam'", run))

	// Without --as the approver is $USER (dana here); a rejection too.
	other := e.id("rejected")
	e.startCLIRun(other)
	out, err = e.oncerun("reject", "--tenant", "acme", "--run-id", other, "--step", "3")
	require.NoError(t, err, out)
	assert.Contains(t, out, "rejected step 3 (issue_credit) of run "+other+" as dana")
	assert.Equal(t, workflows.StepRejected, e.result("acme", other).Steps[2].State)
	assert.Equal(t, 1, e.count("approval_decisions", "run_id = $1", other))
	assert.Equal(t, 1, e.count("approval_decisions",
		"run_id = $1 AND outcome = 'accepted' AND decision = 'reject' AND approver = 'dana' AND via = 'cli'", other))
}

// TestCLIDirectDecisionOfADecidedStepWritesNothing: a step the run has
// decided is refused, saying who decided it, before anything is recorded
// or sent.
func TestCLIDirectDecisionOfADecidedStepWritesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", worker.Options{})
	run := e.id("decided")
	e.startCLIRun(run)
	out, err := e.oncerun("approve", "--tenant", "acme", "--run-id", run, "--step", "3", "--as", "sam")
	require.NoError(t, err, out)
	require.Equal(t, workflows.RunCompleted, e.result("acme", run).State)
	require.Equal(t, 1, e.count("approval_decisions", "true"))

	for _, verb := range []string{"approve", "reject"} {
		out, err = e.oncerun(verb, "--tenant", "acme", "--run-id", run, "--step", "3", "--as", "olga")
		require.Error(t, err, out)
		assert.Contains(t, err.Error(), "step 3 (issue_credit) is done: step is not pending approval; it was approved by sam at ", verb)
	}
	assert.Equal(t, 1, e.count("approval_decisions", "true"), "the refused decisions wrote nothing")
}

// TestCLIDirectDecisionFollowsTheDecisionOfRecord: a decision recorded
// but not yet applied (the service could not reach the run) is the
// decision of record for the CLI too: the same decision sends it again and
// the run proceeds; another is refused as a conflict, audited as the
// service audits it.
func TestCLIDirectDecisionFollowsTheDecisionOfRecord(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w1", worker.Options{})
	run := e.id("recorded")
	e.startCLIRun(run)
	st := e.status("acme", run)
	// Recorded through the approvals service's API, whose signal was lost.
	_, err := approvalstore.Decide(context.Background(), e.pool, approvalstore.DecisionRequest{
		StepRequest: approvalstore.StepRequest{Tenant: "acme", RunID: run, Step: 3, By: "olga", Role: "approver", May: true,
			RemoteAddr: "127.0.0.1", Via: approvalstore.ViaAPI},
		Decision: approvalstore.DecisionApprove, ArgsHash: st.Steps[2].ArgsHash,
	})
	require.NoError(t, err)

	out, err := e.oncerun("reject", "--tenant", "acme", "--run-id", run, "--step", "3")
	require.Error(t, err, out)
	assert.Contains(t, err.Error(), "was already approved by olga at ")
	assert.Contains(t, err.Error(), "a decision cannot be changed")

	out, err = e.oncerun("approve", "--tenant", "acme", "--run-id", run, "--step", "3")
	require.NoError(t, err, out)
	assert.True(t, strings.HasPrefix(out, "step 3 of run "+run+" was already approved by olga at "), out)
	final := e.result("acme", run)
	assert.Equal(t, workflows.RunCompleted, final.State)
	assert.Equal(t, "olga", final.Steps[2].Approval.Approver, "the run applied the decision of record")
	assert.Equal(t, 1, e.count("approval_decisions", "run_id = $1 AND outcome = 'accepted' AND approver = 'olga' AND via = 'api'", run))
	assert.Equal(t, 1, e.count("approval_decisions", "run_id = $1 AND outcome = 'conflict' AND approver = 'dana' AND via = 'cli'", run))
	assert.Equal(t, 1, e.count("approval_decisions", "run_id = $1 AND outcome = 'repeated' AND approver = 'dana' AND via = 'cli'", run))
}
