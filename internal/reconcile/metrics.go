package reconcile

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the reconciliation gauges. A worker builds one on its
// registry; each pass's [Report] sets them.
type Metrics struct {
	// DriftCount is oncerun_drift_count{tenant,tool}: open findings.
	DriftCount *prometheus.GaugeVec
	// DriftAmount is oncerun_drift_amount{tenant,tool,currency}: the open
	// findings' absolute amounts, in integer minor units.
	DriftAmount *prometheus.GaugeVec
	// OldestAge is oncerun_oldest_unreconciled_age_seconds{tenant,tool}:
	// the age of the oldest open finding's effect.
	OldestAge *prometheus.GaugeVec

	mu   sync.Mutex
	seen map[[3]string]bool // the series set last: tenant, tool, currency ("" for the two without)
}

// NewMetrics creates the gauges and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		DriftCount: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "oncerun_drift_count",
			Help: "Open (unacknowledged) reconciliation findings, by tenant and tool.",
		}, []string{"tenant", "tool"}),
		DriftAmount: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "oncerun_drift_amount",
			Help: "Absolute amount of the open reconciliation findings in integer minor units, by tenant, tool and currency.",
		}, []string{"tenant", "tool", "currency"}),
		OldestAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "oncerun_oldest_unreconciled_age_seconds",
			Help: "Age of the effect of the oldest open reconciliation finding, by tenant and tool.",
		}, []string{"tenant", "tool"}),
	}
	reg.MustRegister(m.DriftCount, m.DriftAmount, m.OldestAge)
	return m
}

// Observe sets the gauges to rep; the series of a tenant and tool (or
// currency) with no open finding left are removed. A scrape never sees the
// gauges emptied half-way. A nil Metrics observes nothing.
func (m *Metrics) Observe(rep Report) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := map[[3]string]bool{}
	for _, d := range rep.ByLabel {
		m.DriftCount.WithLabelValues(d.Tenant, d.Tool).Set(float64(d.Count))
		m.OldestAge.WithLabelValues(d.Tenant, d.Tool).Set(d.OldestAgeSeconds)
		now[[3]string{d.Tenant, d.Tool, ""}] = true
		for cur, amount := range d.Amount {
			m.DriftAmount.WithLabelValues(d.Tenant, d.Tool, cur).Set(float64(amount))
			now[[3]string{d.Tenant, d.Tool, cur}] = true
		}
	}
	for l := range m.seen {
		if now[l] {
			continue
		}
		if l[2] == "" {
			m.DriftCount.DeleteLabelValues(l[0], l[1])
			m.OldestAge.DeleteLabelValues(l[0], l[1])
		} else {
			m.DriftAmount.DeleteLabelValues(l[0], l[1], l[2])
		}
	}
	m.seen = now
}
