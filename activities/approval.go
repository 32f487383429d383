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
	"github.com/oncerun/oncerun/internal/telemetry"
	"github.com/oncerun/oncerun/tools"
)

// Approval row states, as the approvals table spells them.
const (
	ApprovalPending  = approvalstore.StatePending
	ApprovalApproved = approvalstore.StateApproved
	ApprovalRejected = approvalstore.StateRejected
	ApprovalExpired  = approvalstore.StateExpired
	// ApprovalCancelled: the run was cancelled and withdrew the request.
	ApprovalCancelled = approvalstore.StateCancelled
)

// ApprovalRequest records a step that waits for a human: the one model of
// a pending step, which its row keeps and `oncerun approvals` lists.
type ApprovalRequest = approvalstore.Request

// ApprovalRecorded is what recording a pending step tells the run: when
// to warn that its deadline comes near (the worker's
// Activities.DeadlineWarnings, recorded in the run's history with the
// request, so that a replay warns at the same points).
type ApprovalRecorded struct {
	WarnBefore []time.Duration `json:"warn_before,omitempty"`
}

// ApprovalResolution records what became of a pending step.
type ApprovalResolution struct {
	Tenant    string    `json:"tenant"`
	RunID     string    `json:"run_id"`
	Step      int64     `json:"step"`
	State     string    `json:"state"`
	DecidedBy string    `json:"decided_by,omitempty"`
	DecidedAt time.Time `json:"decided_at"`
	Comment   string    `json:"comment,omitempty"`
	// EditedArgs and EditedArgsHash are the arguments an approver's edit
	// put in place of the proposed ones.
	EditedArgs     json.RawMessage `json:"edited_args,omitempty"`
	EditedArgsHash string          `json:"edited_args_hash,omitempty"`
	// Round is the wait of the step decided (empty: the first).
	Round int `json:"round,omitempty"`
}

// RequestApproval writes the pending row of a step. A retried request finds
// the row written and changes nothing. A row of the same step with other
// arguments belongs to an earlier run under the same run id (one whose
// workflow Temporal no longer keeps); it is refused, without retries.
func (a *Activities) RequestApproval(ctx context.Context, in ApprovalRequest) (ApprovalRecorded, error) {
	in.Traceparent = telemetry.Traceparent(ctx)
	err := approvalstore.RecordPending(ctx, a.Pool, in)
	if errors.Is(err, approvalstore.ErrOtherArguments) {
		return ApprovalRecorded{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeKeyReuse, nil)
	}
	if err != nil {
		return ApprovalRecorded{}, dataError(err)
	}
	a.warnShortWindows(ctx, in)
	return ApprovalRecorded{WarnBefore: a.deadlineWarnings()}, nil
}

// warnShortWindows warns, at the moment a run pauses, about each of the
// run's keys that will expire before the approval deadline plus the retry
// horizon: if the run resumes after that, a replay of the step would find
// no key. The watchdog alerts again if it happens. A failure to check is
// logged, never a reason to fail the pause.
func (a *Activities) warnShortWindows(ctx context.Context, in ApprovalRequest) {
	horizon := in.Deadline.Add(tools.DefaultRetryHorizon)
	keys, err := idempotency.RunKeysExpiringBefore(ctx, a.Pool, in.Tenant, in.RunID, horizon)
	if err != nil {
		a.log(ctx).Warn("could not check the run's key windows", zap.String("run_id", in.RunID), zap.Error(err))
		return
	}
	for _, k := range keys {
		a.log(ctx).Warn("approval deadline outlives a key of the run: the key expires first",
			zap.String("tenant", in.Tenant), zap.String("run_id", in.RunID), zap.Int64("step", k.Step),
			zap.String("tool", k.Tool), zap.String("key", k.Key), zap.Time("key_expires_at", k.ExpiresAt),
			zap.Int64("pausing_step", in.Step), zap.Time("deadline", in.Deadline),
			zap.Duration("shortfall", horizon.Sub(k.ExpiresAt)))
	}
}

// ResolveApproval records a pending step's decision or expiry. A retried
// resolution finds the row decided and changes nothing; so does any other
// resolution of a decided row, which is logged. A resolution other than the
// decision of record the approvals service holds (the deadline came first)
// marks the row decision_mismatch, for the service's needs_resolution list.
func (a *Activities) ResolveApproval(ctx context.Context, in ApprovalResolution) error {
	pending, err := approvalstore.RecordOutcome(ctx, a.Pool, approvalstore.Approval{
		Request: approvalstore.Request{Tenant: in.Tenant, RunID: in.RunID, Step: in.Step, Round: in.Round},
		State:   in.State, DecidedBy: in.DecidedBy, DecidedAt: &in.DecidedAt, Comment: in.Comment,
		EditedArgs: in.EditedArgs, EditedArgsHash: in.EditedArgsHash,
	})
	if err != nil {
		return dataError(err)
	}
	// Once recorded: an attempt that failed says nothing of the wait.
	a.traceApproval(ctx, in)
	if !pending {
		a.log(ctx).Info("approval row not pending; resolution left it as it was",
			zap.String("tenant", in.Tenant), zap.String("run_id", in.RunID), zap.Int64("step", in.Step),
			zap.String("state", in.State))
	}
	return nil
}
