package reconcile

import (
	"cmp"
	"fmt"
	"time"

	"github.com/oncerun/oncerun/internal/settings"
)

// ConfigFromEnv reads the reconciliation variables (RECONCILE_INTERVAL,
// RECONCILE_SETTLEMENT, RECONCILE_LOOKBACK, RECONCILE_ALERT_AGE) into the
// fields they set; each must be a positive duration, and the lookback
// longer than the settlement.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var c Config
	for name, dst := range map[string]*time.Duration{
		settings.EnvReconcileInterval: &c.Interval, settings.EnvReconcileSettlement: &c.Settlement,
		settings.EnvReconcileLookback: &c.Lookback, settings.EnvReconcileAlertAge: &c.AlertAge,
	} {
		if s := getenv(name); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				return Config{}, fmt.Errorf("%s %q is not a positive duration such as 10m", name, s)
			}
			*dst = d
		}
	}
	lookback, settlement := cmp.Or(c.Lookback, DefaultLookback), cmp.Or(c.Settlement, DefaultSettlement)
	if lookback <= settlement {
		return Config{}, fmt.Errorf("%s %s is not longer than %s %s", settings.EnvReconcileLookback, lookback, settings.EnvReconcileSettlement, settlement)
	}
	return c, nil
}
