package activities

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/spend"
	"github.com/oncerun/oncerun/tools"
)

// SpendLevel is where one money limit stood at a step's charge.
type SpendLevel = spend.Level

// SpendAlerter delivers the alert that a tenant's cap reached 80% or 100%
// of its amount in its window (the alert webhook). The charge that raised
// it recorded it once per window; delivery is best effort.
type SpendAlerter interface {
	SpendAlert(ctx context.Context, tenant string, l SpendLevel) error
}

// alertTimeout bounds the delivery of a spend alert after a step.
const alertTimeout = 5 * time.Second

// chargeOf is what step in of tool, with the canonical arguments args,
// counts against the money limits; ok is false when the tool spends
// nothing countable.
func chargeOf(in ToolInput, key keys.Key, tool tools.Tool, args []byte) (c spend.Charge, ok bool, err error) {
	amounts, err := spend.Of(tool, args)
	if err != nil || len(amounts) == 0 {
		return spend.Charge{}, false, err
	}
	c = spend.Charge{Tenant: in.Tenant, RunID: in.RunID, Step: in.Step, Tool: in.Tool, Key: key.String(), Amounts: amounts,
		Unchecked: in.Spend == nil}
	if s := in.Spend; s != nil {
		c.Budget, c.BudgetRun, c.Exception, c.OtherCurrencies = s.Budget, s.BudgetRun, s.Exception, s.OtherCurrencies
	}
	return c, true, nil
}

// parked is the answer of a step that would cross level: nothing ran.
func (a *Activities) parked(ctx context.Context, in ToolInput, level spend.Level) ToolOutput {
	a.Metrics.StepParked(in.Tenant, level.Kind())
	a.log(ctx).Info("step parked at a spend limit: it waits for approval", zap.String("tenant", in.Tenant),
		zap.String("run_id", in.RunID), zap.Int64("step", in.Step), zap.String("tool", in.Tool),
		zap.String("reason", level.Reason()))
	return ToolOutput{Parked: &Parked{Reason: level.Reason(), Level: level}}
}

// counted reports a charge that committed: the caps' ratios, the amounts
// when they count as applied, and the alerts it raised.
func (a *Activities) counted(ctx context.Context, c spend.Charge, got spend.Counted, applied bool) {
	if got.Already {
		return
	}
	if applied {
		a.spent(c)
	}
	for _, l := range got.Levels {
		if l.Cap != "" {
			a.Metrics.CapRatio(c.Tenant, l.Cap, l.Ratio())
		}
	}
	alerts := got.Alerts()
	if len(alerts) == 0 {
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), alertTimeout)
	defer cancel()
	for _, l := range alerts {
		a.log(ctx).Warn("spend cap alert", zap.String("tenant", c.Tenant), zap.String("cap", l.Cap),
			zap.Int("percent", l.Alert), zap.Int64("spent", l.Spent+l.This), zap.Int64("cap_amount", l.Limit),
			zap.String("currency", l.Currency))
		if a.SpendAlerts == nil {
			continue
		}
		if err := a.SpendAlerts.SpendAlert(actx, c.Tenant, l); err != nil {
			a.log(ctx).Warn("spend cap alert not delivered", zap.String("tenant", c.Tenant), zap.String("cap", l.Cap),
				zap.Int("percent", l.Alert), zap.Error(err))
		}
	}
}

// spent counts c's amounts as applied.
func (a *Activities) spent(c spend.Charge) {
	for cur, n := range c.Amounts {
		a.Metrics.Spent(c.Tenant, c.Tool, cur, n)
	}
}

// settle settles an external step's reservation once its outcome is
// known: kept when applied, released when the effect provably did not
// happen. A failure is logged: a reservation left held counts until a
// person or a later attempt settles it, never less than it should.
func (a *Activities) settle(ctx context.Context, c spend.Charge, applied bool) {
	settled, err := spend.Settle(detachedCtx(ctx), a.Pool, c.Tenant, c.Key, applied)
	if err != nil {
		a.log(ctx).Warn("spend reservation not settled", zap.String("key", c.Key), zap.Bool("applied", applied), zap.Error(err))
		return
	}
	if applied {
		a.spent(spend.Charge{Tenant: c.Tenant, Tool: c.Tool, Amounts: settled})
	}
}

// release releases an external step's reservation after an attempt whose
// call did not happen, unless the step's key shows that another attempt
// may be making it or made it (this one lost its lease to it): that
// attempt's outcome settles the reservation. Should the two cross, an
// applied outcome counts the amount again (spend.Settle).
func (a *Activities) release(ctx context.Context, claim idempotency.Claim, c spend.Charge) {
	info, found, err := a.Store.Peek(detachedCtx(ctx), claim)
	switch {
	case errors.Is(err, idempotency.ErrKeyReuse):
		// The key holds other arguments (the step was tried before an
		// edit): nothing was sent under these.
	case err != nil:
		a.log(ctx).Warn("spend reservation kept: the step's key could not be read", zap.String("key", c.Key), zap.Error(err))
		return
	case found && (info.State != idempotency.StateFailed || info.Failure == nil || !info.Failure.BeforeEffect):
		return
	}
	a.settle(ctx, c, false)
}

// detachedCtx is ctx without its cancellation, bounded: a settlement is
// recorded even when the attempt's own deadline has passed.
func detachedCtx(ctx context.Context) context.Context {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	context.AfterFunc(c, cancel) // it ends by its timeout; cancel frees its timer then
	return c
}

// overOf returns the limit err says a charge would cross.
func overOf(err error) (spend.Level, bool) {
	var over *spend.OverError
	if errors.As(err, &over) {
		return over.Level, true
	}
	return spend.Level{}, false
}

// reserve reserves an external step's amounts before it is sent. Over a
// limit it returns the step's parked answer, unless the step's key shows
// the effect made already (a retry of a step applied before its amounts
// were counted, during a rolling deploy): a made effect never waits.
func (a *Activities) reserve(ctx context.Context, in ToolInput, claim idempotency.Claim, c spend.Charge) (*ToolOutput, error) {
	got, err := spend.Reserve(ctx, a.Pool, c)
	if err != nil {
		return nil, err
	}
	if got.Over == nil {
		a.counted(ctx, c, got, false)
		return nil, nil
	}
	info, found, err := a.Store.Peek(ctx, claim)
	if err != nil {
		return nil, err
	}
	if found && (info.State != idempotency.StateFailed || info.Failure == nil || !info.Failure.BeforeEffect) {
		// In flight elsewhere, completed, or of unknown outcome: the
		// store's protocol decides, as for any retry.
		return nil, nil
	}
	out := a.parked(ctx, in, *got.Over)
	return &out, nil
}
