package reconcile

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oncerun/oncerun/internal/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.uber.org/zap"
)

// Defaults of [Config].
const (
	DefaultSettlement = 5 * time.Minute
	DefaultLookback   = 7 * 24 * time.Hour
	DefaultAlertAge   = 24 * time.Hour
)

// Kinds of finding, the values of the kind column.
const (
	// KindUnderRecorded: the provider holds an effect under a key that has
	// no completed row of ours.
	KindUnderRecorded = "under_recorded"
	// KindOverRecorded: we completed a key the provider does not list.
	KindOverRecorded = "over_recorded"
	// KindAmountMismatch: both hold the effect, with another amount or
	// currency (or the provider holds it more than once).
	KindAmountMismatch = "amount_mismatch"
	// KindUndelivered: an outbox message that was never delivered.
	KindUndelivered = "undelivered"
)

// ErrConfig is returned, wrapped, by [Pass] for a [Config] it cannot run
// with; the message names the field.
var ErrConfig = errors.New("invalid reconciliation config")

// ErrNotFound is returned by [Ack] for an id no finding has.
var ErrNotFound = errors.New("no such finding")

// ErrAlreadyAcked is returned by [Ack], with the finding as it stands, when
// the finding was acknowledged before by someone else or with another note.
var ErrAlreadyAcked = errors.New("finding already acknowledged")

// Entry is one effect in a provider's ledger.
type Entry struct {
	// Key is the idempotency key the effect was made under: ours when
	// oncerun made it. Empty when the provider holds none.
	Key string
	// ProviderID is the provider's id of the effect, such as re_123.
	ProviderID string
	// Amount is in integer minor units of Currency.
	Amount   int64
	Currency string
	// Created is when the provider made the effect.
	Created time.Time
	// Raw is the provider's record, kept with a finding as evidence.
	Raw json.RawMessage
}

// Source is a tool whose effects can be reconciled with a provider's
// ledger.
type Source struct {
	// Tool is the tool's name, as keys and rows of the dedup store spell it.
	Tool string
	// List returns the effects the provider made at or after since. It
	// lists only effects that took place (a refund the provider refused is
	// not one). Entries created after the settlement cutoff may be
	// returned; they are not compared yet.
	List func(ctx context.Context, since time.Time) ([]Entry, error)
	// Record reads our stored result of a completed key into an Entry
	// (amount, currency, provider id).
	Record func(result json.RawMessage) (Entry, error)
}

// Config configures reconciliation: its schedule on a worker (Interval,
// ScheduleID) and the pass the schedule, or `oncerun reconcile`, runs. A
// worker reads it from the environment ([ConfigFromEnv]) and fills in the
// pool, the sources, the log and RunOpen.
type Config struct {
	// Interval between scheduled passes. Default DefaultInterval
	// (RECONCILE_INTERVAL).
	Interval time.Duration
	// ScheduleID names the schedule. Default [ScheduleID]; deployments
	// sharing a namespace need one each.
	ScheduleID string
	// Pool is the database holding the dedup store, the outbox and the
	// findings. Required.
	Pool *pgxpool.Pool
	// Sources are the tools compared with a provider's ledger. With none,
	// a pass checks only the outbox.
	Sources []Source
	// Settlement: only effects older than this are compared, so that a
	// call in progress is not taken for drift. Default DefaultSettlement.
	Settlement time.Duration
	// Lookback is how far back a pass looks. Keep it shorter than the
	// retention window of every reconciled tool: a provider's effect whose
	// key was pruned would read as under-recorded. Default DefaultLookback.
	Lookback time.Duration
	// AlertAge: an error is logged when the oldest open finding of a tenant
	// and tool is older than this. Default DefaultAlertAge.
	AlertAge time.Duration
	// Log receives the alert lines and warnings. Default: none.
	Log *zap.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// RunOpen reports whether a run is still open. A pending outbox message
	// is reported only once its run closed or it is older than Lookback.
	// Nil: every undelivered message older than Settlement is reported.
	RunOpen func(ctx context.Context, tenant, runID string) (bool, error)
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Settlement = cmp.Or(c.Settlement, DefaultSettlement)
	c.Lookback = cmp.Or(c.Lookback, DefaultLookback)
	c.AlertAge = cmp.Or(c.AlertAge, DefaultAlertAge)
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	if c.Pool == nil {
		return fmt.Errorf("%w: Pool is nil", ErrConfig)
	}
	if c.Settlement < 0 {
		return fmt.Errorf("%w: Settlement %s is negative", ErrConfig, c.Settlement)
	}
	if c.Lookback <= c.Settlement {
		return fmt.Errorf("%w: Lookback %s is not longer than Settlement %s", ErrConfig, c.Lookback, c.Settlement)
	}
	if c.AlertAge < 0 {
		return fmt.Errorf("%w: AlertAge %s is negative", ErrConfig, c.AlertAge)
	}
	seen := map[string]bool{}
	for i, s := range c.Sources {
		switch {
		case s.Tool == "":
			return fmt.Errorf("%w: Sources[%d].Tool is empty", ErrConfig, i)
		case seen[s.Tool]:
			return fmt.Errorf("%w: Sources[%d]: tool %s has two sources", ErrConfig, i, s.Tool)
		case s.List == nil || s.Record == nil:
			return fmt.Errorf("%w: Sources[%d] (%s): List and Record are required", ErrConfig, i, s.Tool)
		}
		seen[s.Tool] = true
	}
	return nil
}

// Finding is one drift recorded in reconciliation_findings.
type Finding struct {
	ID     int64  `db:"id" json:"id"`
	Kind   string `db:"kind" json:"kind"`
	Tenant string `db:"tenant" json:"tenant"`
	Tool   string `db:"tool" json:"tool"`
	Key    string `db:"key" json:"key"`
	RunID  string `db:"run_id" json:"run_id"`
	Step   int64  `db:"step" json:"step"`
	// ProviderID is the provider's id of the effect, when it holds one.
	ProviderID string `db:"provider_id" json:"provider_id"`
	// Amount is the drift in integer minor units of Currency, signed as
	// the provider's amount minus ours.
	Amount   int64  `db:"amount" json:"amount"`
	Currency string `db:"currency" json:"currency"`
	Detail   string `db:"detail" json:"detail"`
	// EffectAt is when the effect (or the message) was made.
	EffectAt time.Time  `db:"effect_at" json:"effect_at"`
	FoundAt  time.Time  `db:"found_at" json:"found_at"`
	AckedAt  *time.Time `db:"acked_at" json:"acked_at"`
	AckedBy  string     `db:"acked_by" json:"acked_by"`
	AckNote  string     `db:"ack_note" json:"ack_note"`
}

// Report is what the open (unacknowledged) findings add up to after a pass.
type Report struct {
	// DriftCount counts the open findings.
	DriftCount int `json:"drift_count"`
	// DriftAmount sums the open findings' absolute amounts by currency, in
	// integer minor units.
	DriftAmount map[string]int64 `json:"drift_amount"`
	// OldestUnreconciledAgeSeconds is the age of the effect of the oldest
	// open finding; 0 when none is open.
	OldestUnreconciledAgeSeconds float64 `json:"oldest_unreconciled_age_seconds"`
	// Findings lists the open findings, oldest effect first, at most
	// MaxReportFindings of them (DriftCount counts them all).
	Findings []Finding `json:"findings"`
	// ByLabel breaks the open findings down by tenant and tool.
	ByLabel []Drift `json:"-"`
	// Checked counts the effects and messages this pass compared.
	Checked int `json:"checked"`
	// Recorded counts the findings this pass recorded for the first time.
	Recorded int `json:"recorded"`
	// Skipped counts outbox messages left for a later pass because it
	// could not be told whether their run is open.
	Skipped int `json:"skipped"`
}

// Drift is the open findings of one tenant and tool.
type Drift struct {
	Tenant string
	Tool   string
	Count  int
	// Amount sums the absolute amounts by currency.
	Amount map[string]int64
	// OldestAgeSeconds is the age of the oldest effect, OldestID its
	// finding.
	OldestAgeSeconds float64
	OldestID         int64
}

// MaxReportFindings bounds the findings a [Report] lists.
const MaxReportFindings = 1000

// Pass runs one reconciliation pass: it compares each source's ledger with
// our record, looks for undelivered outbox messages, records what is new
// and reports on every open finding. A source whose ledger cannot be read
// is left out of this pass, which goes on with the others and then returns
// the error beside the report.
func Pass(ctx context.Context, cfg Config) (rep Report, err error) {
	ctx, span := telemetry.Tracer().Start(ctx, "oncerun.reconcile")
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attribute.Int("oncerun.checked", rep.Checked), attribute.Int("oncerun.recorded", rep.Recorded),
				attribute.Int("oncerun.drift_count", rep.DriftCount))
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, "the pass failed")
			}
		}
		span.End()
	}()
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return Report{}, err
	}
	now := cfg.Now()
	w := window{
		now:    now,
		since:  now.Add(-cfg.Lookback),
		cutoff: now.Add(-cfg.Settlement),
		margin: cfg.Settlement,
	}
	var errs []error
	for _, s := range cfg.Sources {
		found, checked, err := compare(ctx, cfg, s, w)
		if err != nil {
			cfg.Log.Error("reconciliation could not compare a tool's effects", zap.String("tool", s.Tool), zap.Error(err))
			errs = append(errs, err)
			continue
		}
		rep.Checked += checked
		n, err := record(ctx, cfg.Pool, found)
		rep.Recorded += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	found, checked, skipped, err := undelivered(ctx, cfg, w)
	rep.Checked += checked
	rep.Skipped = skipped
	if err != nil {
		errs = append(errs, err)
	} else {
		n, err := record(ctx, cfg.Pool, found)
		rep.Recorded += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	open, err := openReport(ctx, cfg.Pool, now)
	if err != nil {
		return rep, errors.Join(append(errs, err)...)
	}
	open.Checked, open.Recorded, open.Skipped = rep.Checked, rep.Recorded, rep.Skipped
	alert(cfg, open)
	return open, errors.Join(errs...)
}

// window is the span of time one pass compares.
type window struct {
	now time.Time
	// since: keys of ours created before it are not compared.
	since time.Time
	// cutoff: effects made after it are not settled yet.
	cutoff time.Time
	// margin widens the provider listing before since, for clocks that
	// differ.
	margin time.Duration
}

// alert logs an error for each tenant and tool whose oldest open finding is
// older than cfg.AlertAge.
func alert(cfg Config, rep Report) {
	for _, d := range rep.ByLabel {
		if d.OldestAgeSeconds > cfg.AlertAge.Seconds() {
			cfg.Log.Error("reconciliation drift unacknowledged past the alert age",
				zap.String("tenant", d.Tenant), zap.String("tool", d.Tool), zap.Int64("finding_id", d.OldestID),
				zap.Duration("age", time.Duration(d.OldestAgeSeconds*float64(time.Second))),
				zap.Duration("alert_age", cfg.AlertAge), zap.Int("open_findings", d.Count))
		}
	}
}
