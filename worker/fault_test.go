package worker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	sdkworker "go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/internal/metrics"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
)

// signals records the signals faults send instead of sending them.
type signals struct {
	mu   sync.Mutex
	sent []string
}

func (s *signals) catch(fs faults) {
	for _, f := range fs {
		f.signal = func(sig syscall.Signal) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.sent = append(s.sent, f.point+":"+f.tool+":"+sig.String())
		}
	}
}

func (s *signals) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sent...)
}

// faultTools are the shop's tools and an external tool whose calls the
// test sees.
func faultTools(calls *[]string) []tools.Tool {
	refund := tools.Tool{
		Name: "refund_payment", Class: tools.ClassExternal, Schema: json.RawMessage(`{"type":"object"}`),
		Run: func(_ context.Context, call tools.Call) (any, error) {
			*calls = append(*calls, "refund")
			if string(call.Args) == `{"fail":true}` {
				return nil, errors.New("provider down")
			}
			return map[string]string{"id": "re_1"}, nil
		},
	}
	return append(shop.Tools(shop.Config{}), refund)
}

func TestFaultVariablesAreParsedAndChecked(t *testing.T) {
	t.Parallel()
	all := faultTools(new([]string))
	fs, err := parseFaults(Config{
		faults: faultSpec{crashAt: "before-claim:issue_credit, workflow-task:add_order_note,during-effect:refund_payment",
			stallAt: "after-lease:refund_payment", crashAfterCommit: "issue_credit", crashAroundEffect: "after:refund_payment"},
		Logger: zap.NewNop(),
	}, all)
	require.NoError(t, err)
	var got []string
	for _, f := range fs {
		got = append(got, f.env+"="+f.point+":"+f.tool+":"+f.verb())
	}
	assert.Equal(t, []string{
		"ONCERUN_CRASH_AT=before-claim:issue_credit:kill",
		"ONCERUN_CRASH_AT=workflow-task:add_order_note:kill",
		"ONCERUN_CRASH_AT=during-effect:refund_payment:kill",
		"ONCERUN_STALL_AT=after-lease:refund_payment:stop",
		"ONCERUN_CRASH_AFTER_COMMIT=after-commit:issue_credit:kill",
		"ONCERUN_CRASH_AROUND_EFFECT=after-apply:refund_payment:kill",
	}, got)

	credits := Agent{Name: "credits", Description: "credits", Tools: []string{"issue_credit"}}
	fs, err = parseFaults(Config{faults: faultSpec{crashAt: "child-start:agent_credits,child-started:agent_credits"}, Agents: []Agent{credits},
		Logger: zap.NewNop()}, all)
	require.NoError(t, err, "a sub-agent's tool takes the child points")
	assert.Len(t, fs, 2)
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{faults: faultSpec{crashAt: "after_commit:issue_credit"}}, "ONCERUN_CRASH_AT entry \"after_commit:issue_credit\" is not <point>:<tool>"},
		{Config{faults: faultSpec{crashAt: "after-commit"}}, "ONCERUN_CRASH_AT entry \"after-commit\""},
		{Config{faults: faultSpec{stallAt: "after-commit:"}}, "ONCERUN_STALL_AT entry"},
		{Config{faults: faultSpec{crashAt: "after-commit:nope"}}, "ONCERUN_CRASH_AT: no tool \"nope\""},
		{Config{faults: faultSpec{crashAt: "after-lease:issue_credit"}}, "after-lease needs an external tool; issue_credit is natural"},
		{Config{faults: faultSpec{crashAroundEffect: "after:add_order_note"}}, "ONCERUN_CRASH_AROUND_EFFECT: after-apply needs an external tool"},
		{Config{faults: faultSpec{crashAroundEffect: "during:refund_payment"}}, "is not before:<tool> or after:<tool>"},
		{Config{faults: faultSpec{crashAt: "during-effect:lookup_order"}}, "during-effect needs a tool with an effect; lookup_order is read"},
		{Config{faults: faultSpec{crashAt: "child-start:issue_credit"}}, `child-start needs a sub-agent's tool (agent_<name>); the deployment has none named "issue_credit"`},
		{Config{faults: faultSpec{crashAt: "child-started:agent_refunds"}, Agents: []Agent{credits}}, `the deployment has none named "agent_refunds"`},
		{Config{faults: faultSpec{crashAt: "after-commit:agent_credits"}, Agents: []Agent{credits}}, `ONCERUN_CRASH_AT: no tool "agent_credits"`},
	} {
		_, err := parseFaults(tt.cfg, all)
		assert.ErrorContains(t, err, tt.want)
	}
}

// The points in a tool's Run fire where they say, once each.
func TestFaultsInAToolsRun(t *testing.T) {
	t.Parallel()
	var calls []string
	all := faultTools(&calls)
	fs, err := parseFaults(Config{faults: faultSpec{crashAt: "after-apply:refund_payment", stallAt: "after-lease:refund_payment"}, Logger: zap.NewNop()}, all)
	require.NoError(t, err)
	var sent signals
	sent.catch(fs)
	wrapped := fs.withFaults(all)
	run := wrapped[len(wrapped)-1].Run
	key, err := keys.New("acme", "r1", 1, "refund_payment")
	require.NoError(t, err)

	_, err = run(context.Background(), tools.Call{Key: key, Args: json.RawMessage(`{"fail":true}`)})
	require.Error(t, err)
	assert.Equal(t, []string{"after-lease:refund_payment:stopped (signal)"}, sent.list(),
		"the stall comes before the call; a failed call is not applied")
	assert.Equal(t, []string{"refund"}, calls, "the stopped worker goes on when continued")

	_, err = run(context.Background(), tools.Call{Key: key, Args: json.RawMessage(`{}`)})
	require.NoError(t, err)
	assert.Equal(t, []string{"after-lease:refund_payment:stopped (signal)", "after-apply:refund_payment:killed"}, sent.list(),
		"each point fires once; after-apply once the provider applied the call")
}

// A worker with the after-commit fault dies after a step it committed, and
// not after one whose key it found completed: a worker that picks up the
// retry of a step that died after its commit replays the step and lives.
func TestAfterCommitFiresOnlyWhenThisAttemptCommitted(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 4)
	store, err := idempotency.New(pool, idempotency.Config{Owner: "worker-a"})
	require.NoError(t, err)
	all := shop.Tools(shop.Config{})
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, all...)
	require.NoError(t, err)
	acts := &activities.Activities{Pool: pool, Store: store, Tools: reg, Metrics: metrics.New(prometheus.NewRegistry()),
		Planners: map[string]planner.Planner{planner.NameScript: planner.Script{}}}
	step := func(n int64) activities.ToolInput {
		args := json.RawMessage(`{"amount_cents":5000,"currency":"EUR","order_id":"100` + string(rune('0'+n)) + `","reason":"damaged"}`)
		hash, err := keys.ArgsHash(args)
		require.NoError(t, err)
		return activities.ToolInput{Tenant: "acme", RunID: "r1", Step: n, Tool: shop.ToolIssueCredit, Args: args, ArgsHash: hash}
	}
	// An earlier attempt, on another worker, committed step 1.
	first, err := acts.RunTool(context.Background(), step(1))
	require.NoError(t, err)
	require.False(t, first.Replayed)

	fs, err := parseFaults(Config{faults: faultSpec{crashAfterCommit: shop.ToolIssueCredit}, Logger: zap.NewNop()}, all)
	require.NoError(t, err)
	var sent signals
	sent.catch(fs)
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.SetWorkerOptions(sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{&faultInterceptor{fs: fs}}})
	env.RegisterActivity(acts)

	val, err := env.ExecuteActivity(acts.RunTool, step(1))
	require.NoError(t, err)
	var out activities.ToolOutput
	require.NoError(t, val.Get(&out))
	assert.True(t, out.Replayed)
	assert.Empty(t, sent.list(), "a replay is not a commit: the worker lives")

	val, err = env.ExecuteActivity(acts.RunTool, step(2))
	require.NoError(t, err)
	var executed activities.ToolOutput
	require.NoError(t, val.Get(&executed))
	assert.False(t, executed.Replayed)
	assert.Equal(t, []string{"after-commit:issue_credit:killed"}, sent.list(), "a step this attempt committed kills the worker")
}

// The during-effect point of an external call fires while the provider
// holds the request, before any answer.
func TestDuringRequestFiresWhileTheServerHoldsTheRequest(t *testing.T) {
	t.Parallel()
	fired := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-fired:
			_, _ = w.Write([]byte("ok"))
		case <-time.After(5 * time.Second):
			http.Error(w, "the fault did not fire while the request was held", http.StatusGatewayTimeout)
		}
	}))
	t.Cleanup(srv.Close)
	var once sync.Once
	ctx := duringRequest(context.Background(), func() { once.Do(func() { close(fired) }) })
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"amount":300}`))
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// A server that answers at once over loopback, before the request's
// acknowledgement is seen, still meets the during-effect point: it fires
// before the client has the answer, every time.
func TestDuringRequestFiresBeforeAFastServersAnswerIsRead(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 200 {
		var fired atomic.Int32
		ctx := duringRequest(context.Background(), func() { fired.Add(1) })
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"amount":300}`))
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, int32(1), fired.Load(), "request %d: the point fired once, before the answer was read", i)
	}
}

// during-effect on a tool of a stdio MCP server could never fire (its
// call sends no HTTP request): the worker refuses it at start.
func TestDuringEffectOnAStdioMCPToolIsRefused(t *testing.T) {
	t.Parallel()
	all := []tools.Tool{{Name: "local_refund", Class: tools.ClassExternal}, {Name: "desk_open_ticket", Class: tools.ClassExternal}}
	cfg := Config{Logger: zap.NewNop(), mcp: &mcpFound{sources: map[string]mcp.Source{
		"local_refund":     {Server: "local", Transport: mcp.TransportStdio, Tool: "refund"},
		"desk_open_ticket": {Server: "desk", Transport: mcp.TransportHTTP, Tool: "open_ticket"},
	}}}
	cfg.faults.crashAt = "during-effect:local_refund"
	_, err := parseFaults(cfg, all)
	assert.ErrorContains(t, err, "ONCERUN_CRASH_AT: during-effect can never fire on local_refund: its server is a stdio child")
	cfg.faults.crashAt = "during-effect:desk_open_ticket,after-commit:local_refund"
	_, err = parseFaults(cfg, all)
	assert.NoError(t, err, "an http server's tool takes it, and a stdio tool the other points")
}
