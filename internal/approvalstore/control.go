package approvalstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/untrusted"
)

// Actions of a run_controls row, as the table spells them: the operator's
// requests to a run.
const (
	ActionCancel  = "cancel"
	ActionPause   = "pause"
	ActionResume  = "resume"
	ActionMessage = "message"
)

// Outcomes of a run_controls row, as the table spells them.
const (
	// ControlAccepted: the run took the request and changed.
	ControlAccepted = "accepted"
	// ControlRepeated: the run was already as asked (cancelled, paused,
	// not paused, or it had accepted the message before); nothing changed.
	ControlRepeated = "repeated"
	// ControlRefused: the run cannot take the request in its state (it
	// has ended, it is cancelled, it is scripted).
	ControlRefused = "refused"
	// ControlInvalid: the request itself is malformed.
	ControlInvalid = "invalid"
	// ControlForbidden: the sender's role may not send it (a viewer's or
	// an approver's).
	ControlForbidden = "forbidden"
	// ControlUnavailable: the run could not be reached.
	ControlUnavailable = "unavailable"
)

// maxControlReason bounds the reason a run_controls row records: the
// clients' bound (workflows.MaxReasonBytes).
const maxControlReason = MaxCommentBytes

// maxControlMessageID bounds the message id a run_controls row records
// (workflows.MaxMessageIDBytes).
const maxControlMessageID = 128

// Control is a row of run_controls: one request to a run of the tenant,
// whatever became of it. A request naming a run the tenant does not have
// has no row (earlier releases wrote them as "not_found").
type Control struct {
	ID     int64  `db:"id"`
	Tenant string `db:"tenant"`
	RunID  string `db:"run_id"`
	// Action is ActionCancel, ActionPause, ActionResume or ActionMessage.
	Action string `db:"action"`
	// Actor names who asked: a token's name, or the CLI's user.
	Actor     string `db:"actor"`
	Reason    string `db:"reason"`
	MessageID string `db:"message_id"`
	// Outcome is ControlAccepted, ControlRepeated, ControlRefused,
	// ControlInvalid, ControlForbidden or ControlUnavailable.
	Outcome string `db:"outcome"`
	// Detail says why a request was refused, or what it changed.
	Detail string    `db:"detail"`
	At     time.Time `db:"at"`
}

const recordControlSQL = `
INSERT INTO run_controls (tenant, run_id, action, actor, reason, message_id, outcome, detail)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`

// RecordControl writes the audit row of a request to a run.
// What the request sent is recorded as it was when it is valid text within
// the clients' bounds, escaped and cut otherwise, so that no request fails
// to leave its row.
func RecordControl(ctx context.Context, db DB, c Control) error {
	_, err := db.Exec(ctx, recordControlSQL, untrusted.Clean(c.Tenant, keys.MaxTenantLen), untrusted.Clean(c.RunID, keys.MaxRunIDLen),
		c.Action, untrusted.Clean(c.Actor, MaxNameBytes), auditText("reason", c.Reason, maxControlReason),
		untrusted.Clean(c.MessageID, maxControlMessageID), c.Outcome, untrusted.Clean(c.Detail, maxAuditDetail))
	if err != nil {
		return fmt.Errorf("audit the %s of run %s: %w", c.Action, untrusted.Cut(c.RunID, keys.MaxRunIDLen), err)
	}
	return nil
}

const runControlsSQL = `SELECT id, tenant, run_id, action, actor, reason, message_id, outcome, detail, at
FROM run_controls WHERE tenant = $1 AND run_id = $2 ORDER BY at, id`

// RunControls returns the audit rows of the tenant's run, oldest first.
func RunControls(ctx context.Context, db DB, tenant, runID string) ([]Control, error) {
	rows, err := db.Query(ctx, runControlsSQL, tenant, runID)
	if err != nil {
		return nil, fmt.Errorf("read the controls of run %s: %w", runID, err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[Control])
	if err != nil {
		return nil, fmt.Errorf("read the controls of run %s: %w", runID, err)
	}
	return list, nil
}

// withdrawRunSQL withdraws the pending approvals of the steps named ($6)
// of a tenant's run.
const withdrawRunSQL = `
UPDATE approvals SET state = 'cancelled', decided_by = $3, decided_at = $4, comment = $5
WHERE tenant = $1 AND run_id = $2 AND state = 'pending' AND step = ANY($6)`

// WithdrawRun marks the pending approvals of the tenant's run that its
// cancel withdrew (steps, the steps the run recorded as cancelled) as
// cancelled: by who cancelled the run, at when, with the reason as the
// comment. A decision sent after is refused ([ErrWithdrawn]). Only the
// steps named are touched: a step the run approved before the cancel
// reached it may still show pending in the table until the run records it,
// and must not read as withdrawn. It returns how many rows it withdrew; a
// row withdrawn before, or recorded otherwise by the run, is left as it
// was.
func WithdrawRun(ctx context.Context, db DB, tenant, runID string, steps []int64, by string, at time.Time, reason string) (int64, error) {
	if len(steps) == 0 {
		return 0, nil
	}
	tag, err := db.Exec(ctx, withdrawRunSQL, tenant, runID, storable(by), at, storable(reason), steps)
	if err != nil {
		return 0, fmt.Errorf("withdraw the approvals of cancelled run %s: %w", runID, err)
	}
	return tag.RowsAffected(), nil
}

// listWithdrawnSQL: the tenant's approvals withdrawn by a cancel since $2,
// newest first, by the index of decided rows.
const listWithdrawnSQL = `SELECT ` + listedColumns + ` FROM approvals a ` + decisionJoin + `
WHERE a.tenant = $1 AND a.state = 'cancelled' AND a.decided_at >= $2
ORDER BY a.decided_at DESC, a.run_id, a.step LIMIT $3`

// ListWithdrawn lists the tenant's approvals withdrawn because their run
// was cancelled, since the time given, newest first, with their decisions
// of record (a decision the run had not applied when it was cancelled).
func ListWithdrawn(ctx context.Context, db DB, tenant string, since time.Time, limit int) ([]Listed, error) {
	return list(ctx, db, "withdrawn", listWithdrawnSQL, tenant, since, limit)
}
