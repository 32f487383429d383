package mcp_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/tools"
)

// refundServer is a refund server of one variant over one transport, with
// a way to count the refunds made under a step's key.
type refundServer struct {
	d       mcp.Discovered
	prefix  string
	countBy func(t *testing.T, call tools.Call) int
}

func (s refundServer) tool(t *testing.T, name string) tools.Tool {
	return toolOf(t, s.d, s.prefix+name)
}

// transports starts variant over Streamable HTTP and over stdio. The stdio
// server's ledger lives in its process, so refunds are counted there with
// find_refund.
func transports(t *testing.T, variant string) map[string]func(t *testing.T) refundServer {
	return map[string]func(t *testing.T) refundServer{
		"http": func(t *testing.T) refundServer {
			s := startHTTP(t, variant)
			return refundServer{d: load(t, httpConfig("pay", s.URL, payTools(variant == honouring))), prefix: "pay_",
				countBy: func(t *testing.T, call tools.Call) int { return len(s.Ledger.Under(call.Key.String())) }}
		},
		"stdio": func(t *testing.T) refundServer {
			cfg := stdioConfig(t, "local", variant)
			cfg.Tools = stdioPayTools(variant == honouring)
			d := load(t, cfg)
			return refundServer{d: d, prefix: "local_", countBy: func(t *testing.T, call tools.Call) int {
				var f found
				require.NoError(t, run(t, toolOf(t, d, "local_find_refund"), call, &f))
				return f.Count
			}}
		},
	}
}

func TestARefundUnderOneKeyIsAppliedOnceByAServerThatHonoursTheKey(t *testing.T) {
	t.Parallel()
	for name, start := range transports(t, honouring) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := start(t)
			refund := s.tool(t, "refund")
			call := callOf(t, refund.Name, 1, refundArgs)

			var first, second refundRecord
			require.NoError(t, run(t, refund, call, &first))
			require.NoError(t, run(t, refund, call, &second))

			assert.Equal(t, first, second, "the second call answers the first refund")
			assert.Equal(t, call.Key.String(), first.Key)
			assert.EqualValues(t, 500, first.AmountCents)
			assert.Equal(t, 1, s.countBy(t, call))
		})
	}
}

func TestARefundIsAppliedTwiceByAServerThatIgnoresTheKey(t *testing.T) {
	t.Parallel()
	for name, start := range transports(t, ignoring) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := start(t)
			refund := s.tool(t, "refund")
			call := callOf(t, refund.Name, 1, refundArgs)

			require.NoError(t, run(t, refund, call, nil))
			require.NoError(t, run(t, refund, call, nil))

			assert.Equal(t, 2, s.countBy(t, call))
		})
	}
}

func TestAnErrorResultIsAPermanentFailureThatLeftNothingBehind(t *testing.T) {
	t.Parallel()
	for name, start := range transports(t, honouring) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			decline := start(t).tool(t, "decline")
			err := run(t, decline, callOf(t, decline.Name, 1, refundArgs), nil)
			require.Error(t, err)
			assert.ErrorIs(t, err, tools.ErrNotApplied)
			assert.True(t, permanent(err), "retrying cannot change the answer")
			assert.ErrorContains(t, err, `MCP tool "decline"`)
			assert.ErrorContains(t, err, "answered an error: card declined")
		})
	}
}

func TestAPairedReadFindsTheRefundMadeUnderTheStepsKey(t *testing.T) {
	t.Parallel()
	for name, start := range transports(t, honouring) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := start(t)
			refund := s.tool(t, "refund")
			find := toolOf(t, s.d, refund.PairedRead)
			call := callOf(t, refund.Name, 1, refundArgs)

			var before found
			require.NoError(t, run(t, find, call, &before))
			assert.False(t, before.Found)

			require.NoError(t, run(t, refund, call, nil))
			var after found
			require.NoError(t, run(t, find, call, &after))
			assert.True(t, after.Found)
			require.NotNil(t, after.Refund)
			assert.Equal(t, call.Key.String(), after.Refund.Key)
		})
	}
}

func TestTheKeyReachesAnHTTPServerInMetaAndAsTheIdempotencyKeyHeader(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	refund := toolOf(t, load(t, httpConfig("pay", s.URL, payTools(true))), "pay_refund")
	call := callOf(t, refund.Name, 7, refundArgs)

	require.NoError(t, run(t, refund, call, nil))

	assert.Equal(t, []seen{{Meta: call.Key.String(), Header: call.Key.String(), AllMeta: map[string]any{mcp.MetaIdempotencyKey: call.Key.String()}}}, s.Ledger.Seen())
	assert.Equal(t, "v1/acme/run-1/7/pay_refund", call.Key.String())
}

func TestACallToAnHTTPServerThatIsDownIsNotApplied(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	refund := toolOf(t, load(t, httpConfig("pay", s.URL, payTools(true))), "pay_refund")
	s.stop()

	err := run(t, refund, callOf(t, refund.Name, 1, refundArgs), nil)

	require.Error(t, err)
	assert.ErrorIs(t, err, tools.ErrNotApplied)
	assert.False(t, permanent(err), "the server may come back: a retry may send")
	assert.ErrorContains(t, err, "MCP server pay")
}

func TestAnHTTPServerThatRestartedIsReconnectedAndTheCallSentOnce(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, ignoring)
	refund := toolOf(t, load(t, httpConfig("pay", s.URL, payTools(false))), "pay_refund")
	require.NoError(t, run(t, refund, callOf(t, refund.Name, 1, refundArgs), nil))
	s.restart() // the server forgets the session

	call := callOf(t, refund.Name, 2, refundArgs)
	require.NoError(t, run(t, refund, call, nil))

	// The server refused the stale session before running anything, and
	// the call went once more on a new session: one refund, even at a
	// server that does not deduplicate.
	assert.Len(t, s.Ledger.Under(call.Key.String()), 1)
}

func TestAConnectionDroppedAfterTheCallWasSentLeavesTheOutcomeUnknown(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	d := load(t, httpConfig("pay", s.URL, payTools(true)))
	refund := toolOf(t, d, "pay_refund")
	call := callOf(t, refund.Name, 1, refundArgs)
	s.dropAnswer.Store(true)

	err := run(t, refund, call, nil)

	require.Error(t, err)
	assert.NotErrorIs(t, err, tools.ErrNotApplied, "the server may have acted: it did")
	assert.ErrorContains(t, err, "outcome unknown")
	assert.Len(t, s.Ledger.Under(call.Key.String()), 1)
	var f found
	require.NoError(t, run(t, toolOf(t, d, refund.PairedRead), call, &f))
	assert.True(t, f.Found, "the paired read settles it")
}

func TestACallThatTimesOutAfterItWasSentLeavesTheOutcomeUnknown(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	slow := toolOf(t, load(t, httpConfig("pay", s.URL, payTools(true))), "pay_slow")
	// Before the sessions close, which waits for the server's calls.
	defer s.releaseSlow()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()

	_, err := slow.Run(ctx, callOf(t, slow.Name, 1, refundArgs))

	require.Error(t, err)
	assert.NotErrorIs(t, err, tools.ErrNotApplied)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestAnExternalCallWhoseLeaseMayHaveExpiredSendsNothing(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	refund := toolOf(t, load(t, httpConfig("pay", s.URL, payTools(true))), "pay_refund")
	ctx := idempotency.WithSendBy(t.Context(), time.Now().Add(-time.Second))

	_, err := refund.Run(ctx, callOf(t, refund.Name, 1, refundArgs))

	assert.ErrorIs(t, err, tools.ErrNotApplied)
	assert.ErrorIs(t, err, idempotency.ErrLeaseLost)
	assert.Empty(t, s.Ledger.Seen(), "nothing reached the server")
}

func TestAStdioServerThatExitsMidCallLeavesTheOutcomeUnknown(t *testing.T) {
	t.Parallel()
	cfg := stdioConfig(t, "local", honouring)
	cfg.Tools = stdioPayTools(true)
	d := load(t, cfg)
	crash := toolOf(t, d, "local_crash")

	err := run(t, crash, callOf(t, crash.Name, 1, refundArgs), nil)

	require.Error(t, err)
	assert.NotErrorIs(t, err, tools.ErrNotApplied, "the process read the call before it died")
	assert.NoError(t, d.Close(), "how the process ended is no error of closing")
}

func TestAStdioServerThatExitedIsStartedAgainOnTheNextCall(t *testing.T) {
	t.Parallel()
	cfg := stdioConfig(t, "local", honouring)
	cfg.Tools = stdioPayTools(true)
	d := load(t, cfg)
	whoami := toolOf(t, d, "local_whoami")
	var before, after struct{ PID int }
	require.NoError(t, run(t, whoami, callOf(t, whoami.Name, 1, `{}`), &before))
	require.Error(t, run(t, toolOf(t, d, "local_crash"), callOf(t, "local_crash", 2, refundArgs), nil))

	require.NoError(t, run(t, whoami, callOf(t, whoami.Name, 3, `{}`), &after))

	assert.NotZero(t, after.PID)
	assert.NotEqual(t, before.PID, after.PID, "a new process answers")
}

func TestACallToAStdioServerThatCannotBeStartedAgainIsNotApplied(t *testing.T) {
	t.Parallel()
	cfg := stdioConfig(t, "local", honouring)
	link := filepath.Join(t.TempDir(), "server")
	require.NoError(t, os.Symlink(cfg.Command, link))
	cfg.Command = link
	cfg.Tools = stdioPayTools(true)
	d := load(t, cfg)
	require.Error(t, run(t, toolOf(t, d, "local_crash"), callOf(t, "local_crash", 1, refundArgs), nil))
	require.NoError(t, os.Remove(link))

	err := run(t, toolOf(t, d, "local_refund"), callOf(t, "local_refund", 2, refundArgs), nil)

	require.Error(t, err)
	assert.ErrorIs(t, err, tools.ErrNotApplied)
	assert.ErrorContains(t, err, "connect to MCP server local (stdio "+link+")")
}

func TestToolsAnswerAnErrorOnceTheirSessionsAreClosed(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	d := load(t, httpConfig("pay", s.URL, payTools(true)))
	require.NoError(t, d.Close())

	err := run(t, toolOf(t, d, "pay_refund"), callOf(t, "pay_refund", 1, refundArgs), nil)

	assert.ErrorIs(t, err, tools.ErrNotApplied)
	assert.ErrorContains(t, err, "closed")
	assert.Empty(t, s.Ledger.Seen())
}

func TestACallWithoutADeadlineIsBoundedByTheToolsTimeout(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	cfg := payTools(true)
	cfg["slow"] = mcp.ToolConfig{Timeout: mcp.Duration(200 * time.Millisecond)}
	slow := toolOf(t, load(t, httpConfig("pay", s.URL, cfg)), "pay_slow")
	defer s.releaseSlow()

	start := time.Now()
	_, err := slow.Run(context.Background(), callOf(t, slow.Name, 1, refundArgs))

	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, tools.ErrNotApplied)
	assert.Less(t, time.Since(start), 5*time.Second)
}
