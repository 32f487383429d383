package metrics

import (
	"cmp"
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/approvalstore"
)

// DefaultPendingApprovalsTimeout bounds the query of one scrape of
// [PendingApprovals]: well inside Prometheus's default scrape timeout
// (10 s), so a slow database costs a scrape these gauges, not the scrape.
const DefaultPendingApprovalsTimeout = 2 * time.Second

var (
	pendingDesc = prometheus.NewDesc("oncerun_approvals_pending",
		"Steps waiting for an approval decision, by tenant and tool, read from the approvals table at scrape time.",
		[]string{"tenant", "tool"}, nil)
	oldestPendingDesc = prometheus.NewDesc("oncerun_approvals_oldest_pending_age_seconds",
		"How long the oldest step waiting for an approval decision has waited, by tenant and tool, read at scrape time.",
		[]string{"tenant", "tool"}, nil)
)

// PendingApprovals is a prometheus.Collector of the steps waiting for a
// decision: oncerun_approvals_pending and
// oncerun_approvals_oldest_pending_age_seconds, by tenant and tool. It reads
// the approvals table at each scrape rather than counting events, so every
// worker reports the same figures, whichever of them recorded the steps,
// and a restart loses nothing. A tenant's tool with nothing pending has no
// series. A query that fails or times out is logged and counted in
// oncerun_approvals_stats_errors_total, and that scrape has no gauges; the
// rest of /metrics is served as usual.
type PendingApprovals struct {
	db      approvalstore.DB
	timeout time.Duration
	log     *zap.Logger
	failed  prometheus.Counter
}

// NewPendingApprovals returns the collector of the approvals in db. timeout
// bounds each scrape's query, waiting for a connection included (0:
// DefaultPendingApprovalsTimeout); log receives failed queries (nil: none).
// Register it on the registry /metrics serves.
func NewPendingApprovals(db approvalstore.DB, timeout time.Duration, log *zap.Logger) *PendingApprovals {
	if log == nil {
		log = zap.NewNop()
	}
	return &PendingApprovals{
		db:      db,
		timeout: cmp.Or(timeout, DefaultPendingApprovalsTimeout),
		log:     log,
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "oncerun_approvals_stats_errors_total",
			Help: "Scrapes whose query of pending approvals failed or timed out; such a scrape has no oncerun_approvals_pending series.",
		}),
	}
}

// Describe implements prometheus.Collector.
func (p *PendingApprovals) Describe(ch chan<- *prometheus.Desc) {
	ch <- pendingDesc
	ch <- oldestPendingDesc
	p.failed.Describe(ch)
}

// Collect implements prometheus.Collector: one query per scrape.
func (p *PendingApprovals) Collect(ch chan<- prometheus.Metric) {
	defer p.failed.Collect(ch)
	// A scrape carries no context of its own; the timeout is what keeps a
	// busy pool or a locked table from holding /metrics.
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	stats, err := approvalstore.PendingStats(ctx, p.db, time.Now())
	if err != nil {
		p.failed.Inc()
		p.log.Error("pending approvals not measured; this scrape has no oncerun_approvals_pending",
			zap.Duration("timeout", p.timeout), zap.Error(err))
		return
	}
	for _, s := range stats {
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(s.Pending), s.Tenant, s.Tool)
		ch <- prometheus.MustNewConstMetric(oldestPendingDesc, prometheus.GaugeValue, s.OldestAge.Seconds(), s.Tenant, s.Tool)
	}
}
