package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
)

// planFunc is a planner made of a function.
type planFunc func(context.Context, planner.Request) (planner.Proposal, error)

func (p planFunc) Next(ctx context.Context, req planner.Request) (planner.Proposal, error) {
	return p(ctx, req)
}

// plan executes Plan in Temporal's test activity environment.
func (f fixture) plan(t testing.TB, in activities.PlanInput) (activities.PlanOutput, error) {
	t.Helper()
	v, err := f.env().ExecuteActivity(f.acts.Plan, in)
	if err != nil {
		return activities.PlanOutput{}, err
	}
	var out activities.PlanOutput
	require.NoError(t, v.Get(&out))
	return out, nil
}

var script = []planner.Call{
	{Tool: shop.ToolLookupOrder, Args: json.RawMessage(`{"order_id":"1001"}`)},
	{Tool: shop.ToolIssueCredit, Args: json.RawMessage(`{"reason":"damaged", "order_id":"1001", "currency":"EUR", "amount_cents":25900}`)},
	{Tool: shop.ToolIssueCredit, Args: json.RawMessage(`{"order_id":"1001","amount_cents":"lots"}`)},
	{Tool: "refund_payment", Args: json.RawMessage(`{"order_id":"1001"}`)},
}

func TestPlanScriptChecksCalls(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const canonical = `{"amount_cents":25900,"currency":"EUR","order_id":"1001","reason":"damaged"}`
	hash, err := keys.ArgsHash([]byte(canonical))
	require.NoError(t, err)
	tests := []struct {
		proposed int
		want     activities.PlannedCall
		invalid  string
	}{
		{0, activities.PlannedCall{
			Proposed: script[0], Args: json.RawMessage(`{"order_id":"1001"}`),
			ArgsHash: mustHash(t, `{"order_id":"1001"}`), Class: tools.ClassRead, Timeout: tools.DefaultTimeout,
			Local: true,
		}, ""},
		{1, activities.PlannedCall{
			Proposed: script[1], Args: json.RawMessage(canonical), ArgsHash: hash, Class: tools.ClassNatural,
			NeedsApproval: true, ApprovalReason: "amount_cents above 10000", Timeout: tools.DefaultTimeout, Guarantee: tools.GuaranteeOnce,
			Local: true,
		}, ""},
		{2, activities.PlannedCall{Proposed: script[2]}, "arguments of issue_credit do not match its schema"},
		{3, activities.PlannedCall{Proposed: script[3]}, `unknown tool "refund_payment"`},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.proposed), func(t *testing.T) {
			t.Parallel()
			out, err := f.plan(t, activities.PlanInput{Tenant: "acme", RunID: "r1", Planner: planner.NameScript, Plan: script[tt.proposed:]})
			require.NoError(t, err, "an invalid call is not an error")
			require.Len(t, out.Calls, len(script)-tt.proposed, "the script proposes every call from its position on, each checked")
			got := out.Calls[0]
			assert.Contains(t, got.Invalid, tt.invalid)
			assert.Equal(t, tt.invalid == "", got.Invalid == "")
			got.Invalid = ""
			assert.False(t, out.Done)
			assert.JSONEq(t, string(mustJSON(t, tt.want)), string(mustJSON(t, got)))
		})
	}
}

// A compact answer leaves out what the run sent (each proposed call, and
// canonical arguments equal to the proposed ones) and Expand restores the
// full answer from the calls the run sent.
func TestPlanCompactAnswer(t *testing.T) {
	t.Parallel()
	f := setup(t)
	full, err := f.plan(t, activities.PlanInput{Tenant: "acme", RunID: "r1", Planner: planner.NameScript, Plan: script})
	require.NoError(t, err)
	compact, err := f.plan(t, activities.PlanInput{Tenant: "acme", RunID: "r1", Planner: planner.NameScript, Plan: script, Compact: true})
	require.NoError(t, err)
	require.Len(t, compact.Calls, len(script))
	for i, c := range compact.Calls {
		assert.Empty(t, c.Proposed, "call %d: the run holds the proposed call", i)
		assert.Equal(t, string(mustJSON(t, full.Calls[i])), string(mustJSON(t, c.Expand(script[i]))), "call %d", i)
	}
	assert.Nil(t, compact.Calls[0].Args, "already canonical: left out")
	assert.NotNil(t, compact.Calls[1].Args, "canonical arguments that differ from the proposed ones are kept")
	assert.Less(t, len(mustJSON(t, compact)), len(mustJSON(t, full)))
}

// A run of a release that sent the whole plan names its next call's
// position and gets that call alone, as it did.
func TestPlanScriptOfAnEarlierReleaseGetsOneCall(t *testing.T) {
	t.Parallel()
	f := setup(t)
	out, err := f.plan(t, activities.PlanInput{Tenant: "acme", RunID: "r1", Planner: planner.NameScript, Plan: script, Proposed: 1})
	require.NoError(t, err)
	require.Len(t, out.Calls, 1)
	assert.Equal(t, script[1].Tool, out.Calls[0].Proposed.Tool)
}

func TestPlanScriptDone(t *testing.T) {
	t.Parallel()
	f := setup(t)
	out, err := f.acts.Plan(context.Background(), activities.PlanInput{Tenant: "acme", RunID: "r1", Planner: planner.NameScript, Plan: script, Proposed: len(script)})
	require.NoError(t, err)
	assert.True(t, out.Done)
	assert.Empty(t, out.Calls)
	assert.NotEmpty(t, out.Message)
}

func TestPlanTellsPlannerTheRun(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var got planner.Request
	f.acts.Planners["spy"] = planFunc(func(_ context.Context, req planner.Request) (planner.Proposal, error) {
		got = req
		return planner.Proposal{Done: true, Message: "nothing to do",
			Calls: []planner.Call{{Tool: "refund_payment"}}}, nil
	})
	history := []planner.Observation{{Step: 1, Call: script[0], Outcome: planner.OutcomeDone, Result: json.RawMessage(`{"found":true}`)}}

	out, err := f.acts.Plan(context.Background(), activities.PlanInput{
		Tenant: "acme", RunID: "r1", Goal: "make it right", Planner: "spy", Plan: script, Proposed: 1, History: history,
	})
	require.NoError(t, err)
	assert.Equal(t, activities.PlanOutput{Done: true, Message: "nothing to do"}, out, "a done proposal's calls are ignored")
	assert.Equal(t, planner.Request{
		Tenant: "acme", RunID: "r1", Goal: "make it right", Plan: script, Proposed: 1, History: history,
		Tools: f.acts.Tools.Specs(),
	}, got)
	assert.Len(t, got.Tools, 4)
}

func TestPlanErrors(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.acts.Planners["revoked"] = planFunc(func(context.Context, planner.Request) (planner.Proposal, error) {
		return planner.Proposal{}, fmt.Errorf("openai: 401 invalid api key: %w", planner.ErrPermanent)
	})
	f.acts.Planners["busy"] = planFunc(func(context.Context, planner.Request) (planner.Proposal, error) {
		return planner.Proposal{}, errors.New("openai: 429 rate limited")
	})
	tests := []struct {
		planner      string
		typ          string
		nonRetryable bool
		want         string
	}{
		{"oracle", activities.ErrTypeUnknownPlanner, true, `unknown planner "oracle"`},
		{"revoked", activities.ErrTypePlanner, true, "401 invalid api key"},
		{"busy", "", false, "planner busy: openai: 429 rate limited"},
	}
	for _, tt := range tests {
		t.Run(tt.planner, func(t *testing.T) {
			t.Parallel()
			_, err := f.plan(t, activities.PlanInput{Tenant: "acme", RunID: "r1", Planner: tt.planner})
			var app *temporal.ApplicationError
			if tt.nonRetryable {
				app = requireAppError(t, err, tt.typ, true)
			} else {
				app = requireRetryable(t, err)
			}
			assert.Contains(t, app.Error(), tt.want)
		})
	}
}

func mustHash(t *testing.T, args string) string {
	t.Helper()
	h, err := keys.ArgsHash([]byte(args))
	require.NoError(t, err)
	return h
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
