package idempotency

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/oncerun/oncerun/internal/keys"
)

// Defaults for [Config].
const (
	DefaultRetention = 30 * 24 * time.Hour
	DefaultLease     = 5 * time.Minute
)

// Config configures a [Store].
type Config struct {
	// Logger receives one structured line per decision about a tool call, each
	// with the call's tenant, run_id, step, tool and key. Default: no logging.
	Logger *zap.Logger
	// Owner names this process in the lease_owner column. It must differ
	// between processes sharing a database. Default: "<hostname>/<pid>/<uuid>".
	Owner string
	// Retention is how long a key is kept after it is claimed when the claim
	// sets none. Default: [DefaultRetention] (30 days).
	Retention time.Duration
	// Lease is how long a claim stays exclusive when the claim sets none. It
	// must exceed the slowest legitimate call, or a live call's key is taken
	// over. Default: [DefaultLease] (5 minutes).
	Lease time.Duration
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Logger = cmp.Or(c.Logger, zap.NewNop())
	c.Owner = cmp.Or(c.Owner, defaultOwner())
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	c.Lease = cmp.Or(c.Lease, DefaultLease)
	return c
}

func (c Config) validate() error {
	switch {
	case c.Retention < 0:
		return fmt.Errorf("Config.Retention is %s; it must be positive", c.Retention)
	case c.Lease < 0:
		return fmt.Errorf("Config.Lease is %s; it must be positive", c.Lease)
	case c.Lease > c.Retention:
		return fmt.Errorf("Config.Lease (%s) is longer than Config.Retention (%s): a key could be pruned while its call is in flight", c.Lease, c.Retention)
	}
	return nil
}

func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), uuid.NewString())
}

// Store is the dedup store. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	cfg  Config
	log  *zap.Logger
}

// New returns a store on pool. The pool's database must be migrated.
func New(pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("idempotency.New: pool is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("idempotency.New: %w", err)
	}
	return &Store{pool: pool, cfg: cfg, log: cfg.Logger}, nil
}

// Owner returns the name under which this store holds leases.
func (s *Store) Owner() string { return s.cfg.Owner }

// Claim is what a caller asks the store to make happen once.
type Claim struct {
	// Key identifies the call.
	Key keys.Key
	// ArgsHash is [keys.ArgsHash] of the call's arguments.
	ArgsHash string
	// Retention is how long the key is kept after it is claimed.
	// Zero means the store's [Config.Retention].
	Retention time.Duration
	// Lease is how long the claim stays exclusive. Zero means the store's
	// [Config.Lease].
	Lease time.Duration
}

var argsHashPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (s *Store) prepare(c Claim) (claimArgs, error) {
	if err := c.Key.Validate(); err != nil {
		return claimArgs{}, fmt.Errorf("%w: %w", ErrInvalidClaim, err)
	}
	if !argsHashPattern.MatchString(c.ArgsHash) {
		return claimArgs{}, fmt.Errorf("%w: args hash %q is not 64 lower-case hex digits", ErrInvalidClaim, c.ArgsHash)
	}
	if c.Retention < 0 || c.Lease < 0 {
		return claimArgs{}, fmt.Errorf("%w: retention %s and lease %s must not be negative", ErrInvalidClaim, c.Retention, c.Lease)
	}
	a := claimArgs{
		Claim:     c,
		key:       c.Key.String(),
		retention: cmp.Or(c.Retention, s.cfg.Retention),
		lease:     cmp.Or(c.Lease, s.cfg.Lease),
	}
	if a.lease > a.retention {
		return claimArgs{}, fmt.Errorf("%w: lease %s is longer than retention %s", ErrInvalidClaim, a.lease, a.retention)
	}
	return a, nil
}

// claimArgs is a validated claim with its derived values.
type claimArgs struct {
	Claim
	key              string
	retention, lease time.Duration
}

// debug logs msg at debug level with the call's fields, building them only
// when debug logging is on: it sits on the path of every executed call.
func (s *Store) debug(msg string, a claimArgs, attempt int32) {
	if ce := s.log.Check(zapcore.DebugLevel, msg); ce != nil {
		ce.Write(a.fields(zap.Int32("attempt", attempt))...)
	}
}

// fields returns the log fields every line about the call carries.
func (a claimArgs) fields(extra ...zap.Field) []zap.Field {
	return append([]zap.Field{
		zap.String("tenant", a.Key.Tenant),
		zap.String("run_id", a.Key.RunID),
		zap.Int64("step", a.Key.Step),
		zap.String("tool", a.Key.Tool),
		zap.String("key", a.key),
	}, extra...)
}

// Outcome is the result of a call made once.
type Outcome struct {
	// Result is the effect's result as the store holds it. A replay returns
	// the same bytes as the call that executed the effect.
	Result json.RawMessage
	// Replayed is true when the effect had already been applied by an earlier
	// call and Result comes from the store.
	Replayed bool
}

// Failure describes a failed attempt.
type Failure struct {
	// Message says what went wrong.
	Message string `json:"message"`
	// BeforeEffect is true only when the failure provably happened before the
	// effect could have begun (invalid input, connection refused before the
	// request was sent). Timeouts and server errors after sending are not.
	// Such a key may be claimed again; any other failure leaves the outcome
	// unknown to the next caller.
	BeforeEffect bool `json:"before_effect"`
	// Unresolved marks the failure recorded when nothing could settle an
	// earlier attempt's unknown outcome (see [Store.External]); Message is
	// then that attempt's account.
	Unresolved bool `json:"unresolved,omitempty"`
}
