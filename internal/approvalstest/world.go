package approvalstest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/questions"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/internal/spend"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// World is what the approvals service's tests run against: a database of
// their own (pgtest), the shop's tools and the two above, a fake Temporal
// and a clock the test moves. URL and Tokens are the served handler's and
// the tokens by name, set by the test once it serves one.
type World struct {
	T        *testing.T
	Pool     *pgxpool.Pool
	Reg      *tools.Registry
	Temporal *Temporal
	// Now is the test's start; Clock is Now moved on by Advance.
	Now    time.Time
	skew   atomic.Int64
	URL    string
	Tokens map[string]string
}

// New builds a World for t.
func New(t *testing.T) *World {
	t.Helper()
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, append(shop.Tools(shop.Config{}), TuneWidget, LockedTool)...)
	require.NoError(t, err)
	return &World{T: t, Pool: pgtest.NewPool(t, 4), Reg: reg, Temporal: NewTemporal(), Now: time.Now().UTC().Truncate(time.Second),
		Tokens: map[string]string{}}
}

// Advance moves the clock on by d.
func (e *World) Advance(d time.Duration) { e.skew.Add(int64(d)) }

// Clock is the service's clock: Now moved on by every Advance.
func (e *World) Clock() time.Time { return e.Now.Add(time.Duration(e.skew.Load())) }

// TuneWidget is a tool with an argument of each JSON type, whose edits
// are free, for the edit form's encoding.
var TuneWidget = tools.Tool{
	Name: "tune_widget",
	Schema: json.RawMessage(`{"type":"object","properties":{
		"name":{"type":"string"},"count":{"type":"integer","maximum":10},"ratio":{"type":"number"},
		"enabled":{"type":"boolean"},"labels":{"type":"object"},"note":{"type":["string","null"]}},
		"required":["name","count"],"additionalProperties":false}`),
	Class:    tools.ClassKeyed,
	Approval: tools.Always(),
	Run:      func(context.Context, tools.Call) (any, error) { return nil, nil },
}

// LockedTool is a tool whose calls may not be edited.
var LockedTool = tools.Tool{
	Name:     "restart_cluster",
	Schema:   json.RawMessage(`{"type":"object","properties":{"zone":{"type":"string"}},"required":["zone"]}`),
	Class:    tools.ClassKeyed,
	Approval: tools.Always(),
	Edits:    tools.EditForbidden,
	Run:      func(context.Context, tools.Call) (any, error) { return nil, nil },
}

// Pending records a step of run runID of tenant acme that waits for
// approval, with the deadline left from now, and a status of its run
// whose earlier steps are prior. It returns the step's args hash.
func (e *World) Pending(runID string, step int64, tool, args string, left time.Duration, onExpiry string, prior ...workflows.Step) string {
	e.T.Helper()
	p, err := e.Reg.Prepare(tools.ProposedCall{Tool: tool, Args: json.RawMessage(args)})
	require.NoError(e.T, err)
	require.NoError(e.T, approvalstore.RecordPending(context.Background(), e.Pool, approvalstore.Request{
		Tenant: "acme", RunID: runID, Step: step, Tool: tool, Args: p.Args, ArgsHash: p.ArgsHash,
		Goal: "refund order 1001", Reason: "amount_cents above 10000", RequestedBy: "ops",
		RequestedAt: e.Now.Add(-time.Hour), Deadline: e.Now.Add(left), OnExpiry: onExpiry,
	}))
	steps := append(prior, workflows.Step{Step: step, Tool: tool, Args: p.Args, ArgsHash: p.ArgsHash,
		State: workflows.StepPendingApproval, PlannedAt: e.Now.Add(-time.Hour),
		Approval: &workflows.StepApproval{Reason: "amount_cents above 10000", RequestedAt: e.Now.Add(-time.Hour), Deadline: e.Now.Add(left),
			OnExpiry: onExpiry}})
	e.Temporal.SetStatus(workflows.Status{Tenant: "acme", RunID: runID, Planner: "script", State: workflows.RunWaitingForApproval,
		Steps: steps, StartedAt: e.Now.Add(-time.Hour), UpdatedAt: e.Now.Add(-time.Hour)})
	return p.ArgsHash
}

// Unresolved records round 1 of a step of run runID of tenant acme whose
// outcome is unknown, as a run does.
func (e *World) Unresolved(runID string, step int64) {
	e.T.Helper()
	args := json.RawMessage(`{"payment_id":"pay_1001","amount_cents":25900,"currency":"EUR"}`)
	require.NoError(e.T, approvalstore.RecordUnresolved(context.Background(), e.Pool, approvalstore.Resolution{
		Tenant: "acme", RunID: runID, Step: step, Round: 1, Tool: "refund_payment", Key: fmt.Sprintf("v1/acme/%s/%d/refund_payment", runID, step),
		Args: args, ArgsHash: strings.Repeat("c", 64), Goal: "refund order 1001", FirstSentAt: e.Now.Add(-10 * time.Minute),
		Known: "the provider did not answer", RequestedAt: e.Now.Add(-time.Minute), Deadline: e.Now.Add(time.Hour),
	}))
}

// SizeSchema is the schema of the answer the shop's server asks for:
// which size, S, M or L.
const SizeSchema = `{"type":"object","properties":{"size":{"type":"string","enum":["S","M","L"],"title":"Size"}},"required":["size"]}`

// Asked records round 1 of step step of run runID of tenant acme, whose
// tool's server (shop) asks which size, for answerBy (anyone when none),
// with an hour left; live when the server asked over its live session. A
// round that is not live sets a status of its run that waits for input.
func (e *World) Asked(runID string, step int64, live bool, answerBy ...string) {
	e.T.Helper()
	items := []questions.Item{{ID: "size", Mode: questions.ModeForm, Message: "Which size should the shirt be?",
		Schema: json.RawMessage(SizeSchema)}}
	ask := fmt.Sprintf("run/%d", step)
	if live {
		ask = "live/1"
	}
	_, err := approvalstore.RecordQuestion(context.Background(), e.Pool, approvalstore.QuestionRequest{
		Tenant: "acme", RunID: runID, Step: step, AskID: ask, Tool: "shop_order_shirt", Key: fmt.Sprintf("v1/acme/%s/%d/shop_order_shirt", runID, step),
		Server: "shop", Args: json.RawMessage(`{"sku":"tee"}`), ArgsHash: strings.Repeat("e", 64), Goal: "a shirt for Ana", Items: items,
		Live: live, AnswerBy: answerBy, RequestedBy: "ops", RequestedAt: e.Now.Add(-time.Minute), Deadline: e.Now.Add(time.Hour),
	})
	require.NoError(e.T, err)
	state := workflows.StepRunning
	var asked []workflows.StepQuestion
	if !live {
		state = workflows.StepWaitingForInput
		asked = []workflows.StepQuestion{{Round: 1, Server: "shop", Items: items, AnswerBy: answerBy, RequestedAt: e.Now.Add(-time.Minute),
			Deadline: e.Now.Add(time.Hour), State: workflows.QuestionPending}}
	}
	e.Temporal.SetStatus(workflows.Status{Tenant: "acme", RunID: runID, Planner: "script", State: workflows.RunWaitingForInput,
		Steps: []workflows.Step{{Step: step, Tool: "shop_order_shirt", Args: json.RawMessage(`{"sku":"tee"}`), ArgsHash: strings.Repeat("e", 64),
			State: state, PlannedAt: e.Now.Add(-time.Minute), Questions: asked}},
		StartedAt: e.Now.Add(-time.Hour), UpdatedAt: e.Now.Add(-time.Minute)})
}

// Count counts the rows of approval_decisions that match where.
func (e *World) Count(where string, args ...any) int {
	e.T.Helper()
	var n int
	require.NoError(e.T, e.Pool.QueryRow(context.Background(), `SELECT count(*) FROM approval_decisions WHERE `+where, args...).Scan(&n))
	return n
}

// Running records run runID of tenant acme as running with steps; an
// openai run unless scripted.
func (e *World) Running(runID string, scripted bool, steps ...workflows.Step) {
	e.T.Helper()
	planner := "openai"
	if scripted {
		planner = "script"
	}
	e.Temporal.SetStatus(workflows.Status{Tenant: "acme", RunID: runID, Planner: planner, State: workflows.RunRunning,
		Goal: "refund order 1001", Steps: steps, StartedAt: e.Now.Add(-time.Hour), UpdatedAt: e.Now})
}

// Call sends an API request with who's token and returns the status and
// the body.
func (e *World) Call(who, method, path, body string) (int, http.Header, string) {
	e.T.Helper()
	req, err := http.NewRequest(method, e.URL+path, strings.NewReader(body))
	require.NoError(e.T, err)
	req.Header.Set("Authorization", "Bearer "+e.Tokens[who])
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.T, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(e.T, err)
	return resp.StatusCode, resp.Header, string(raw)
}

// Controls returns the audit rows of the operators' requests to run runID
// of tenant.
func (e *World) Controls(tenant, runID string) []approvalstore.Control {
	e.T.Helper()
	rows, err := approvalstore.RunControls(context.Background(), e.Pool, tenant, runID)
	require.NoError(e.T, err)
	return rows
}

// ApprovalRow reads the state and comment of a step's approvals row.
func (e *World) ApprovalRow(runID string, step int64) (state, comment string) {
	e.T.Helper()
	l, err := approvalstore.Lookup(context.Background(), e.Pool, "acme", runID, step)
	require.NoError(e.T, err)
	return l.State, l.Comment
}

// CreditArgs are the arguments of a credit of 259.00 EUR.
const CreditArgs = `{"order_id":"1001","reason":"damaged_in_transit","amount_cents":25900,"currency":"EUR"}`

// LookupStep is the run's first step, as its status shows it.
func LookupStep(now time.Time) workflows.Step {
	return workflows.Step{Step: 1, Tool: "lookup_order", Class: "read", Args: json.RawMessage(`{"order_id":"1001"}`),
		State: workflows.StepDone, Result: json.RawMessage(`{"found":true,"order_id":"1001","total_cents":25900,"currency":"EUR"}`),
		PlannedAt: now.Add(-2 * time.Hour), FinishedAt: now.Add(-2 * time.Hour)}
}

// CreditsCap is the body of a cap of 2,000.00 EUR a UTC day on issue_credit.
const CreditsCap = `{"tools": ["issue_credit"], "currency": "EUR", "amount": 200000, "period": "utc_day"}`

// SpendOn counts a step of tenant acme's run r1 against the caps of
// issue_credit: applied, or held (reserved) when held is set.
func (e *World) SpendOn(step int64, amount int64, held bool) {
	e.T.Helper()
	c := spend.Charge{Tenant: "acme", RunID: "r1", Step: step, Tool: "issue_credit",
		Key: fmt.Sprintf("v1/acme/r1/%d/issue_credit", step), Amounts: spend.Amounts{"EUR": amount}}
	var err error
	if held {
		_, err = spend.Reserve(context.Background(), e.Pool, c)
	} else {
		_, err = spend.ChargeTx(context.Background(), e.Pool, c)
	}
	require.NoError(e.T, err)
}
