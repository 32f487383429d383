package approvalstore

import (
	"context"
	"fmt"

	"github.com/oncerun/oncerun/internal/untrusted"
)

// recordPendingSQL writes a step's pending row, or finds the one written:
// it returns the row's args hash and round either way. A later round of a
// step ($14 above the row's round) reopens the row its earlier round
// approved: pending again, with the new reason, kind, arguments and
// deadline; the earlier round's decisions stay in approval_decisions.
const recordPendingSQL = `
WITH ins AS (
    INSERT INTO approvals AS a (tenant, run_id, step, tool, args, args_hash, goal, reason, requested_at, deadline, requested_by,
        on_expiry, kind, round, traceparent, lineage, parent_goal)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, coalesce(nullif($12, ''), 'expire'), coalesce(nullif($13, ''), 'rule'), $14, $15,
        $16, $17)
    ON CONFLICT (tenant, run_id, step) DO UPDATE SET
        args = EXCLUDED.args, args_hash = EXCLUDED.args_hash, reason = EXCLUDED.reason, kind = EXCLUDED.kind,
        round = EXCLUDED.round, traceparent = EXCLUDED.traceparent, state = 'pending', requested_at = EXCLUDED.requested_at, deadline = EXCLUDED.deadline,
        decided_by = NULL, decided_at = NULL, comment = '', edited_args = NULL, edited_args_hash = NULL,
        decision_mismatch = false
    WHERE a.round < EXCLUDED.round AND a.state = 'approved'
    RETURNING args_hash, round)
SELECT args_hash, round FROM ins
UNION ALL
SELECT args_hash, round FROM approvals WHERE tenant = $1 AND run_id = $2 AND step = $3
LIMIT 1`

// RecordPending writes the pending row of a step that waits for approval
// (a's identity, tool, arguments, goal, reason, requester, request time and
// deadline; its state is pending). A repeat finds the row written and
// changes nothing. A row of the same step with other arguments belongs to
// an earlier run under the same run id: [ErrOtherArguments].
//
// a.Round above 1 (with a.Kind) is a later wait of a step whose row an
// earlier round approved: the row is reopened. A row that is not at that
// round afterwards (its earlier round was not approved) is
// [ErrOtherArguments] too: the step cannot wait again there.
func RecordPending(ctx context.Context, db DB, a Request) error {
	var (
		stored string
		round  int
	)
	a.Round = max(a.Round, 1)
	err := db.QueryRow(ctx, recordPendingSQL, a.Tenant, a.RunID, a.Step, a.Tool, a.Args, a.ArgsHash, storable(a.Goal),
		storable(a.Reason), a.RequestedAt, a.Deadline, storable(a.RequestedBy), a.OnExpiry, a.Kind, a.Round,
		untrusted.Cut(a.Traceparent, 256), lineage(a.Lineage), storable(a.ParentGoal)).Scan(&stored, &round)
	if err != nil {
		return fmt.Errorf("record pending approval of run %s step %d: %w", a.RunID, a.Step, err)
	}
	if round != a.Round {
		return refused(ErrOtherArguments, fmt.Sprintf("run %s step %d has its approval at round %d, not %d: it cannot wait again",
			a.RunID, a.Step, round, a.Round))
	}
	if stored != a.ArgsHash {
		return refused(ErrOtherArguments, fmt.Sprintf("run %s step %d already has an approval for args hash %s, not %s: the run id was used before",
			a.RunID, a.Step, stored, a.ArgsHash))
	}
	return nil
}

// recordOutcomeSQL records what became of a pending step; decision_mismatch
// says whether it differs from the decision of record.
const recordOutcomeSQL = `
UPDATE approvals SET state = $4, decided_by = nullif($5, ''), decided_at = $6, comment = $7,
    edited_args = $8, edited_args_hash = nullif($9, ''),
    decision_mismatch = $4 <> 'cancelled' AND EXISTS (
        SELECT 1 FROM approval_decisions d
        WHERE d.tenant = $1 AND d.run_id = $2 AND d.step = $3 AND d.round = approvals.round AND d.outcome = 'accepted'
          AND (d.decision <> CASE WHEN $4 = 'approved' AND $9 <> '' THEN 'edit'
                                  WHEN $4 = 'approved' THEN 'approve' WHEN $4 = 'rejected' THEN 'reject' ELSE '' END
               OR (d.decision = 'edit' AND d.edited_args_hash <> $9)))
WHERE tenant = $1 AND run_id = $2 AND step = $3 AND state = 'pending' AND round = $10`

// RecordOutcome records what the run made of a pending step: a's State
// (approved, rejected, expired, or cancelled when a cancel of the run
// withdrew the request), DecidedBy, DecidedAt and Comment, and, for an
// edit it applied, EditedArgs and EditedArgsHash. It reports whether the
// row was pending; a decided row, or one [WithdrawRun] withdrew first, is
// left as it was. An outcome other than the decision of record (the
// deadline came first) marks the row DecisionMismatch, for the
// needs_resolution list; a withdrawal never does, as no person needs to
// look at a step of a cancelled run that never ran.
func RecordOutcome(ctx context.Context, db DB, a Approval) (bool, error) {
	tag, err := db.Exec(ctx, recordOutcomeSQL, a.Tenant, a.RunID, a.Step, a.State, storable(a.DecidedBy), a.DecidedAt,
		storable(a.Comment), a.EditedArgs, a.EditedArgsHash, max(a.Round, 1))
	if err != nil {
		return false, fmt.Errorf("record decision on run %s step %d: %w", a.RunID, a.Step, err)
	}
	return tag.RowsAffected() == 1, nil
}

const recordUnresolvedSQL = `
INSERT INTO resolutions (tenant, run_id, step, round, tool, key, args, args_hash, goal, first_sent_at, known, requested_at, deadline)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
ON CONFLICT (tenant, run_id, step, round) DO NOTHING`

// RecordUnresolved writes the pending row of a round of a step whose
// outcome is unknown (r's identity, round, tool, key, arguments, goal, what
// is known, request time and deadline). A repeat finds the row written and
// changes nothing.
func RecordUnresolved(ctx context.Context, db DB, r Resolution) error {
	_, err := db.Exec(ctx, recordUnresolvedSQL, r.Tenant, r.RunID, r.Step, r.Round, r.Tool, r.Key, r.Args, r.ArgsHash,
		storable(r.Goal), r.FirstSentAt, storable(r.Known), r.RequestedAt, r.Deadline)
	if err != nil {
		return fmt.Errorf("record that step %d of run %s needs resolution: %w", r.Step, r.RunID, err)
	}
	return nil
}

const recordResolvedSQL = `
UPDATE resolutions SET state = $5, resolved_by = $6, resolved_at = $7, result = $8, note = $9
WHERE tenant = $1 AND run_id = $2 AND step = $3 AND round = $4 AND state = 'pending'`

// RecordResolved records the answer the run applied to a pending round:
// r's State (applied or not_applied), ResolvedBy, ResolvedAt, Result and
// Note. A round no longer pending is left as it was.
func RecordResolved(ctx context.Context, db DB, r Resolution) error {
	_, err := db.Exec(ctx, recordResolvedSQL, r.Tenant, r.RunID, r.Step, r.Round, r.State, storable(r.ResolvedBy),
		r.ResolvedAt, r.Result, storable(r.Note))
	if err != nil {
		return fmt.Errorf("record the resolution of step %d of run %s: %w", r.Step, r.RunID, err)
	}
	return nil
}

// recordEditRefusedSQL takes an edit the run refused off the step's
// decision of record.
const recordEditRefusedSQL = `
UPDATE approval_decisions SET outcome = 'refused_by_run', detail = $5
WHERE tenant = $1 AND run_id = $2 AND step = $3 AND outcome = 'accepted' AND decision = 'edit' AND edited_args_hash = $4
  AND round = (SELECT a.round FROM approvals a WHERE a.tenant = $1 AND a.run_id = $2 AND a.step = $3)`

// RecordEditRefused records that the run refused the edit of record of a
// step (to arguments with hash editedHash), and why: the edit's row says
// OutcomeRefusedByRun and stops being the decision of record, so that the
// step, which the run keeps pending, is listed and can be decided again.
// It reports whether such an edit was the decision of record.
func RecordEditRefused(ctx context.Context, db DB, tenant, runID string, step int64, editedHash, why string) (bool, error) {
	tag, err := db.Exec(ctx, recordEditRefusedSQL, tenant, runID, step, editedHash, untrusted.Clean(why, maxAuditDetail))
	if err != nil {
		return false, fmt.Errorf("record that run %s refused the edit of step %d: %w", runID, step, err)
	}
	return tag.RowsAffected() == 1, nil
}

// lineage is a's lineage as the row stores it: [] for a run a person
// started.
func lineage(hops []Hop) []Hop {
	if hops == nil {
		return []Hop{}
	}
	return hops
}
