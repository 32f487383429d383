package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/edge"
	"github.com/oncerun/oncerun/tools"
)

// Approval row states, as the approvals table spells them.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalRejected = "rejected"
	ApprovalExpired  = "expired"
)

// ApprovalRequest records a step that waits for a human.
type ApprovalRequest struct {
	Tenant   string          `json:"tenant"`
	RunID    string          `json:"run_id"`
	Step     int64           `json:"step"`
	Tool     string          `json:"tool"`
	Args     json.RawMessage `json:"args"`
	ArgsHash string          `json:"args_hash"`
	Goal     string          `json:"goal"`
	Reason   string          `json:"reason"`
	// RequestedBy names who started the run.
	RequestedBy string    `json:"requested_by,omitempty"`
	RequestedAt time.Time `json:"requested_at"`
	Deadline    time.Time `json:"deadline"`
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
}

// RequestApproval writes the pending row of a step. A retried request finds
// the row written and changes nothing. A row of the same step with other
// arguments belongs to an earlier run under the same run id (one whose
// workflow Temporal no longer keeps); it is refused, without retries.
func (a *Activities) RequestApproval(ctx context.Context, in ApprovalRequest) error {
	var stored string
	err := a.Pool.QueryRow(ctx, `
WITH ins AS (
    INSERT INTO approvals (tenant, run_id, step, tool, args, args_hash, goal, reason, requested_at, deadline, requested_by)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
    ON CONFLICT (tenant, run_id, step) DO NOTHING
    RETURNING args_hash)
SELECT args_hash FROM ins
UNION ALL
SELECT args_hash FROM approvals WHERE tenant = $1 AND run_id = $2 AND step = $3
LIMIT 1`,
		in.Tenant, in.RunID, in.Step, in.Tool, in.Args, in.ArgsHash, storable(in.Goal), storable(in.Reason), in.RequestedAt, in.Deadline,
		storable(in.RequestedBy)).Scan(&stored)
	if err != nil {
		return dataError(fmt.Errorf("record pending approval of run %s step %d: %w", in.RunID, in.Step, err))
	}
	if stored != in.ArgsHash {
		msg := fmt.Sprintf("run %s step %d already has an approval for args hash %s, not %s: the run id was used before",
			in.RunID, in.Step, stored, in.ArgsHash)
		return temporal.NewNonRetryableApplicationError(msg, ErrTypeKeyReuse, nil)
	}
	a.warnShortWindows(ctx, in)
	return nil
}

// warnShortWindows warns, at the moment a run pauses, about each of the
// run's keys that will expire before the approval deadline plus the retry
// horizon: if the run resumes after that, a replay of the step would find
// no key. The watchdog alerts again if it happens. A failure to check is
// logged, never a reason to fail the pause.
func (a *Activities) warnShortWindows(ctx context.Context, in ApprovalRequest) {
	horizon := in.Deadline.Add(tools.DefaultRetryHorizon)
	rows, err := a.Pool.Query(ctx, `
SELECT key, step, tool, expires_at FROM idempotency_keys
WHERE run_id = $1 AND tenant = $2 AND expires_at < $3
ORDER BY step`, in.RunID, in.Tenant, horizon)
	if err != nil {
		a.log().Warn("could not check the run's key windows", zap.String("run_id", in.RunID), zap.Error(err))
		return
	}
	type short struct {
		Key       string    `db:"key"`
		Step      int64     `db:"step"`
		Tool      string    `db:"tool"`
		ExpiresAt time.Time `db:"expires_at"`
	}
	keys, err := pgx.CollectRows(rows, pgx.RowToStructByName[short])
	if err != nil {
		a.log().Warn("could not check the run's key windows", zap.String("run_id", in.RunID), zap.Error(err))
		return
	}
	for _, k := range keys {
		a.log().Warn("approval deadline outlives a key of the run: the key expires first",
			zap.String("tenant", in.Tenant), zap.String("run_id", in.RunID), zap.Int64("step", k.Step),
			zap.String("tool", k.Tool), zap.String("key", k.Key), zap.Time("key_expires_at", k.ExpiresAt),
			zap.Int64("pausing_step", in.Step), zap.Time("deadline", in.Deadline),
			zap.Duration("shortfall", horizon.Sub(k.ExpiresAt)))
	}
}

// storable is text of a run's (a goal, an approver's name, a comment) as
// the approvals table can hold it: as it is when it is text, escaped
// otherwise (a NUL becomes \u0000). Clients check such text where it
// enters; a run started or decided around them, or by an earlier release,
// must still be listed rather than fail.
func storable(s string) string {
	if edge.Text("text", s, len(s)) == nil {
		return s
	}
	return edge.Escape(s)
}

// ResolveApproval records a pending step's decision or expiry. A retried
// resolution finds the row decided and changes nothing; so does any other
// resolution of a decided row, which is logged. A resolution other than the
// decision of record the approvals service holds (the deadline came first)
// marks the row decision_mismatch, for the service's needs_resolution list.
func (a *Activities) ResolveApproval(ctx context.Context, in ApprovalResolution) error {
	tag, err := a.Pool.Exec(ctx, `
UPDATE approvals SET state = $4, decided_by = nullif($5, ''), decided_at = $6, comment = $7,
    decision_mismatch = EXISTS (
        SELECT 1 FROM approval_decisions d
        WHERE d.tenant = $1 AND d.run_id = $2 AND d.step = $3 AND d.outcome = 'accepted'
          AND d.decision <> CASE $4 WHEN 'approved' THEN 'approve' WHEN 'rejected' THEN 'reject' ELSE '' END)
WHERE tenant = $1 AND run_id = $2 AND step = $3 AND state = 'pending'`,
		in.Tenant, in.RunID, in.Step, in.State, storable(in.DecidedBy), in.DecidedAt, storable(in.Comment))
	if err != nil {
		return dataError(fmt.Errorf("record decision on run %s step %d: %w", in.RunID, in.Step, err))
	}
	if tag.RowsAffected() == 0 {
		a.log().Info("approval row not pending; resolution left it as it was",
			zap.String("tenant", in.Tenant), zap.String("run_id", in.RunID), zap.Int64("step", in.Step),
			zap.String("state", in.State))
	}
	return nil
}
