package payments

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// DefaultAddr is where the sandbox listens when Config.Addr is empty.
const DefaultAddr = "127.0.0.1:8099"

// DefaultAPIKey is the secret key requests must present when Config.APIKey
// is empty.
const DefaultAPIKey = "sk_test_oncerun"

// DefaultKeyRetention is how long an idempotency key is remembered when
// Config.KeyRetention is zero.
const DefaultKeyRetention = 24 * time.Hour

// ErrConfig is wrapped by every error about an invalid Config.
var ErrConfig = errors.New("invalid sandbox payments config")

// Config configures a sandbox payment provider.
type Config struct {
	// Addr is the address Start listens on. Default DefaultAddr; use
	// "127.0.0.1:0" for a free port.
	Addr string
	// DataDir holds the ledger file. Required; created if missing.
	DataDir string
	// KeyRetention is how long an idempotency key binds its first refund.
	// After that the same key makes a new refund. Default
	// DefaultKeyRetention.
	KeyRetention time.Duration
	// APIKey is the bearer token every request must carry in its
	// Authorization header. Default DefaultAPIKey.
	APIKey string
	// Payments are stored when the server starts, as if seeded with
	// SeedPayment. Optional.
	Payments []Payment
	// Now is the clock used for refund creation times and key retention.
	// Default time.Now.
	Now func() time.Time
	// Log receives one line per request. Default zap.NewNop().
	Log *zap.Logger
}

// WithDefaults returns a copy of c with every empty field set to its default.
func (c Config) WithDefaults() Config {
	c.Addr = cmp.Or(c.Addr, DefaultAddr)
	c.KeyRetention = cmp.Or(c.KeyRetention, DefaultKeyRetention)
	c.APIKey = cmp.Or(c.APIKey, DefaultAPIKey)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	return c
}

func (c Config) validate() error {
	if c.DataDir == "" {
		return fmt.Errorf("%w: DataDir is required", ErrConfig)
	}
	if c.KeyRetention < 0 {
		return fmt.Errorf("%w: KeyRetention must not be negative, got %s", ErrConfig, c.KeyRetention)
	}
	return nil
}
