package worker

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/reconcile"
	"github.com/oncerun/oncerun/internal/runs"
)

// ReconcileConfig configures reconciliation on a worker: its schedule
// (Interval, ScheduleID) and the pass the schedule runs (Settlement,
// Lookback, AlertAge); the worker fills in the rest.
type ReconcileConfig = reconcile.Config

// ReconcileActivities is the reconciliation pass as a Temporal activity,
// for [NewWorker].
type ReconcileActivities = reconcile.Activities

// newReconcile builds the reconciliation pass of a worker (its
// configuration, with the worker's pool, sources and log) and its gauges,
// registered on reg. rs tells whether a run is still open, so that a
// pending outbox message of an open run is not taken for drift.
func newReconcile(cfg ReconcileConfig, pool *pgxpool.Pool, sources []reconcile.Source, rs runs.States,
	log *zap.Logger, reg prometheus.Registerer) *ReconcileActivities {
	cfg.Pool, cfg.Sources, cfg.Log = pool, sources, log
	if rs != nil {
		cfg.RunOpen = func(ctx context.Context, tenant, runID string) (bool, error) {
			open, _, err := rs.RunState(ctx, tenant, runID)
			return open, err
		}
	}
	return &ReconcileActivities{Config: &cfg, Metrics: reconcile.NewMetrics(reg), Log: log}
}

// refreshDrift sets m from the open findings every interval until ctx
// ends: the gauges of every worker follow the table, not only those of the
// worker that ran the last pass.
func refreshDrift(ctx context.Context, pool *pgxpool.Pool, m *reconcile.Metrics, every time.Duration, log *zap.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, every)
		rep, err := reconcile.Open(rctx, pool)
		cancel()
		switch {
		case err == nil:
			m.Observe(rep)
		case ctx.Err() == nil:
			log.Warn("refresh the drift gauges", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
