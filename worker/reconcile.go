package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/reconcile"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/workflows"
)

// defaultReconcileInterval is the default of ReconcileConfig.Interval.
const defaultReconcileInterval = 10 * time.Minute

// ReconcileConfig configures reconciliation on a worker: its schedule, and
// the pass the schedule runs.
type ReconcileConfig struct {
	// Interval between passes. Default defaultReconcileInterval
	// (RECONCILE_INTERVAL).
	Interval time.Duration
	// ScheduleID names the schedule. Default workflows.ReconcileScheduleID;
	// deployments sharing a namespace need one each.
	ScheduleID string
	// Settlement, Lookback and AlertAge configure the pass; zero takes
	// reconcile's defaults (RECONCILE_SETTLEMENT, RECONCILE_LOOKBACK,
	// RECONCILE_ALERT_AGE).
	Settlement time.Duration
	Lookback   time.Duration
	AlertAge   time.Duration
}

// ReconcileConfigFromEnv reads the reconciliation variables.
func ReconcileConfigFromEnv(getenv func(string) string) (ReconcileConfig, error) {
	var c ReconcileConfig
	for name, dst := range map[string]*time.Duration{
		settings.EnvReconcileInterval: &c.Interval, settings.EnvReconcileSettlement: &c.Settlement,
		settings.EnvReconcileLookback: &c.Lookback, settings.EnvReconcileAlertAge: &c.AlertAge,
	} {
		if s := getenv(name); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				return ReconcileConfig{}, fmt.Errorf("%s %q is not a positive duration such as 10m", name, s)
			}
			*dst = d
		}
	}
	lookback, settlement := cmp.Or(c.Lookback, reconcile.DefaultLookback), cmp.Or(c.Settlement, reconcile.DefaultSettlement)
	if lookback <= settlement {
		return ReconcileConfig{}, fmt.Errorf("%s %s is not longer than %s %s", settings.EnvReconcileLookback, lookback, settings.EnvReconcileSettlement, settlement)
	}
	return c, nil
}

// newReconcile builds the reconciliation pass of a worker's activities
// (Activities.Reconcile) and its gauges, registered on reg. rs tells
// whether a run is still open, so that a pending outbox message of an open
// run is not taken for drift.
func newReconcile(cfg ReconcileConfig, pool *pgxpool.Pool, sources []reconcile.Source, rs runs.States,
	log *zap.Logger, reg prometheus.Registerer) (*reconcile.Config, *reconcile.Metrics) {
	rc := &reconcile.Config{
		Pool: pool, Sources: sources, Settlement: cfg.Settlement, Lookback: cfg.Lookback, AlertAge: cfg.AlertAge, Log: log,
	}
	if rs != nil {
		rc.RunOpen = func(ctx context.Context, tenant, runID string) (bool, error) {
			open, _, err := rs.RunState(ctx, tenant, runID)
			return open, err
		}
	}
	return rc, reconcile.NewMetrics(reg)
}

// registerReconcile registers the reconciliation workflow on w. The
// activity is a method of activities.Activities, registered with it.
func registerReconcile(w sdkworker.Worker) {
	w.RegisterWorkflow(workflows.Reconcile)
}

// ensureReconcileSchedule creates the reconciliation's Temporal Schedule,
// or updates it to cfg if it exists: every worker calls it at start, and
// the schedule, with overlap policy SKIP, runs one pass at a time however
// many workers there are.
func ensureReconcileSchedule(ctx context.Context, c client.Client, taskQueue string, cfg ReconcileConfig) error {
	id := cmp.Or(cfg.ScheduleID, workflows.ReconcileScheduleID)
	interval := cfg.Interval
	if interval <= 0 {
		interval = defaultReconcileInterval
	}
	action := &client.ScheduleWorkflowAction{
		ID:       id,
		Workflow: workflows.Reconcile,
		// The pass's settings live in the workers' configuration, so that a
		// change to them needs no change to the schedule.
		Args:      []any{workflows.ReconcileInput{}},
		TaskQueue: cmp.Or(taskQueue, workflows.DefaultTaskQueue),
	}
	spec := client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: interval}}}
	_, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{ID: id, Spec: spec, Action: action})
	if err == nil {
		return nil
	}
	if !errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return fmt.Errorf("create schedule %s: %w", id, err)
	}
	err = c.ScheduleClient().GetHandle(ctx, id).Update(ctx, client.ScheduleUpdateOptions{
		DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
			s := in.Description.Schedule
			s.Spec = &spec
			s.Action = action
			return &client.ScheduleUpdate{Schedule: &s}, nil
		},
	})
	if err != nil {
		return fmt.Errorf("update schedule %s: %w", id, err)
	}
	return nil
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
