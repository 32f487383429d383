package reconcile_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"

	"github.com/oncerun/oncerun/internal/reconcile"
)

func TestMetricsObserve(t *testing.T) {
	t.Parallel()
	m := reconcile.NewMetrics(prometheus.NewRegistry())
	m.Observe(reconcile.Report{ByLabel: []reconcile.Drift{
		{Tenant: "acme", Tool: "refund_payment", Count: 3, Amount: map[string]int64{"eur": 2900, "usd": 700}, OldestAgeSeconds: 10800},
		{Tenant: "globex", Tool: "send_email", Count: 1, Amount: map[string]int64{}, OldestAgeSeconds: 60},
	}})

	assert.Equal(t, 3.0, testutil.ToFloat64(m.DriftCount.WithLabelValues("acme", "refund_payment")))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.DriftCount.WithLabelValues("globex", "send_email")))
	assert.Equal(t, 2900.0, testutil.ToFloat64(m.DriftAmount.WithLabelValues("acme", "refund_payment", "eur")))
	assert.Equal(t, 700.0, testutil.ToFloat64(m.DriftAmount.WithLabelValues("acme", "refund_payment", "usd")))
	assert.Equal(t, 10800.0, testutil.ToFloat64(m.OldestAge.WithLabelValues("acme", "refund_payment")))
	assert.Equal(t, 60.0, testutil.ToFloat64(m.OldestAge.WithLabelValues("globex", "send_email")))
	assert.Equal(t, 2, testutil.CollectAndCount(m.DriftAmount))

	m.Observe(reconcile.Report{ByLabel: []reconcile.Drift{
		{Tenant: "acme", Tool: "refund_payment", Count: 1, Amount: map[string]int64{"eur": 2500}, OldestAgeSeconds: 11400},
	}})
	assert.Equal(t, 1, testutil.CollectAndCount(m.DriftCount), "globex has nothing open any more")
	assert.Equal(t, 1, testutil.CollectAndCount(m.DriftAmount), "nor acme in usd")
	assert.Equal(t, 1, testutil.CollectAndCount(m.OldestAge))
	assert.Equal(t, 11400.0, testutil.ToFloat64(m.OldestAge.WithLabelValues("acme", "refund_payment")))

	m.Observe(reconcile.Report{})
	assert.Zero(t, testutil.CollectAndCount(m.DriftCount, "oncerun_drift_count"))
}

func TestNilMetricsObserveNothing(t *testing.T) {
	t.Parallel()
	var m *reconcile.Metrics
	m.Observe(reconcile.Report{ByLabel: []reconcile.Drift{{Tenant: "acme", Tool: "t", Count: 1}}})
}
