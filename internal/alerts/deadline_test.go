package alerts_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/alerts"
	"github.com/oncerun/oncerun/internal/metrics"
)

// posted is one request the receiver got.
type posted struct {
	body           string
	idempotencyKey string
	contentType    string
}

// receiver is an alert webhook that answers each POST with the next of its
// statuses (the last one again when they run out) and keeps what it got.
type receiver struct {
	mu       sync.Mutex
	statuses []int
	got      []posted
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, posted{string(body), req.Header.Get("Idempotency-Key"), req.Header.Get("Content-Type")})
	status := r.statuses[min(len(r.got), len(r.statuses))-1]
	w.WriteHeader(status)
}

func (r *receiver) posts() []posted {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]posted(nil), r.got...)
}

// setup starts a receiver answering statuses and returns it with a warner
// posting to it (under a path that stands for the receiver's secret) and
// the warner's metrics.
func setup(t *testing.T, statuses ...int) (*receiver, *alerts.DeadlineWarner, *metrics.Metrics) {
	t.Helper()
	rcv := &receiver{statuses: statuses}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	m := metrics.New(prometheus.NewPedanticRegistry())
	return rcv, &alerts.DeadlineWarner{Webhook: &alerts.Webhook{URL: srv.URL + "/hooks/s3cret"}, Metrics: m}, m
}

// warning is the day-before warning of step 2 of acme's run r1.
var warning = activities.DeadlineWarning{
	Tenant: "acme", RunID: "r1", Step: 2, Tool: "issue_credit",
	Deadline: time.Date(2026, 12, 4, 9, 0, 0, 0, time.FixedZone("CET", 3600)),
	Before:   24 * time.Hour, OnExpiry: "reject",
}

// counted is how many warnings of acme's issue_credit a day before their
// deadline m counted.
func counted(m *metrics.Metrics) float64 {
	return testutil.ToFloat64(m.ApprovalDeadlineWarnings.WithLabelValues("acme", "issue_credit", "24h0m0s"))
}

func TestDeadlineWarnerPostsTheWarningUnderItsIDAndCountsIt(t *testing.T) {
	t.Parallel()
	rcv, warner, m := setup(t, http.StatusNoContent)

	require.NoError(t, warner.DeadlineWarning(context.Background(), warning))

	got := rcv.posts()
	require.Len(t, got, 1)
	assert.JSONEq(t, `{
		"alert": "approval_deadline_warning",
		"id": "approval_deadline_warning/acme/r1/2/24h0m0s",
		"tenant": "acme", "run_id": "r1", "step": 2, "tool": "issue_credit",
		"deadline": "2026-12-04T08:00:00Z",
		"before": "24h0m0s", "before_seconds": 86400,
		"on_expiry": "reject"
	}`, got[0].body)
	assert.Equal(t, "approval_deadline_warning/acme/r1/2/24h0m0s", got[0].idempotencyKey)
	assert.Equal(t, "application/json", got[0].contentType)
	assert.InDelta(t, 1, counted(m), 0)
}

func TestDeadlineWarnerReturnsTheWebhooksFailureWithoutItsSecret(t *testing.T) {
	t.Parallel()
	_, warner, m := setup(t, http.StatusInternalServerError)

	err := warner.DeadlineWarning(context.Background(), warning)

	require.Error(t, err)
	assert.ErrorContains(t, err, "500 Internal Server Error")
	assert.ErrorContains(t, err, "approval_deadline_warning/acme/r1/2/24h0m0s")
	// The error is kept in the run's history: the URL's path is not.
	assert.NotContains(t, err.Error(), "s3cret")
	// The warning was raised, whatever became of its POST.
	assert.InDelta(t, 1, counted(m), 0)
}

func TestDeadlineWarnerReturnsAnUnreachableWebhookWithoutItsSecret(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	warner := &alerts.DeadlineWarner{Webhook: &alerts.Webhook{URL: srv.URL + "/hooks/s3cret"}}

	err := warner.DeadlineWarning(context.Background(), warning)

	require.Error(t, err)
	assert.ErrorContains(t, err, "connection refused")
	assert.NotContains(t, err.Error(), "s3cret")
}

func TestDeadlineWarnerWithoutAWebhookOnlyCounts(t *testing.T) {
	t.Parallel()
	for name, webhook := range map[string]*alerts.Webhook{"no webhook": nil, "no URL": {}} {
		m := metrics.New(prometheus.NewPedanticRegistry())
		warner := &alerts.DeadlineWarner{Webhook: webhook, Metrics: m}
		require.NoError(t, warner.DeadlineWarning(context.Background(), warning), name)
		assert.InDelta(t, 1, counted(m), 0, name)
	}
}

// TestARetriedWarningIsPostedUnderTheSameIDAndCountedOnce runs the warning
// activity as a run does, under a retry policy, against a receiver that
// fails once: the retry posts the same id, and the metric counts one
// warning, not one per attempt.
func TestARetriedWarningIsPostedUnderTheSameIDAndCountedOnce(t *testing.T) {
	t.Parallel()
	rcv, warner, m := setup(t, http.StatusBadGateway, http.StatusOK)
	acts := &activities.Activities{Warner: warner}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(acts.WarnApprovalDeadline)
	warn := func(ctx workflow.Context, w activities.DeadlineWarning) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: time.Minute,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3},
		})
		return workflow.ExecuteActivity(ctx, acts.WarnApprovalDeadline, w).Get(ctx, nil)
	}
	env.RegisterWorkflow(warn)

	env.ExecuteWorkflow(warn, warning)

	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	got := rcv.posts()
	require.Len(t, got, 2, "one failed POST, one retried")
	assert.Equal(t, got[0].idempotencyKey, got[1].idempotencyKey)
	assert.Equal(t, got[0].body, got[1].body, "a retry sends the same bytes")
	assert.InDelta(t, 1, counted(m), 0)
}

// TestDeadlineWarningIDIsOnePerWarning: the id stays the same for a
// warning and differs for any other, separators in names included.
func TestDeadlineWarningIDIsOnePerWarning(t *testing.T) {
	t.Parallel()
	id := alerts.DeadlineWarningID("acme", "r1", 2, 24*time.Hour)
	assert.Equal(t, id, alerts.DeadlineWarningID("acme", "r1", 2, 24*time.Hour))
	for name, other := range map[string]string{
		"another tenant": alerts.DeadlineWarningID("globex", "r1", 2, 24*time.Hour),
		"another run":    alerts.DeadlineWarningID("acme", "r2", 2, 24*time.Hour),
		"another step":   alerts.DeadlineWarningID("acme", "r1", 3, 24*time.Hour),
		"another point":  alerts.DeadlineWarningID("acme", "r1", 2, time.Hour),
	} {
		assert.NotEqual(t, id, other, name)
	}
	assert.NotEqual(t, alerts.DeadlineWarningID("ac/me", "r1", 2, time.Hour), alerts.DeadlineWarningID("ac", "me/r1", 2, time.Hour),
		"a slash moved from the tenant into the run id")
	assert.Equal(t, "approval_deadline_warning/ac%2Fme/r%C3%A9%201/2/1h30m0s",
		alerts.DeadlineWarningID("ac/me", "ré 1", 2, 90*time.Minute), "plain ASCII, fit for a header")
}
