package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/spend"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// memoInputHash is the memo field of a run's workflow that holds its
// input's hash ([InputHash]).
const memoInputHash = "oncerun_input_hash"

var (
	// ErrNotFound means the tenant has no such run, or no such step.
	ErrNotFound = errors.New("not found")
	// ErrConflict means a run id was started before with another input.
	ErrConflict = errors.New("run id already used with another input")
	// ErrNotPending means a step is not waiting for a decision.
	ErrNotPending = errors.New("step is not pending approval")
	// ErrDecisionNotApplied means the run did not apply the decision it was
	// sent: it recorded the step otherwise (its deadline came first, or
	// another decision reached it).
	ErrDecisionNotApplied = errors.New("decision not applied by the run")
)

// DefaultSignalTimeout is the default of Client.SignalTimeout.
const DefaultSignalTimeout = 10 * time.Second

// Client starts and steers runs.
type Client struct {
	// Temporal is the connected Temporal client.
	Temporal client.Client
	// TaskQueue is where runs start. Default workflows.DefaultTaskQueue.
	TaskQueue string
	// Pool holds the approvals tables; only Pending and Unresolved need
	// it (Decide and Resolve are given theirs). When set, Status also
	// reads what the run's steps spent (Status.Spend).
	Pool *pgxpool.Pool
	// SignalTimeout bounds the signal Decide and Resolve send once a
	// decision is recorded, however little time the caller's context has
	// left. Default DefaultSignalTimeout.
	SignalTimeout time.Duration
	// Tools checks an edit's arguments against the step's tool (schema
	// and edit rule) before the edit is recorded. Without it, edits are
	// refused.
	Tools *tools.Registry
}

func (c *Client) taskQueue() string {
	if c.TaskQueue == "" {
		return workflows.DefaultTaskQueue
	}
	return c.TaskQueue
}

// Started is the result of [Client.Start].
type Started struct {
	WorkflowID string `json:"workflow_id"`
	// RunID is the Temporal run ID of the workflow execution.
	RunID string `json:"temporal_run_id"`
	// Existing is true when the run had been started before with the same
	// input and nothing new was started.
	Existing bool `json:"existing"`
}

// InputHash is the SHA-256 of a run input's canonical JSON, as the caller
// gave it (a default that changes between releases does not make a repeated
// start a conflict): two starts of a run are the same request when their
// hashes match. Who starts a run is not part of its input: two operators
// starting the same run start one run.
func InputHash(in workflows.RunInput) (string, error) {
	in.Carry, in.StartedBy = nil, ""
	b, err := json.Marshal(in)
	if err != nil {
		return "", fmt.Errorf("encode run input: %w", err)
	}
	hash, err := keys.ArgsHash(b)
	if err != nil {
		return "", fmt.Errorf("hash the run input: %w", err)
	}
	return hash, nil
}

// Start starts the run, or finds it started. The same run with the same
// input returns the existing run with Existing set; with another input it
// returns an error wrapping [ErrConflict].
func (c *Client) Start(ctx context.Context, in workflows.RunInput) (Started, error) {
	if err := in.Validate(); err != nil {
		return Started{}, err
	}
	hash, err := InputHash(in)
	if err != nil {
		return Started{}, err
	}
	id := workflows.WorkflowID(in.Tenant, in.RunID)
	run, err := c.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                    id,
		TaskQueue:             c.taskQueue(),
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		// A run id started before answers "already started", whether that
		// run is open or closed: then, and only then, is it asked for its
		// input's hash. A new run costs the start alone.
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		WorkflowTaskTimeout:                      RunTaskTimeout,
		// Where this process also runs a worker on the task queue (the
		// approvals service inside a worker, as dev runs it), the run's
		// first workflow task comes back with the start's answer instead
		// of through the task queue. Elsewhere it changes nothing.
		EnableEagerStart: true,
		Memo:             map[string]any{memoInputHash: hash},
	}, workflows.AgentRun, in)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case errors.As(err, &already):
		return c.existing(ctx, in, id, already.RunId, hash)
	case err != nil:
		return Started{}, fmt.Errorf("start run %s: %w", in.RunID, err)
	}
	return Started{WorkflowID: id, RunID: run.GetRunID()}, nil
}

// RunTaskTimeout is a run's workflow task timeout. A database tool's step
// runs in the workflow task (a local activity), so a worker that dies in
// it hands the run on when the task times out: within this and a retry's
// dispatch, as a step of an external tool is retried within its heartbeat
// timeout. A step that takes longer keeps its task: the worker's SDK
// heartbeats the task while a local activity runs.
const RunTaskTimeout = 5 * time.Second

// existing answers a start of a run id that was started before: the
// existing run when its input hash is this request's, ErrConflict
// otherwise.
func (c *Client) existing(ctx context.Context, in workflows.RunInput, id, runID, hash string) (Started, error) {
	desc, err := c.Temporal.DescribeWorkflowExecution(ctx, id, runID)
	if err != nil {
		return Started{}, fmt.Errorf("describe run %s: %w", in.RunID, err)
	}
	var theirHash string
	if p := desc.GetWorkflowExecutionInfo().GetMemo().GetFields()[memoInputHash]; p != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &theirHash)
	}
	if theirHash != hash {
		return Started{}, fmt.Errorf("run %s of tenant %s: %w (input hash %s, this request's %s)",
			in.RunID, in.Tenant, ErrConflict, theirHash, hash)
	}
	return Started{WorkflowID: id, RunID: desc.GetWorkflowExecutionInfo().GetExecution().GetRunId(), Existing: true}, nil
}

// Status returns the run's status and, when c.Pool is set, what its steps
// spent against its budget, per currency (Status.Spend).
func (c *Client) Status(ctx context.Context, tenant, runID string) (workflows.Status, error) {
	st, err := c.query(ctx, tenant, runID)
	if err != nil || c.Pool == nil {
		return st, err
	}
	// What the run's steps counted lives in PostgreSQL, not in the run: a
	// database tool's amount commits with its effect.
	if st.Spend, err = spend.RunTotals(ctx, c.Pool, tenant, runID, st.Budget); err != nil {
		return workflows.Status{}, fmt.Errorf("status of run %s: %w", runID, err)
	}
	return st, nil
}

// query asks the run for its status.
func (c *Client) query(ctx context.Context, tenant, runID string) (workflows.Status, error) {
	v, err := c.Temporal.QueryWorkflow(ctx, workflows.WorkflowID(tenant, runID), "", workflows.QueryStatus)
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return workflows.Status{}, fmt.Errorf("run %s of tenant %s: %w", runID, tenant, ErrNotFound)
		}
		return workflows.Status{}, fmt.Errorf("query run %s: %w", runID, err)
	}
	var st workflows.Status
	if err := v.Get(&st); err != nil {
		return workflows.Status{}, fmt.Errorf("decode status of run %s: %w", runID, err)
	}
	return st, nil
}

func findStep(st workflows.Status, n int64) (workflows.Step, error) {
	if n < 1 || n > int64(len(st.Steps)) {
		return workflows.Step{}, fmt.Errorf("run %s has no step %d: %w", st.RunID, n, ErrNotFound)
	}
	return st.Steps[n-1], nil
}
