package watchdog

import (
	"cmp"
	"fmt"
	"math"
	"time"
)

// Expiry policies for the expired keys of open runs.
const (
	// PolicyHold keeps the key and extends its expiry by the tool's window.
	PolicyHold = "hold"
	// PolicyPrune deletes the key as if its run had closed.
	PolicyPrune = "prune"
)

// Defaults of [Config].
const (
	DefaultInterval   = 5 * time.Minute
	DefaultPolicy     = PolicyHold
	DefaultBatchSize  = 250
	DefaultMaxBatches = 100
	// DefaultDutyCycle keeps claims' p99 within 2× of idle while a backlog
	// is pruned (docs/watchdog.md); a pass of MaxBatches still ends within
	// seconds.
	DefaultDutyCycle = 0.05
	// DefaultScheduleID is the Temporal Schedule that runs [Workflow].
	DefaultScheduleID = "oncerun-expiry-watchdog"
)

// Config configures the expiry watchdog. Zero fields take their defaults
// ([Config.WithDefaults]).
type Config struct {
	// Interval between passes. Default DefaultInterval, 5 minutes
	// (WATCHDOG_INTERVAL).
	Interval time.Duration
	// Policy for expired keys of open runs: PolicyHold or PolicyPrune.
	// Default DefaultPolicy, hold (EXPIRY_POLICY).
	Policy string
	// BatchSize bounds the keys one activity locks. Default
	// DefaultBatchSize, 250 (WATCHDOG_BATCH_SIZE).
	BatchSize int
	// MaxBatches bounds one pass; the next pass goes on. Default
	// DefaultMaxBatches, 100.
	MaxBatches int
	// DutyCycle is the share of a pass's time its batches may keep the
	// database busy, in (0, 1]; 1 runs them back to back. Default
	// DefaultDutyCycle, 0.05 (WATCHDOG_DUTY_CYCLE).
	DutyCycle float64
	// ScheduleID names the schedule. Default DefaultScheduleID;
	// deployments sharing a namespace need one each.
	ScheduleID string
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Interval = cmp.Or(c.Interval, DefaultInterval)
	c.Policy = cmp.Or(c.Policy, DefaultPolicy)
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.MaxBatches = cmp.Or(c.MaxBatches, DefaultMaxBatches)
	c.DutyCycle = cmp.Or(c.DutyCycle, DefaultDutyCycle)
	c.ScheduleID = cmp.Or(c.ScheduleID, DefaultScheduleID)
	return c
}

// Validate reports the first field of c that holds a value the watchdog
// cannot take, by name. Zero fields are valid: they take their defaults.
func (c Config) Validate() error {
	switch {
	case c.Interval < 0:
		return fmt.Errorf("watchdog Config.Interval is %s; it must be positive", c.Interval)
	case c.Policy != "" && c.Policy != PolicyHold && c.Policy != PolicyPrune:
		return fmt.Errorf("watchdog Config.Policy %q is not %s or %s", c.Policy, PolicyHold, PolicyPrune)
	case c.BatchSize < 0:
		return fmt.Errorf("watchdog Config.BatchSize is %d; it must be positive", c.BatchSize)
	case c.MaxBatches < 0:
		return fmt.Errorf("watchdog Config.MaxBatches is %d; it must be positive", c.MaxBatches)
	case math.IsNaN(c.DutyCycle) || c.DutyCycle < 0 || c.DutyCycle > 1:
		return fmt.Errorf("watchdog Config.DutyCycle is %v; it must be a share in (0, 1] such as %v", c.DutyCycle, DefaultDutyCycle)
	}
	return nil
}

// input is the input of each pass the schedule starts: every field set
// here, not defaulted in the workflow, so that a pass in flight during a
// deploy that changes a default replays as it began.
func (c Config) input() Input {
	c = c.WithDefaults()
	return Input{Policy: c.Policy, BatchSize: c.BatchSize, MaxBatches: c.MaxBatches, DutyCycle: c.DutyCycle}
}
