package activities_test

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

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/reconcile"
)

func TestReconcilePassSetsTheGauges(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ledger := reconcile.Source{
		Tool: "refund_payment",
		List: func(context.Context, time.Time) ([]reconcile.Entry, error) {
			return []reconcile.Entry{{Key: "v1/acme/r1/3/refund_payment", ProviderID: "re_1", Amount: 2500, Currency: "eur",
				Created: time.Now().Add(-time.Hour)}}, nil
		},
		Record: func(json.RawMessage) (reconcile.Entry, error) { return reconcile.Entry{}, nil },
	}
	f.acts.Reconcile = &reconcile.Config{Pool: f.pool, Sources: []reconcile.Source{ledger}}
	f.acts.ReconcileMetrics = reconcile.NewMetrics(prometheus.NewRegistry())

	out, err := f.acts.ReconcilePass(context.Background(), activities.ReconcileInput{})
	require.NoError(t, err)

	assert.True(t, out.Configured)
	assert.Equal(t, 1, out.DriftCount)
	assert.Equal(t, 1, out.Recorded)
	assert.Equal(t, map[string]int64{"eur": 2500}, out.DriftAmount)
	m := f.acts.ReconcileMetrics
	assert.Equal(t, 1.0, testutil.ToFloat64(m.DriftCount.WithLabelValues("acme", "refund_payment")))
	assert.Equal(t, 2500.0, testutil.ToFloat64(m.DriftAmount.WithLabelValues("acme", "refund_payment", "eur")))
	assert.InDelta(t, 3600, testutil.ToFloat64(m.OldestAge.WithLabelValues("acme", "refund_payment")), 60)
}

func TestReconcilePassWithoutConfig(t *testing.T) {
	t.Parallel()
	out, err := (&activities.Activities{}).ReconcilePass(context.Background(), activities.ReconcileInput{})
	require.NoError(t, err)
	assert.False(t, out.Configured)

	a := &activities.Activities{Reconcile: &reconcile.Config{}}
	_, err = a.ReconcilePass(context.Background(), activities.ReconcileInput{})
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app)
	assert.True(t, app.NonRetryable(), "a configuration the pass cannot run with is not retried")
}
