package activities

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/spend"
	"github.com/oncerun/oncerun/tools"
)

// Resolution row states, as the resolutions table spells them.
const (
	ResolutionPending    = approvalstore.ResolutionPending
	ResolutionApplied    = approvalstore.ResolutionApplied
	ResolutionNotApplied = approvalstore.ResolutionNotApplied
)

// ResolutionRequest records a step whose outcome is unknown, for people to
// resolve.
type ResolutionRequest struct {
	Tenant      string          `json:"tenant"`
	RunID       string          `json:"run_id"`
	Step        int64           `json:"step"`
	Round       int             `json:"round"`
	Tool        string          `json:"tool"`
	Key         string          `json:"key"`
	Args        json.RawMessage `json:"args"`
	ArgsHash    string          `json:"args_hash"`
	Goal        string          `json:"goal"`
	FirstSentAt time.Time       `json:"first_sent_at"`
	Known       string          `json:"known"`
	RequestedAt time.Time       `json:"requested_at"`
	Deadline    time.Time       `json:"deadline"`
}

// RequestResolution writes the pending row of a step whose outcome is
// unknown. A retried request finds the row written and changes nothing.
func (a *Activities) RequestResolution(ctx context.Context, in ResolutionRequest) error {
	err := approvalstore.RecordUnresolved(ctx, a.Pool, approvalstore.Resolution{
		Tenant: in.Tenant, RunID: in.RunID, Step: in.Step, Round: in.Round, Tool: in.Tool, Key: in.Key, Args: in.Args,
		ArgsHash: in.ArgsHash, Goal: in.Goal, FirstSentAt: in.FirstSentAt, Known: in.Known, RequestedAt: in.RequestedAt,
		Deadline: in.Deadline,
	})
	if err != nil {
		return dataError(err)
	}
	a.log(ctx).Warn("step needs resolution: its outcome is unknown", zap.String("tenant", in.Tenant), zap.String("run_id", in.RunID),
		zap.Int64("step", in.Step), zap.String("tool", in.Tool), zap.String("key", in.Key), zap.Int("round", in.Round),
		zap.String("known", in.Known), zap.Time("deadline", in.Deadline))
	return nil
}

// ResolutionAnswer is a person's answer, for the run to apply.
type ResolutionAnswer struct {
	Tenant   string `json:"tenant"`
	RunID    string `json:"run_id"`
	Step     int64  `json:"step"`
	Round    int    `json:"round"`
	Tool     string `json:"tool"`
	ArgsHash string `json:"args_hash"`
	// Args are the step's arguments, for the tool's paired read (runs
	// begun before they were sent leave them out: the answer's result is
	// then stored as given).
	Args    json.RawMessage `json:"args,omitempty"`
	Applied bool            `json:"applied"`
	Result  json.RawMessage `json:"result,omitempty"`
	By      string          `json:"by"`
	Note    string          `json:"note,omitempty"`
	At      time.Time       `json:"at"`
}

// ApplyResolutionOutput is the step's result after an applied answer.
type ApplyResolutionOutput struct {
	Result json.RawMessage `json:"result"`
	// Replayed is true when the key had completed meanwhile and its stored
	// result stands.
	Replayed bool `json:"replayed,omitempty"`
}

// ApplyResolution records a person's answer in the dedup store (applied:
// the key completes with the answer's result; not applied: the key is freed
// for a new attempt under the same key) and on the resolutions row. It is
// idempotent. An answer the store contradicts (not applied for a key that
// completed) fails without retries.
func (a *Activities) ApplyResolution(ctx context.Context, in ResolutionAnswer) (ApplyResolutionOutput, error) {
	key, err := keys.New(in.Tenant, in.RunID, in.Step, in.Tool)
	if err != nil {
		return ApplyResolutionOutput{}, temporalError(err)
	}
	claim := idempotency.Claim{Key: key, ArgsHash: in.ArgsHash}
	if t, ok := a.Tools.Lookup(in.Tool); ok {
		claim.Retention = t.Retention
		if in.Applied {
			in.Result = a.providersRecord(ctx, t, key, in)
		}
	}
	out, err := a.Store.Resolve(ctx, claim, idempotency.Answer{Applied: in.Applied, Result: in.Result, By: in.By, Note: in.Note})
	if errors.Is(err, idempotency.ErrResolvedOtherwise) {
		return ApplyResolutionOutput{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeOutcomeUnknown, err)
	}
	if err != nil {
		return ApplyResolutionOutput{}, temporalError(err)
	}
	state := ResolutionNotApplied
	if in.Applied {
		state = ResolutionApplied
	}
	err = approvalstore.RecordResolved(ctx, a.Pool, approvalstore.Resolution{
		Tenant: in.Tenant, RunID: in.RunID, Step: in.Step, Round: in.Round, State: state, ResolvedBy: in.By,
		ResolvedAt: &in.At, Result: out.Result, Note: in.Note,
	})
	if err != nil {
		return ApplyResolutionOutput{}, dataError(err)
	}
	// A reservation held while nobody knew is kept when the effect
	// happened and released when it did not (a new attempt reserves again).
	settled, err := spend.Settle(ctx, a.Pool, in.Tenant, key.String(), in.Applied)
	if err != nil {
		return ApplyResolutionOutput{}, temporalError(err)
	}
	if in.Applied {
		a.spent(spend.Charge{Tenant: in.Tenant, Tool: in.Tool, Amounts: settled})
	}
	a.log(ctx).Info("resolution applied", callFields(key, zap.String("outcome", state), zap.String("by", in.By), zap.Int("round", in.Round))...)
	return ApplyResolutionOutput{Result: out.Result, Replayed: out.Replayed}, nil
}

// providersRecord is the result an applied answer completes the key with:
// the provider's own record of the effect when the tool's paired read finds
// it now, so that reconciliation compares the provider's amount with the
// provider's amount, not with what a person typed (a result without an
// amount would read as drift of the whole amount); the answer's result
// otherwise. A read that fails or finds nothing changes nothing: the
// person's word stands, and reconciliation reports any difference.
//
// The read has a deadline of its own, a third of what is left of the
// attempt and at most providerReadTimeout, so that a provider that hangs
// never keeps the answer from being applied; and it is not asked again
// once the key has completed (a retried attempt after the answer landed).
func (a *Activities) providersRecord(ctx context.Context, t tools.Tool, key keys.Key, in ResolutionAnswer) json.RawMessage {
	if t.PairedRead == "" || len(in.Args) == 0 {
		return in.Result
	}
	claim := idempotency.Claim{Key: key, ArgsHash: in.ArgsHash}
	if info, found, err := a.Store.Peek(ctx, claim); err == nil && found && info.State == idempotency.StateCompleted {
		return in.Result // Resolve returns the stored result
	}
	budget := providerReadTimeout
	if deadline, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(deadline)/3)
	}
	rctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	found, record, err := a.pairedRead(rctx, t, tools.Call{Key: key, Args: in.Args, ArgsHash: in.ArgsHash, DB: a.Pool})
	switch {
	case err != nil:
		a.log(ctx).Warn("applied answer: the paired read failed; the answer's result is stored as given",
			callFields(key, zap.String("paired_read", t.PairedRead), zap.Error(err))...)
		return in.Result
	case !found:
		a.log(ctx).Warn("applied answer: the paired read does not find the effect; the answer's result is stored as given",
			callFields(key, zap.String("paired_read", t.PairedRead), zap.String("by", in.By))...)
		return in.Result
	}
	return record
}

// providerReadTimeout bounds the paired read of an applied answer.
const providerReadTimeout = 10 * time.Second

// ResolutionOverdue is a step still unresolved at its deadline.
type ResolutionOverdue struct {
	Tenant   string    `json:"tenant"`
	RunID    string    `json:"run_id"`
	Step     int64     `json:"step"`
	Tool     string    `json:"tool"`
	Key      string    `json:"key"`
	Deadline time.Time `json:"deadline"`
}

// AlertResolutionOverdue raises the alert of a step nobody resolved by its
// deadline: an error log line and oncerun_resolutions_overdue_total. The
// run keeps waiting; nothing is guessed.
func (a *Activities) AlertResolutionOverdue(ctx context.Context, in ResolutionOverdue) error {
	a.log(ctx).Error("step still needs resolution past its deadline: someone must find out whether its effect happened",
		zap.String("tenant", in.Tenant), zap.String("run_id", in.RunID), zap.Int64("step", in.Step),
		zap.String("tool", in.Tool), zap.String("key", in.Key), zap.Time("deadline", in.Deadline))
	a.Metrics.ResolutionOverdue(in.Tool)
	return nil
}
