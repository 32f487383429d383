package activities

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/reconcile"
)

// ReconcileInput is one reconciliation pass. Zero fields take the worker's
// configuration (Activities.Reconcile).
type ReconcileInput struct {
	// Settlement: only effects older than this are compared.
	Settlement time.Duration `json:"settlement,omitempty"`
	// Lookback is how far back the pass looks.
	Lookback time.Duration `json:"lookback,omitempty"`
}

// ReconcileOutput sums up a pass: what the open findings add up to after
// it. The findings themselves stay in reconciliation_findings, out of the
// run's history.
type ReconcileOutput struct {
	// Configured is false when the worker has no reconciliation configured
	// and nothing was compared.
	Configured bool `json:"configured"`
	// DriftCount counts the open findings.
	DriftCount int `json:"drift_count"`
	// DriftAmount sums their absolute amounts by currency, in integer minor
	// units.
	DriftAmount map[string]int64 `json:"drift_amount,omitempty"`
	// OldestUnreconciledAgeSeconds is the age of the oldest open finding's
	// effect.
	OldestUnreconciledAgeSeconds float64 `json:"oldest_unreconciled_age_seconds"`
	// Checked counts the effects and messages compared, Recorded the new
	// findings and Skipped the messages left for a later pass.
	Checked  int `json:"checked"`
	Recorded int `json:"recorded"`
	Skipped  int `json:"skipped,omitempty"`
}

// ReconcilePass runs one reconciliation pass (reconcile.Pass) and sets the
// reconciliation gauges to its report. A ledger that cannot be read fails
// the activity, to be retried, after the other sources were compared and
// the gauges set; a configuration the pass cannot run with fails it for
// good.
func (a *Activities) ReconcilePass(ctx context.Context, in ReconcileInput) (ReconcileOutput, error) {
	if a.Reconcile == nil {
		a.log().Warn("reconciliation pass skipped: this worker has no reconciliation configured")
		return ReconcileOutput{}, nil
	}
	cfg := *a.Reconcile
	if in.Settlement > 0 {
		cfg.Settlement = in.Settlement
	}
	if in.Lookback > 0 {
		cfg.Lookback = in.Lookback
	}
	if cfg.Log == nil {
		cfg.Log = a.log()
	}
	rep, err := reconcile.Pass(ctx, cfg)
	if errors.Is(err, reconcile.ErrConfig) {
		return ReconcileOutput{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidArgs, err)
	}
	// A report with no DriftAmount map was never made: the open findings
	// could not be read.
	if rep.DriftAmount != nil {
		a.ReconcileMetrics.Observe(rep)
	}
	out := ReconcileOutput{
		Configured: true, DriftCount: rep.DriftCount, DriftAmount: rep.DriftAmount,
		OldestUnreconciledAgeSeconds: rep.OldestUnreconciledAgeSeconds,
		Checked:                      rep.Checked, Recorded: rep.Recorded, Skipped: rep.Skipped,
	}
	if err != nil {
		return out, err
	}
	a.log().Info("reconciliation pass done", zap.Int("checked", out.Checked), zap.Int("recorded", out.Recorded),
		zap.Int("drift_count", out.DriftCount), zap.Float64("oldest_unreconciled_age_seconds", out.OldestUnreconciledAgeSeconds))
	return out, nil
}
