package runs_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/mocks"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/workflows"
)

var hashA = strings.Repeat("a", 64)

// setup returns a pool holding the pending step 2 of run r1 of tenant acme
// and a client whose Temporal is tc.
func setup(t *testing.T) (*pgxpool.Pool, *mocks.Client, *runs.Client) {
	t.Helper()
	pool := pgtest.NewPool(t, 4)
	now := time.Now()
	require.NoError(t, approvalstore.RecordPending(context.Background(), pool, approvalstore.Request{
		Tenant: "acme", RunID: "r1", Step: 2, Tool: "issue_credit", Args: json.RawMessage(`{}`), ArgsHash: hashA,
		RequestedAt: now, Deadline: now.Add(time.Hour),
	}))
	tc := &mocks.Client{}
	return pool, tc, &runs.Client{Temporal: tc}
}

func request() approvalstore.DecisionRequest {
	return approvalstore.DecisionRequest{StepRequest: approvalstore.Local("acme", "r1", 2, "dana"), Decision: approvalstore.DecisionApprove, ArgsHash: hashA, Comment: "ok"}
}

func count(t *testing.T, pool *pgxpool.Pool, where string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM approval_decisions WHERE `+where).Scan(&n))
	return n
}

// TestDecideSignalsOnlyARecordedDecision: the run hears of a decision only
// once its audit row has committed, and never of a refused one.
func TestDecideSignalsOnlyARecordedDecision(t *testing.T) {
	t.Parallel()
	pool, tc, rc := setup(t)
	ctx := context.Background()
	tc.On("SignalWorkflow", mock.Anything, workflows.WorkflowID("acme", "r1"), "", workflows.SignalApproval,
		workflows.Approval{Step: 2, Decision: workflows.DecisionApprove, Approver: "dana", Comment: "ok", ArgsHash: hashA}).
		Run(func(mock.Arguments) {
			assert.Equal(t, 1, count(t, pool, "outcome = 'accepted'"), "the audit row commits before the signal")
		}).Return(nil).Once()

	for name, change := range map[string]func(*approvalstore.DecisionRequest){
		"a malformed args hash":  func(r *approvalstore.DecisionRequest) { r.ArgsHash = "abc" },
		"a comment with escapes": func(r *approvalstore.DecisionRequest) { r.Comment = "ok\x1b[2J" },
		"a viewer":               func(r *approvalstore.DecisionRequest) { r.May, r.Role = false, "viewer" },
	} {
		r := request()
		change(&r)
		_, err := rc.Decide(ctx, pool, r)
		var refused *approvalstore.RefusedError
		require.ErrorAs(t, err, &refused, name)
	}
	d, err := rc.Decide(ctx, pool, request())
	require.NoError(t, err)
	assert.False(t, d.Repeated)
	reject := request()
	reject.Decision = approvalstore.DecisionReject
	_, err = rc.Decide(ctx, pool, reject)
	require.ErrorIs(t, err, approvalstore.ErrConflict)

	tc.AssertExpectations(t)
	tc.AssertNumberOfCalls(t, "SignalWorkflow", 1)
	assert.Equal(t, 5, count(t, pool, "true"), "every request left its row")
}

// TestDecideReportsAnUndeliveredDecision: a recorded decision whose signal
// fails says so; a run that is not open can never apply it.
func TestDecideReportsAnUndeliveredDecision(t *testing.T) {
	t.Parallel()
	pool, tc, rc := setup(t)
	tc.On("SignalWorkflow", mock.Anything, mock.Anything, "", workflows.SignalApproval, mock.Anything).
		Return(errors.New("connection refused")).Once()
	tc.On("SignalWorkflow", mock.Anything, mock.Anything, "", workflows.SignalApproval, mock.Anything).
		Return(serviceerror.NewNotFound("workflow execution already completed")).Once()

	_, err := rc.Decide(context.Background(), pool, request())
	require.ErrorIs(t, err, runs.ErrUndelivered)
	assert.NotErrorIs(t, err, runs.ErrNotFound)
	assert.Contains(t, err.Error(), "the decision is recorded but the run could not be reached")

	d, err := rc.Decide(context.Background(), pool, request())
	require.ErrorIs(t, err, runs.ErrUndelivered, "a repeat while the step is pending is sent again")
	assert.True(t, d.Repeated)
	require.ErrorIs(t, err, runs.ErrNotFound)
	assert.Contains(t, err.Error(), "run r1 is no longer open and cannot apply it")
	assert.Equal(t, 1, count(t, pool, "outcome = 'accepted'"))
	tc.AssertExpectations(t)
}

// TestResolveSignalsOnlyARecordedAnswer: as for decisions.
func TestResolveSignalsOnlyARecordedAnswer(t *testing.T) {
	t.Parallel()
	pool, tc, rc := setup(t)
	ctx := context.Background()
	require.NoError(t, approvalstore.RecordUnresolved(ctx, pool, approvalstore.Resolution{Tenant: "acme", RunID: "r1", Step: 3,
		Round: 1, Tool: "refund_payment", Key: "k", Args: json.RawMessage(`{}`), ArgsHash: hashA, FirstSentAt: time.Now(),
		RequestedAt: time.Now(), Deadline: time.Now().Add(time.Hour)}))
	tc.On("SignalWorkflow", mock.Anything, workflows.WorkflowID("acme", "r1"), "", workflows.SignalResolve,
		workflows.Resolution{Step: 3, Round: 1, Outcome: workflows.OutcomeNotApplied, Resolver: "dana"}).Return(nil).Once()
	answer := approvalstore.ResolveRequest{StepRequest: approvalstore.Local("acme", "r1", 3, "dana"), Outcome: approvalstore.ResolutionNotApplied}

	bad := answer
	bad.Result = json.RawMessage(`{"id":"re_1"}`)
	_, err := rc.Resolve(ctx, pool, bad)
	require.ErrorIs(t, err, approvalstore.ErrInvalid)
	assert.Contains(t, err.Error(), "result is given only with outcome applied")
	res, err := rc.Resolve(ctx, pool, answer)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Decision.Round)
	tc.AssertExpectations(t)
	tc.AssertNumberOfCalls(t, "SignalWorkflow", 1)
}

// TestOnlyDecideAndResolveSendDecisions: the approval and resolve signals
// are sent from internal/runs/decide.go only, after the store has recorded
// the request; no other code could send a decision without its audit row.
func TestOnlyDecideAndResolveSendDecisions(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	var senders []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(rel, "workflows/") || strings.HasPrefix(rel, "internal/approvalstest/") {
			return nil // where the signals are defined and received, and the tests' fake Temporal that receives them
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(src), "SignalApproval") || strings.Contains(string(src), "SignalResolve") {
			senders = append(senders, rel)
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"internal/runs/decide.go"}, senders)
}
