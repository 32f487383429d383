package worker_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/metrics"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/worker"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, err := io.ReadAll(rec.Result().Body)
	require.NoError(t, err)
	return rec.Code, string(body)
}

func TestHealthzFollowsTheDatabase(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 2)
	h := worker.Handler(pool, prometheus.NewRegistry())
	code, body := get(t, h, "/healthz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok\n", body)

	closed, err := pgxpool.New(context.Background(), pool.Config().ConnString())
	require.NoError(t, err)
	closed.Close()
	code, body = get(t, worker.Handler(closed, prometheus.NewRegistry()), "/healthz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "database unreachable")
}

func TestMetricsServesToolCalls(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.ToolCall(shop.ToolIssueCredit, metrics.OutcomeReplayed)
	code, body := get(t, worker.Handler(pgtest.NewPool(t, 1), reg), "/metrics")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `oncerun_tool_calls_total{outcome="replayed",tool="issue_credit"} 1`)
}

func TestPlannersOfferOpenAIOnlyWithAModel(t *testing.T) {
	t.Parallel()
	ps, err := worker.Planners(planner.OpenAIConfig{})
	require.NoError(t, err)
	assert.Contains(t, ps, planner.NameScript)
	assert.NotContains(t, ps, planner.NameOpenAI)

	ps, err = worker.Planners(planner.OpenAIConfig{Model: "llama3", BaseURL: "http://127.0.0.1:11434/v1"})
	require.NoError(t, err)
	assert.Contains(t, ps, planner.NameOpenAI)

	_, err = worker.Planners(planner.OpenAIConfig{Model: "llama3", BaseURL: "not a url"})
	require.ErrorContains(t, err, "BaseURL")
}

func TestRunRefusesABadToolBeforeConnecting(t *testing.T) {
	t.Parallel()
	bad := tools.Tool{
		Name: "tag_order", Class: tools.ClassKeyed, Schema: json.RawMessage(`{"type":"object"}`),
		Retention: 24 * time.Hour,
		Run:       func(context.Context, tools.Call) (any, error) { return nil, nil },
	}
	err := worker.Run(context.Background(), worker.Config{
		Tools:           []tools.Tool{bad},
		DatabaseURL:     "postgres://nobody@127.0.0.1:1/none",
		TemporalAddress: "127.0.0.1:1",
	})
	require.ErrorIs(t, err, tools.ErrInvalidTool)
	assert.ErrorContains(t, err, "tool tag_order: retention 24h0m0s")
}

func TestConfigFromEnvNamesTheBadVariable(t *testing.T) {
	t.Parallel()
	for name, value := range map[string]string{
		settings.EnvCreditThreshold:         "ten",
		settings.EnvWatchdogInterval:        "soon",
		settings.EnvWatchdogBatch:           "0",
		settings.EnvExpiryPolicy:            "forget",
		settings.EnvWatchdogDutyCycle:       "1.5",
		settings.EnvLogActivityAttempts:     "sometimes",
		settings.EnvOpenAIParallelToolCalls: "maybe",
		settings.EnvTraceTrustedNetworks:    "10.0.0.0/8,10.1.0.0/33",
	} {
		_, _, err := worker.ConfigFromEnv(func(n string) string {
			if n == name {
				return value
			}
			return ""
		})
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), name)
	}
	cfg, _, err := worker.ConfigFromEnv(func(n string) string {
		return map[string]string{settings.EnvCreditThreshold: "500", settings.EnvWatchdogInterval: "1m", settings.EnvExpiryPolicy: "prune",
			settings.EnvWatchdogDutyCycle: "0.2", settings.EnvLogActivityAttempts: "true", settings.EnvOpenAIParallelToolCalls: "false",
			settings.EnvTraceTrustedNetworks: "10.0.0.0/8, 192.168.1.10"}[n]
	})
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.10/32")},
		cfg.Approvals.TraceTrustedNetworks)
	assert.True(t, cfg.OpenAI.Sequential)
	assert.InDelta(t, 0.2, cfg.Watchdog.DutyCycle, 1e-9)
	assert.True(t, cfg.LogActivityAttempts)
	assert.EqualValues(t, 500, cfg.Shop.CreditApprovalThresholdCents)
	assert.Equal(t, time.Minute, cfg.Watchdog.Interval)
	assert.Equal(t, "prune", cfg.Watchdog.Policy)
}

// TestReadmeDocumentsEveryVariable keeps the README's configuration
// reference in step with what a worker reads.
func TestReadmeDocumentsEveryVariable(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	for _, name := range settings.EnvNames {
		assert.Contains(t, string(readme), "`"+name+"`", "README's environment table lacks %s", name)
	}
}

// TestRegistryHoldsTheDeploymentsTools checks the one registry every entry
// point builds: the deployment's tools beside the built-in ones, or alone
// with OmitBuiltinTools.
func TestRegistryHoldsTheDeploymentsTools(t *testing.T) {
	t.Parallel()
	own := tools.Tool{
		Name: "award_points", Class: tools.ClassRead, Schema: json.RawMessage(`{"type":"object"}`),
		Run: func(context.Context, tools.Call) (any, error) { return nil, nil },
	}
	reg, err := worker.Registry(worker.Config{Tools: []tools.Tool{own}})
	require.NoError(t, err)
	assert.Contains(t, reg.Names(), "award_points")
	assert.Contains(t, reg.Names(), shop.ToolIssueCredit)
	assert.Contains(t, reg.Names(), "refund_payment")

	reg, err = worker.Registry(worker.Config{Tools: []tools.Tool{own}, OmitBuiltinTools: true})
	require.NoError(t, err)
	assert.Equal(t, []string{"award_points"}, reg.Names())
}
