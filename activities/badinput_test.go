package activities_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
)

// TestRequestApprovalOfValuesPostgreSQLRefusesFailsAtOnce: arguments the
// approvals table cannot hold (a NUL in jsonb) fail the request without
// retries, so that the run fails visibly instead of retrying for ever with a
// step that reads pending and is listed nowhere.
func TestRequestApprovalOfValuesPostgreSQLRefusesFailsAtOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	req := request(t)
	req.Args = json.RawMessage(`{"order_id":"1001\u0000"}`)

	_, err := f.env().ExecuteActivity(f.acts.RequestApproval, req)

	app := requireAppError(t, err, activities.ErrTypeUnstorable, true)
	assert.Contains(t, app.Error(), "record pending approval of run r1 step 2")
	assert.Empty(t, f.approvals(t))
}

// TestApprovalTextIsRecordedWhateverItHolds: a goal or a comment that is
// not text (a run started, or a decision sent, around the checks of the API
// and the CLI, or by an earlier release) is recorded escaped, so the step is
// listed and decided rather than failing the run.
func TestApprovalTextIsRecordedWhateverItHolds(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	req := request(t)
	req.Goal = "refund\x00x\x1b[2J"
	require.NoError(t, recorded(f.acts.RequestApproval(ctx, req)))
	require.NoError(t, f.acts.ResolveApproval(ctx, activities.ApprovalResolution{
		Tenant: req.Tenant, RunID: req.RunID, Step: req.Step, State: activities.ApprovalApproved,
		DecidedBy: "dana\x00", DecidedAt: req.RequestedAt.Add(time.Hour), Comment: "ok\x00\nline two",
	}))

	got := f.approvals(t)
	require.Len(t, got, 1)
	assert.Equal(t, `refund\u0000x\u001b[2J`, got[0].Goal)
	assert.Equal(t, `dana\u0000`, *got[0].DecidedBy)
	assert.Equal(t, "ok\\u0000\nline two", got[0].Comment)
}

// TestRunToolOfValuesPostgreSQLRefusesFailsAtOnce: a tool whose effect
// PostgreSQL refuses as data fails the step at once, whatever let the value
// through.
func TestRunToolOfValuesPostgreSQLRefusesFailsAtOnce(t *testing.T) {
	t.Parallel()
	raw := tools.Tool{
		Name:   "raw_note",
		Schema: json.RawMessage(`{"type":"object"}`),
		Class:  tools.ClassKeyed,
		Run: func(ctx context.Context, call tools.Call) (any, error) {
			_, err := call.Tx.Exec(ctx, `INSERT INTO order_notes (tenant, order_id, body, idempotency_key) VALUES ($1, $2, $3, $4)`,
				call.Key.Tenant, "1001", "a\x00b", call.Key.String())
			return nil, err
		},
	}
	f := setup(t, raw)

	_, err := f.run(t, input(t, 1, "raw_note", `{}`))

	requireAppError(t, err, activities.ErrTypeUnstorable, true)
	assert.Zero(t, f.count(t, "SELECT count(*) FROM order_notes"))
	assert.Zero(t, f.count(t, "SELECT count(*) FROM idempotency_keys"), "the key rolled back with the effect")
}

// TestPlanRefusesArgumentsPostgreSQLCannotStore: a planner's call whose
// arguments hold a NUL or another control character is refused, and the
// refusal says where, for the planner to correct.
func TestPlanRefusesArgumentsPostgreSQLCannotStore(t *testing.T) {
	t.Parallel()
	f := setup(t)
	calls := []planner.Call{
		{Tool: shop.ToolAddOrderNote, Args: json.RawMessage(`{"order_id":"1001","text":"a\u0000b"}`)},
		{Tool: shop.ToolAddOrderNote, Args: json.RawMessage(`{"order_id":"1001","text":"\u001b[2J"}`)},
		{Tool: shop.ToolAddOrderNote, Args: json.RawMessage(`{"order_id":"1001","text":"line one\nline two"}`)},
	}
	f.acts.Planners["fixed"] = planFunc(func(context.Context, planner.Request) (planner.Proposal, error) {
		return planner.Proposal{Calls: calls, Message: strings.Repeat("é", activities.MaxMessageBytes)}, nil
	})

	out, err := f.plan(t, activities.PlanInput{Tenant: "acme", RunID: "r1", Planner: "fixed"})

	require.NoError(t, err)
	require.Len(t, out.Calls, 3)
	assert.Contains(t, out.Calls[0].Invalid, "arguments of add_order_note holds a NUL character (U+0000) at text")
	assert.Contains(t, out.Calls[1].Invalid, "U+001B at text")
	assert.Empty(t, out.Calls[2].Invalid, "newlines are text")
	assert.LessOrEqual(t, len(out.Message), activities.MaxMessageBytes, "the planner's message is bounded")
	assert.True(t, utf8.ValidString(out.Message))
}

// FuzzPlannerOutput drives the Plan activity with arbitrary planner output
// against a real database and checks that no proposal can wedge a run:
// every call is refused with a message the run can record and tell the
// planner, or has arguments PostgreSQL stores, so that the pending approval
// a run writes for it, and the effect of a tool that writes, never fail on
// the values themselves.
func FuzzPlannerOutput(f *testing.F) {
	f.Add(shop.ToolAddOrderNote, []byte(`{"order_id":"1001","text":"hello"}`), "done")
	f.Add(shop.ToolAddOrderNote, []byte(`{"order_id":"1001","text":"a\u0000b"}`), "")
	f.Add(shop.ToolAddOrderNote, []byte(`{"order_id":"\ud800","text":"x"}`), "")
	f.Add(shop.ToolIssueCredit, []byte(`{"order_id":"1001","reason":"r\u202e","amount_cents":25900,"currency":"EUR"}`), "")
	f.Add(shop.ToolLookupOrder, []byte(`{"order_id":"\u001b[2J"}`), "\x1b[31m")
	f.Add("nope\x00", []byte(`not json`), "\xff")
	fx := setup(f)
	var current planner.Call
	var message string
	fx.acts.Planners["fuzz"] = planFunc(func(context.Context, planner.Request) (planner.Proposal, error) {
		return planner.Proposal{Calls: []planner.Call{current}, Message: message}, nil
	})
	step := int64(0)
	f.Fuzz(func(t *testing.T, tool string, args []byte, msg string) {
		// As the openai planner does: arguments that are not JSON are kept
		// as text, for the run to refuse.
		current, message = planner.Call{Tool: tool, Args: args}, msg
		if !json.Valid(args) {
			current = planner.Call{Tool: tool, Malformed: string(args)}
		}
		out, err := fx.plan(t, activities.PlanInput{Tenant: "acme", RunID: "fuzz", Planner: "fuzz"})
		require.NoError(t, err)
		require.True(t, utf8.ValidString(out.Message))
		require.LessOrEqual(t, len(out.Message), activities.MaxMessageBytes)
		require.Len(t, out.Calls, 1)
		pc := out.Calls[0]
		if pc.Invalid != "" {
			return
		}
		step++
		now := time.Now()
		_, err = fx.acts.RequestApproval(context.Background(), activities.ApprovalRequest{
			Tenant: "acme", RunID: "fuzz", Step: step, Tool: pc.Proposed.Tool, Args: pc.Args, ArgsHash: pc.ArgsHash,
			Goal: "fuzz", Reason: pc.ApprovalReason, RequestedAt: now, Deadline: now.Add(time.Hour),
		})
		require.NoError(t, err, "the pending approval of %s %s", pc.Proposed.Tool, pc.Args)
		if pc.Class == tools.ClassRead {
			return
		}
		_, err = fx.run(t, activities.ToolInput{Tenant: "acme", RunID: "fuzz", Step: step, Tool: pc.Proposed.Tool,
			Args: pc.Args, ArgsHash: pc.ArgsHash})
		if err != nil {
			assert.NotContains(t, err.Error(), activities.ErrTypeUnstorable, "the effect of %s %s", pc.Proposed.Tool, pc.Args)
			assert.NotContains(t, err.Error(), activities.ErrTypeInvalidArgs, "the effect of %s %s", pc.Proposed.Tool, pc.Args)
		}
	})
}

// TestAModelsCallInNoCurrencyIsRefusedNamingTheField: a planner's credit
// in a currency no limit could count (XXX, XTS, ZZZ: three letters, which
// the tool's schema takes) is refused, and the refusal names the field
// for the planner to correct; a credit in EUR is not.
func TestAModelsCallInNoCurrencyIsRefusedNamingTheField(t *testing.T) {
	t.Parallel()
	f := setup(t)
	credit := func(currency string) planner.Call {
		return planner.Call{Tool: shop.ToolIssueCredit,
			Args: json.RawMessage(`{"order_id":"1001","reason":"late","amount_cents":9000,"currency":"` + currency + `"}`)}
	}
	f.acts.Planners["odd"] = planFunc(func(context.Context, planner.Request) (planner.Proposal, error) {
		return planner.Proposal{Calls: []planner.Call{credit("XXX"), credit("XTS"), credit("ZZZ"), credit("EUR")}}, nil
	})

	out, err := f.plan(t, activities.PlanInput{Tenant: "acme", RunID: "r1", Planner: "odd"})

	require.NoError(t, err)
	require.Len(t, out.Calls, 4)
	for i, code := range []string{"XXX", "XTS", "ZZZ"} {
		assert.Contains(t, out.Calls[i].Invalid, `arguments of issue_credit: currency is "`+code+`": not an ISO 4217 currency code`, code)
	}
	assert.Empty(t, out.Calls[3].Invalid)
}
