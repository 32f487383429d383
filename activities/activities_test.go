package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/metrics"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
)

type fixture struct {
	pool    *pgxpool.Pool
	acts    *activities.Activities
	metrics *metrics.Metrics
}

// setup returns activities on a database of the test's own, serving the
// built-in tools and extra.
func setup(t testing.TB, extra ...tools.Tool) fixture {
	t.Helper()
	pool := pgtest.NewPool(t, 8)
	store, err := idempotency.New(pool, idempotency.Config{Owner: "worker-a"})
	require.NoError(t, err)
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, append(shop.Tools(shop.Config{}), extra...)...)
	require.NoError(t, err)
	m := metrics.New(prometheus.NewRegistry())
	return fixture{pool: pool, metrics: m, acts: &activities.Activities{
		Pool:     pool,
		Store:    store,
		Tools:    reg,
		Planners: map[string]planner.Planner{planner.NameScript: planner.Script{}},
		Metrics:  m,
	}}
}

// input is step step of run r1 of tenant acme calling tool with args, as
// the workflow sends it: canonical arguments and their hash.
func input(t testing.TB, step int64, tool, args string) activities.ToolInput {
	t.Helper()
	canonical, err := keys.Canonicalize([]byte(args))
	require.NoError(t, err)
	hash, err := keys.ArgsHash(canonical)
	require.NoError(t, err)
	return activities.ToolInput{Tenant: "acme", RunID: "r1", Step: step, Tool: tool, Args: canonical, ArgsHash: hash}
}

// run executes RunTool in Temporal's test activity environment, so that its
// error is what a workflow would see after serialization.
func (f fixture) run(t testing.TB, in activities.ToolInput) (activities.ToolOutput, error) {
	t.Helper()
	v, err := f.env().ExecuteActivity(f.acts.RunTool, in)
	if err != nil {
		return activities.ToolOutput{}, err
	}
	var out activities.ToolOutput
	require.NoError(t, v.Get(&out))
	return out, nil
}

// env returns a test activity environment serving f's activities, whose
// log of failed activities is discarded.
func (f fixture) env() *testsuite.TestActivityEnvironment {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(f.acts)
	return env
}

// calls returns the count of tool's calls with outcome.
func (f fixture) calls(tool, outcome string) int {
	return int(testutil.ToFloat64(f.metrics.ToolCalls.WithLabelValues(tool, outcome)))
}

func (f fixture) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

// requireAppError asserts that err carries a Temporal application error of
// type typ with the given retryability.
func requireAppError(t testing.TB, err error, typ string, nonRetryable bool) *temporal.ApplicationError {
	t.Helper()
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app)
	assert.Equal(t, typ, app.Type(), app.Error())
	assert.Equal(t, nonRetryable, app.NonRetryable(), "non-retryable")
	return app
}

// requireRetryable asserts that err carries a retryable Temporal
// application error.
func requireRetryable(t *testing.T, err error) *temporal.ApplicationError {
	t.Helper()
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app)
	assert.False(t, app.NonRetryable(), "non-retryable")
	return app
}

const damaged = `{"order_id":"1001","reason":"damaged","amount_cents":2500,"currency":"EUR"}`

func TestRunToolKeyReuse(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.run(t, input(t, 1, shop.ToolIssueCredit, damaged))
	require.NoError(t, err)

	_, err = f.run(t, input(t, 1, shop.ToolIssueCredit, `{"order_id":"1001","reason":"damaged","amount_cents":9900,"currency":"EUR"}`))
	app := requireAppError(t, err, activities.ErrTypeKeyReuse, true)
	assert.Contains(t, app.Error(), "v1/acme/r1/1/issue_credit")
	assert.Equal(t, 1, f.calls(shop.ToolIssueCredit, metrics.OutcomeKeyReuse))
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM credits"))
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM credits WHERE amount_cents = 2500"))
}

func TestRunToolRefusesInvalidInput(t *testing.T) {
	t.Parallel()
	f := setup(t)
	otherHash := input(t, 1, shop.ToolIssueCredit, damaged)
	otherHash.ArgsHash = input(t, 1, shop.ToolIssueCredit, `{"order_id":"1002","reason":"damaged","amount_cents":2500,"currency":"EUR"}`).ArgsHash
	tests := []struct {
		name string
		in   activities.ToolInput
		typ  string
		want string
	}{
		{"args hash mismatch", otherHash, activities.ErrTypeInvalidArgs, "the step was planned with " + otherHash.ArgsHash},
		{"args against schema", input(t, 1, shop.ToolIssueCredit, `{"order_id":"1001","reason":"damaged","amount_cents":-5,"currency":"EUR"}`), activities.ErrTypeInvalidArgs, "at /amount_cents"},
		{"args not an object", input(t, 1, shop.ToolAddOrderNote, `["1002","hello"]`), activities.ErrTypeInvalidArgs, "arguments of add_order_note must be a JSON object"},
		{"step zero", input(t, 0, shop.ToolIssueCredit, damaged), activities.ErrTypeInvalidArgs, "steps are numbered from 1"},
	}
	t.Run("refused", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				_, err := f.run(t, tt.in)
				app := requireAppError(t, err, tt.typ, true)
				assert.Contains(t, app.Error(), tt.want)
			})
		}
	})
	assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM credits"))
	assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM idempotency_keys"))
	// A step that makes no key is refused before it is counted.
	assert.Equal(t, 2, f.calls(shop.ToolIssueCredit, metrics.OutcomeInvalid))
	assert.Equal(t, 1, f.calls(shop.ToolAddOrderNote, metrics.OutcomeInvalid))
}

func TestRunToolInFlight(t *testing.T) {
	t.Parallel()
	f := setup(t)
	in := input(t, 1, shop.ToolAddOrderNote, `{"order_id":"1002","text":"called"}`)
	other, err := idempotency.New(f.pool, idempotency.Config{Owner: "worker-b"})
	require.NoError(t, err)
	k, err := keys.New(in.Tenant, in.RunID, in.Step, in.Tool)
	require.NoError(t, err)
	begun, err := other.Begin(context.Background(), idempotency.Claim{Key: k, ArgsHash: in.ArgsHash, Lease: 20 * time.Second})
	require.NoError(t, err)
	require.NotNil(t, begun.Lease)

	_, err = f.run(t, in)
	app := requireAppError(t, err, activities.ErrTypeInFlight, false)
	assert.Contains(t, app.Error(), "held by worker-b")
	// The step tries again just after the lease expires, not at the retry
	// policy's next backoff.
	assert.InDelta(t, float64(time.Until(begun.Lease.Expiry)+500*time.Millisecond), float64(app.NextRetryDelay()), float64(2*time.Second))
	assert.Equal(t, 1, f.calls(shop.ToolAddOrderNote, metrics.OutcomeInFlight))
	assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM order_notes"))
}

// TestRunToolPermanentToolError checks that a tool's Permanent error reaches
// Temporal as non-retryable though the store wraps it in its context.
func TestRunToolPermanentToolError(t *testing.T) {
	t.Parallel()
	closed := tools.Tool{
		Name: "close_ticket", Class: tools.ClassKeyed, Schema: json.RawMessage(`{"type":"object"}`),
		Run: func(context.Context, tools.Call) (any, error) {
			return nil, tools.Permanent(errors.New("ticket 7 is archived"))
		},
	}
	f := setup(t, closed)

	_, err := f.run(t, input(t, 1, "close_ticket", `{}`))
	app := requireAppError(t, err, activities.ErrTypeToolFailed, true)
	assert.Contains(t, app.Error(), "ticket 7 is archived")
	assert.Contains(t, app.Error(), "v1/acme/r1/1/close_ticket", "the store's context is kept")
	assert.Equal(t, 1, f.calls("close_ticket", metrics.OutcomeFailed))
	assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM idempotency_keys"), "a failed transactional call leaves no key")
}

func TestRunToolRetryableToolError(t *testing.T) {
	t.Parallel()
	flaky := tools.Tool{
		Name: "flaky", Class: tools.ClassNatural, Schema: json.RawMessage(`{"type":"object"}`),
		Run: func(context.Context, tools.Call) (any, error) { return nil, errors.New("deadlock detected") },
	}
	f := setup(t, flaky)

	_, err := f.run(t, input(t, 1, "flaky", `{}`))
	app := requireRetryable(t, err)
	assert.Contains(t, app.Error(), "deadlock detected")
}

// A step's output names its key, but a local activity's leaves it out: the
// run holds the key, and its marker in the history need not hold it again.
func TestRunToolAsALocalActivityLeavesOutTheKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	in := input(t, 1, shop.ToolAddOrderNote, `{"order_id":"1002","text":"local"}`)
	out, err := f.run(t, in)
	require.NoError(t, err)
	assert.Equal(t, "v1/acme/r1/1/add_order_note", out.Key)

	v, err := f.env().ExecuteLocalActivity(f.acts.RunTool, in)
	require.NoError(t, err)
	var local activities.ToolOutput
	require.NoError(t, v.Get(&local))
	assert.Empty(t, local.Key)
	assert.True(t, local.Replayed, "the same step, replayed")
	assert.JSONEq(t, string(out.Result), string(local.Result))
}
