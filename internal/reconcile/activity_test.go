package reconcile_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/reconcile"
)

func TestReconcilePassSetsTheGauges(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 4)
	ledger := reconcile.Source{
		Tool: "refund_payment",
		List: func(context.Context, time.Time) ([]reconcile.Entry, error) {
			return []reconcile.Entry{{Key: "v1/acme/r1/3/refund_payment", ProviderID: "re_1", Amount: 2500, Currency: "eur",
				Created: time.Now().Add(-time.Hour)}}, nil
		},
		Record: func(json.RawMessage) (reconcile.Entry, error) { return reconcile.Entry{}, nil },
	}
	acts := &reconcile.Activities{Config: &reconcile.Config{Pool: pool, Sources: []reconcile.Source{ledger}},
		Metrics: reconcile.NewMetrics(prometheus.NewRegistry())}

	out, err := acts.ReconcilePass(context.Background(), reconcile.Input{})
	require.NoError(t, err)

	assert.True(t, out.Configured)
	assert.Equal(t, 1, out.DriftCount)
	assert.Equal(t, 1, out.Recorded)
	assert.Equal(t, map[string]int64{"eur": 2500}, out.DriftAmount)
	m := acts.Metrics
	assert.Equal(t, 1.0, testutil.ToFloat64(m.DriftCount.WithLabelValues("acme", "refund_payment")))
	assert.Equal(t, 2500.0, testutil.ToFloat64(m.DriftAmount.WithLabelValues("acme", "refund_payment", "eur")))
	assert.InDelta(t, 3600, testutil.ToFloat64(m.OldestAge.WithLabelValues("acme", "refund_payment")), 60)
}

func TestReconcilePassWithoutConfig(t *testing.T) {
	t.Parallel()
	out, err := (&reconcile.Activities{}).ReconcilePass(context.Background(), reconcile.Input{})
	require.NoError(t, err)
	assert.False(t, out.Configured)

	a := &reconcile.Activities{Config: &reconcile.Config{}}
	_, err = a.ReconcilePass(context.Background(), reconcile.Input{})
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app)
	assert.True(t, app.NonRetryable(), "a configuration the pass cannot run with is not retried")
}
