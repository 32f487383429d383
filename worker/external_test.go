package worker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/payments"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/worker"
)

// The provider's key lifetime decides whether an unresolved refund may be
// resent under its key, so a value the worker cannot read is refused at
// start-up, naming the variable, rather than dropped for the default.
func TestPaymentsKeyLifetimeFromEnvRefusesAValueThatIsNotAPositiveDuration(t *testing.T) {
	t.Parallel()
	for _, value := range []string{"soon", "24", "1 day", "0", "0s", "-1h"} {
		t.Run(value, func(t *testing.T) {
			t.Parallel()
			getenv := getenvOf(map[string]string{settings.EnvPaymentsKeyLifetime: value})

			_, err := worker.ExternalFromEnv(getenv)
			require.Error(t, err)
			assert.Contains(t, err.Error(), `PAYMENTS_KEY_LIFETIME "`+value+`" is not a positive duration`)

			_, _, err = worker.ConfigFromEnv(getenv)
			require.Error(t, err, "the worker's own configuration reports it too")
			assert.Contains(t, err.Error(), "PAYMENTS_KEY_LIFETIME")
		})
	}
}

func TestPaymentsKeyLifetimeFromEnvReachesRefundPayment(t *testing.T) {
	t.Parallel()
	cfg, _, err := worker.ConfigFromEnv(getenvOf(map[string]string{settings.EnvPaymentsKeyLifetime: "36h"}))
	require.NoError(t, err)
	assert.Equal(t, 36*time.Hour, cfg.External.PaymentsKeyLifetime)

	reg, err := worker.Registry(cfg)
	require.NoError(t, err)
	refund, ok := reg.Lookup(payments.RefundPayment)
	require.True(t, ok)
	assert.Equal(t, 36*time.Hour, refund.KeyLifetime)

	// Unset, the provider's documented default applies.
	cfg, _, err = worker.ConfigFromEnv(getenvOf(nil))
	require.NoError(t, err)
	assert.Zero(t, cfg.External.PaymentsKeyLifetime)
	reg, err = worker.Registry(cfg)
	require.NoError(t, err)
	refund, _ = reg.Lookup(payments.RefundPayment)
	assert.Equal(t, payments.DefaultKeyLifetime, refund.KeyLifetime)
}

// A positive lifetime passes the parser but may still be shorter than one
// refund attempt; the registry is what refuses it, naming the tool.
func TestPaymentsKeyLifetimeShorterThanARefundAttemptIsRefusedByTheRegistry(t *testing.T) {
	t.Parallel()
	cfg, _, err := worker.ConfigFromEnv(getenvOf(map[string]string{settings.EnvPaymentsKeyLifetime: "1m"}))
	require.NoError(t, err)

	_, err = worker.Registry(cfg)
	require.ErrorIs(t, err, tools.ErrInvalidTool)
	assert.Contains(t, err.Error(), "tool refund_payment: key lifetime 1m0s is not longer than one attempt's timeout")
}

// getenvOf serves vars as os.Getenv serves the environment.
func getenvOf(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}
