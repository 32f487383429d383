package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/keys"
)

// Resolution row states, as the resolutions table spells them.
const (
	ResolutionPending    = "pending"
	ResolutionApplied    = "applied"
	ResolutionNotApplied = "not_applied"
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
	_, err := a.Pool.Exec(ctx, `
INSERT INTO resolutions (tenant, run_id, step, round, tool, key, args, args_hash, goal, first_sent_at, known, requested_at, deadline)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
ON CONFLICT (tenant, run_id, step, round) DO NOTHING`,
		in.Tenant, in.RunID, in.Step, in.Round, in.Tool, in.Key, in.Args, in.ArgsHash, storable(in.Goal),
		in.FirstSentAt, storable(in.Known), in.RequestedAt, in.Deadline)
	if err != nil {
		return dataError(fmt.Errorf("record that step %d of run %s needs resolution: %w", in.Step, in.RunID, err))
	}
	a.log().Warn("step needs resolution: its outcome is unknown", zap.String("tenant", in.Tenant), zap.String("run_id", in.RunID),
		zap.Int64("step", in.Step), zap.String("tool", in.Tool), zap.String("key", in.Key), zap.Int("round", in.Round),
		zap.String("known", in.Known), zap.Time("deadline", in.Deadline))
	return nil
}

// ResolutionAnswer is a person's answer, for the run to apply.
type ResolutionAnswer struct {
	Tenant   string          `json:"tenant"`
	RunID    string          `json:"run_id"`
	Step     int64           `json:"step"`
	Round    int             `json:"round"`
	Tool     string          `json:"tool"`
	ArgsHash string          `json:"args_hash"`
	Applied  bool            `json:"applied"`
	Result   json.RawMessage `json:"result,omitempty"`
	By       string          `json:"by"`
	Note     string          `json:"note,omitempty"`
	At       time.Time       `json:"at"`
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
	_, err = a.Pool.Exec(ctx, `
UPDATE resolutions SET state = $5, resolved_by = $6, resolved_at = $7, result = $8, note = $9
WHERE tenant = $1 AND run_id = $2 AND step = $3 AND round = $4 AND state = 'pending'`,
		in.Tenant, in.RunID, in.Step, in.Round, state, storable(in.By), in.At, out.Result, storable(in.Note))
	if err != nil {
		return ApplyResolutionOutput{}, dataError(fmt.Errorf("record the resolution of step %d of run %s: %w", in.Step, in.RunID, err))
	}
	a.log().Info("resolution applied", callFields(key, zap.String("outcome", state), zap.String("by", in.By), zap.Int("round", in.Round))...)
	return ApplyResolutionOutput{Result: out.Result, Replayed: out.Replayed}, nil
}

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
	a.log().Error("step still needs resolution past its deadline: someone must find out whether its effect happened",
		zap.String("tenant", in.Tenant), zap.String("run_id", in.RunID), zap.Int64("step", in.Step),
		zap.String("tool", in.Tool), zap.String("key", in.Key), zap.Time("deadline", in.Deadline))
	a.Metrics.ResolutionOverdue(in.Tool)
	return nil
}
