package approvalstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"

	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/telemetry"
	"github.com/oncerun/oncerun/internal/untrusted"
)

// DecisionRequest is one decision request on a step, as it came.
type DecisionRequest struct {
	StepRequest
	// Decision is DecisionApprove, DecisionReject or DecisionEdit.
	// Anything else is recorded as an invalid request naming no decision.
	Decision string
	// ArgsHash is the hash of the arguments the approver reviewed: the
	// decision applies to those arguments only.
	ArgsHash string
	// EditedArgs are, for an edit, the arguments to run instead, as sent.
	// CheckEdit turns them into canonical JSON and EditedArgsHash.
	EditedArgs     json.RawMessage
	EditedArgsHash string
	// CheckEdit checks an edit against the step's tool, given the tool's
	// name and the proposed arguments the step's row holds, and returns
	// the edited arguments in canonical JSON and their hash, or why the
	// edit is refused (naming the field). An edit without it is refused.
	CheckEdit func(tool string, proposed, edited json.RawMessage) (json.RawMessage, string, error)
	Comment   string
	// Now is what the step's deadline is compared with. Default: the
	// current time.
	Now time.Time
}

// Decided is what became of a decision request that was not refused.
type Decided struct {
	// Decision is the decision of record: this request's when it was
	// accepted, the first one's when Repeated.
	Decision DecisionRecord
	// Repeated is true when the request repeated the decision of record.
	Repeated bool
	// Deliver is true when the run has yet to hear of the decision: it was
	// accepted now, or repeated while the step is still pending (the first
	// request may have been recorded without reaching the run). The caller
	// signals the run then; a repeated signal is harmless.
	Deliver bool
}

// Decide checks and records a decision request on a step, in this order:
//
//  1. a run id no key can hold, or a step the tenant does not have:
//     [ErrNotFound], and no row, so that nobody can fill the audit table
//     with made-up steps;
//  2. a requester who may not decide: [ErrForbidden], recorded;
//  3. r.Invalid or a decision that is neither approve, reject nor edit:
//     [ErrInvalid], recorded;
//  4. under the step's row lock (FOR UPDATE: two approvers at once are
//     serialised), the decision itself: a step whose run was cancelled,
//     which withdrew its approval, is [ErrWithdrawn], whatever was decided
//     before; the same decision of record again
//     for the same arguments is Repeated; another decision is
//     [ErrConflict]; a decision of record the run recorded otherwise is
//     [ErrResolvedOtherwise]; a step that is not pending, or whose deadline
//     has passed, is [ErrNotPending]; another args hash than the step's is
//     [ErrArgsHashMismatch]; an edit whose arguments the step's tool
//     refuses (r.CheckEdit: its schema and edit rule) is [ErrEditInvalid];
//     otherwise the decision is accepted and becomes the decision of
//     record.
//
// Every request on a step of the tenant leaves exactly one row in
// approval_decisions, whatever became of it; the row commits before Decide
// returns. Decide never signals the run: see Decided.Deliver.
func Decide(ctx context.Context, db DB, r DecisionRequest) (Decided, error) {
	if _, err := keys.New(r.Tenant, r.RunID, r.Step, "tool"); err != nil {
		// No run of the tenant can have this id.
		return Decided{}, notFound(untrusted.Cut(r.RunID, keys.MaxRunIDLen), r.Step)
	}
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	d, err := decide(ctx, db, r)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		// Another decision of record won a race the row lock should have
		// prevented: answer as if this request came second.
		d, err = decide(ctx, db, r)
	}
	return d, err
}

func notFound(runID string, step int64) error {
	return refused(ErrNotFound, fmt.Sprintf("run %q has no step %d waiting for approval", runID, step))
}

// lockStepSQL reads a step's row for a decision; lockStepForUpdateSQL also
// locks it until the decision's transaction ends.
const (
	lockStepSQL = `SELECT state, args_hash, deadline, tool, args, coalesce(decided_by, ''), decided_at, comment, kind, round,
    traceparent
FROM approvals WHERE tenant = $1 AND run_id = $2 AND step = $3`
	lockStepForUpdateSQL = lockStepSQL + ` FOR UPDATE`
)

// decisionOfRecordSQL reads a step's decision of record by its unique
// index.
const decisionOfRecordSQL = `SELECT ` + decisionColumns + ` FROM approval_decisions
WHERE tenant = $1 AND run_id = $2 AND step = $3 AND round = $4 AND outcome = 'accepted'`

// insertDecisionSQL records a decision request.
const insertDecisionSQL = `
INSERT INTO approval_decisions (tenant, run_id, step, decision, outcome, args_hash, approver, role, comment, remote_addr, user_agent, via, detail,
    edited_args, edited_args_hash, round, exception)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)`

func decide(ctx context.Context, db DB, r DecisionRequest) (Decided, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return Decided{}, fmt.Errorf("decide: %w", err)
	}
	defer rollback(ctx, tx)

	// A decision locks the step, so that two approvers are serialised; a
	// request refused whatever the step's state does not.
	lock := lockStepSQL
	if r.May {
		lock = lockStepForUpdateSQL
	}
	var (
		state, argsHash, tool string
		deadline              time.Time
		proposed              json.RawMessage
		// Who decided or withdrew the step, when and why, as the row has it.
		decidedBy, comment string
		decidedAt          *time.Time
		kind               string
		round              int
		traceparent        string
	)
	err = tx.QueryRow(ctx, lock, r.Tenant, r.RunID, r.Step).Scan(&state, &argsHash, &deadline, &tool, &proposed,
		&decidedBy, &decidedAt, &comment, &kind, &round, &traceparent)
	if errors.Is(err, pgx.ErrNoRows) {
		return Decided{}, notFound(r.RunID, r.Step)
	}
	if err != nil {
		return Decided{}, fmt.Errorf("decide: read step %d of run %s: %w", r.Step, r.RunID, err)
	}
	// The request is a trace of its own (a person's click); it links to
	// the run's, where the run asked.
	telemetry.Link(ctx, traceparent, attribute.String("oncerun.link", "approval_request"))
	a := audit{tx: tx, r: r, round: round, exception: kind == KindLimit && r.Decision == DecisionApprove}
	if !r.May {
		return Decided{}, a.refuse(ctx, OutcomeForbidden, "the role "+r.Role+" may not decide",
			refused(ErrForbidden, fmt.Sprintf("%s is a %s, which may not decide", r.By, r.Role)))
	}
	if bad := r.invalid(); bad != nil {
		return Decided{}, a.refuse(ctx, OutcomeInvalid, bad.Error(), &RefusedError{Err: ErrInvalid, Message: bad.Error(), Cause: bad})
	}

	// checkEdit checks an edit against the step's own tool and proposed
	// arguments, and puts the canonical arguments and their hash in the
	// request; it comes after every check that does not need it, so that a
	// stale hash or a step no longer pending answers as for any decision.
	checkEdit := func() error {
		if r.CheckEdit == nil {
			why := "edits cannot be checked here: this service has no tool registry"
			return a.refuse(ctx, OutcomeInvalid, why, refused(ErrInvalid, why))
		}
		args, hash, err := r.CheckEdit(tool, proposed, r.EditedArgs)
		if err != nil {
			return a.refuse(ctx, OutcomeInvalid, err.Error(), &RefusedError{Err: ErrEditInvalid, Message: err.Error(), Cause: err})
		}
		a.r.EditedArgs, a.r.EditedArgsHash = args, hash
		r = a.r
		return nil
	}

	if state == StateCancelled {
		// The run was cancelled: whatever was decided before, the step
		// will not run.
		return Decided{}, a.refuse(ctx, OutcomeNotPending, "the approval was withdrawn: the run was cancelled",
			refused(ErrWithdrawn, withdrawnMessage(r.RunID, r.Step, decidedBy, decidedAt, comment)))
	}
	if max(r.Round, 1) != max(round, 1) {
		why := fmt.Sprintf("the decision is for round %d but the step is in round %d", max(r.Round, 1), max(round, 1))
		msg := fmt.Sprintf("step %d of run %s is in round %d of its approval, not round %d", r.Step, r.RunID, max(round, 1), max(r.Round, 1))
		if kind == KindLimit {
			msg += ": it now waits at a spend limit; look at it again and send the round the approvals list shows"
		}
		return Decided{}, a.refuse(ctx, OutcomeNotPending, why, refused(ErrRoundChanged, msg))
	}
	orig, err := decisionOfRecord(ctx, tx, r.Tenant, r.RunID, r.Step, round)
	if err != nil {
		return Decided{}, err
	}
	if orig != nil && state != StatePending && state != stateOf(orig.Decision) {
		// The run recorded another outcome than the decision of record (its
		// deadline came first): neither repeating nor changing the decision
		// can be answered as if it had been applied.
		return Decided{}, a.refuse(ctx, OutcomeNotPending, "the run recorded the step as "+state, refused(ErrResolvedOtherwise,
			fmt.Sprintf("step %d of run %s was %s by %s at %s, but the run recorded it as %s; it is listed under needs_resolution",
				r.Step, r.RunID, pastTense(orig.Decision), orig.Approver, stamp(orig.DecidedAt), state)))
	}
	if orig != nil {
		if orig.Decision == DecisionEdit && r.Decision == DecisionEdit {
			// A repeat of an edit names the same arguments, compared
			// canonically.
			if err := checkEdit(); err != nil {
				return Decided{}, err
			}
		}
		if orig.Decision == DecisionEdit && r.Decision == DecisionEdit && orig.EditedArgsHash != r.EditedArgsHash {
			return Decided{}, a.refuse(ctx, OutcomeConflict, "the step was already edited to other arguments", refused(ErrConflict,
				fmt.Sprintf("step %d of run %s was already edited by %s at %s to arguments with hash %s; a decision cannot be changed",
					r.Step, r.RunID, orig.Approver, stamp(orig.DecidedAt), orig.EditedArgsHash)))
		}
		if orig.Decision != r.Decision {
			return Decided{}, a.refuse(ctx, OutcomeConflict, "the step was already "+pastTense(orig.Decision), refused(ErrConflict,
				fmt.Sprintf("step %d of run %s was already %s by %s at %s; a decision cannot be changed",
					r.Step, r.RunID, pastTense(orig.Decision), orig.Approver, stamp(orig.DecidedAt))))
		}
		if r.ArgsHash != argsHash {
			// The same decision, for arguments other than the step's: not a
			// repeat of the decision of record.
			return Decided{}, a.argsMismatch(ctx, "the step's", argsHash)
		}
		if err := a.commit(ctx, OutcomeRepeated, ""); err != nil {
			return Decided{}, err
		}
		return Decided{Decision: *orig, Repeated: true, Deliver: state == StatePending}, nil
	}
	if state != StatePending {
		return Decided{}, a.refuse(ctx, OutcomeNotPending, "the step is "+state, refused(ErrNotPending,
			fmt.Sprintf("step %d of run %s is not pending: it is %s", r.Step, r.RunID, state)))
	}
	if !r.Now.Before(deadline) {
		return Decided{}, a.refuse(ctx, OutcomeNotPending, "the deadline has passed", refused(ErrNotPending,
			fmt.Sprintf("step %d of run %s is not pending: its deadline %s has passed", r.Step, r.RunID, stamp(deadline))))
	}
	if r.ArgsHash != argsHash {
		return Decided{}, a.argsMismatch(ctx, "the pending step's", argsHash)
	}
	if r.Decision == DecisionEdit {
		if err := checkEdit(); err != nil {
			return Decided{}, err
		}
	}
	rows, err := tx.Query(ctx, insertDecisionSQL+" RETURNING "+decisionColumns, a.args(OutcomeAccepted, "")...)
	if err != nil {
		return Decided{}, fmt.Errorf("decide: record the decision on step %d of run %s: %w", r.Step, r.RunID, err)
	}
	rec, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[DecisionRecord])
	if err != nil {
		return Decided{}, fmt.Errorf("decide: record the decision on step %d of run %s: %w", r.Step, r.RunID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Decided{}, fmt.Errorf("decide: record the decision on step %d of run %s: %w", r.Step, r.RunID, err)
	}
	return Decided{Decision: rec, Deliver: true}, nil
}

// withdrawnMessage says that a step's approval was withdrawn when its run
// was cancelled, by whom, when and why, as far as the row knows.
func withdrawnMessage(runID string, step int64, by string, at *time.Time, reason string) string {
	msg := fmt.Sprintf("step %d of run %s is not pending: its approval was withdrawn because the run was cancelled", step, runID)
	if by != "" {
		msg += " by " + by
	}
	if at != nil {
		msg += " at " + stamp(*at)
	}
	if reason != "" {
		msg += " (" + reason + ")"
	}
	return msg + "; a decision can no longer be recorded"
}

// invalid is what keeps the request from being decided on its values:
// what the caller found, or a decision the table cannot hold.
func (r DecisionRequest) invalid() error {
	if r.Invalid != nil {
		return r.Invalid
	}
	switch r.Decision {
	case DecisionApprove, DecisionReject:
	case DecisionEdit:
		if len(r.EditedArgs) == 0 {
			return errors.New("an edit needs the edited arguments (args)")
		}
	default:
		return fmt.Errorf("decision %q is not approve, reject or edit", untrusted.Cut(r.Decision, 64))
	}
	return nil
}

// decisionOfRecord returns the step's accepted decision, or nil.
func decisionOfRecord(ctx context.Context, db DB, tenant, runID string, step int64, round int) (*DecisionRecord, error) {
	rows, err := db.Query(ctx, decisionOfRecordSQL, tenant, runID, step, round)
	if err != nil {
		return nil, fmt.Errorf("decide: read the decision on step %d of run %s: %w", step, runID, err)
	}
	d, err := pgx.CollectOneRow(rows, pgx.RowToAddrOfStructByName[DecisionRecord])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("decide: read the decision on step %d of run %s: %w", step, runID, err)
	}
	return d, nil
}

// audit records a decision request that is refused or repeated.
type audit struct {
	tx pgx.Tx
	r  DecisionRequest
	// round is the step's wait the request is for; exception is set on an
	// approve of a wait at a spend limit.
	round     int
	exception bool
}

// args are the values of the request's row. What the client sent is
// recorded as it was when it is valid text, and escaped and cut (see
// untrusted.Clean) when it is not, so that no request can fail to leave its row.
// A decision that is neither approve, reject nor edit is recorded as ""
// with the request invalid (a forbidden one too, its detail saying it was
// forbidden).
func (a audit) args(outcome, detail string) []any {
	r := a.r
	decision := r.Decision
	if decision != DecisionApprove && decision != DecisionReject && decision != DecisionEdit {
		// The table holds a row that names no decision only as invalid: a
		// forbidden one says so in its detail, as for answers.
		decision = ""
		if outcome != OutcomeInvalid {
			detail = strings.TrimSuffix(outcome+": "+detail, ": ")
			outcome = OutcomeInvalid
		}
	}
	// What an edit asked to run is kept when it is JSON the table can hold
	// (an invalid request's may not be).
	var edited json.RawMessage
	if decision == DecisionEdit && untrusted.Value("args", r.EditedArgs, keys.MaxArgsSize) == nil {
		edited = r.EditedArgs
	}
	return []any{r.Tenant, r.RunID, r.Step, decision, outcome, untrusted.Clean(r.ArgsHash, maxAuditArgsHash),
		untrusted.Clean(r.By, MaxNameBytes), untrusted.Clean(r.Role, MaxNameBytes), auditText("comment", r.Comment, MaxCommentBytes),
		untrusted.Clean(r.RemoteAddr, maxAuditRemoteAddr), untrusted.Clean(r.UserAgent, maxAuditUserAgent), r.Via,
		untrusted.Clean(detail, maxAuditDetail), edited, untrusted.Clean(r.EditedArgsHash, maxAuditArgsHash), max(a.round, 1),
		a.exception && outcome == OutcomeAccepted}
}

// commit records the request with outcome and commits.
func (a audit) commit(ctx context.Context, outcome, detail string) error {
	if _, err := a.tx.Exec(ctx, insertDecisionSQL, a.args(outcome, detail)...); err != nil {
		return fmt.Errorf("decide: audit the %s decision on step %d of run %s: %w", outcome, a.r.Step, a.r.RunID, err)
	}
	if err := a.tx.Commit(ctx); err != nil {
		return fmt.Errorf("decide: audit the %s decision on step %d of run %s: %w", outcome, a.r.Step, a.r.RunID, err)
	}
	return nil
}

// refuse records the request with outcome and returns why it was refused.
func (a audit) refuse(ctx context.Context, outcome, detail string, why *RefusedError) error {
	if err := a.commit(ctx, outcome, detail); err != nil {
		return err
	}
	return why
}

// argsMismatch records and refuses a decision given for arguments other
// than the step's (whose: "the step's" or "the pending step's").
func (a audit) argsMismatch(ctx context.Context, whose, stepHash string) error {
	return a.refuse(ctx, OutcomeArgsMismatch, "the step's args_hash is "+stepHash, refused(ErrArgsHashMismatch,
		fmt.Sprintf("the args_hash you reviewed, %s, is not %s %s: review the step's arguments again", a.r.ArgsHash, whose, stepHash)))
}

// stateOf is the approvals-table state a decision leads to.
func stateOf(decision string) string {
	if decision == DecisionReject {
		return StateRejected
	}
	return StateApproved
}

// pastTense says what a decision did to a step, in words.
func pastTense(decision string) string {
	switch decision {
	case DecisionApprove:
		return StateApproved
	case DecisionEdit:
		return "approved with edits"
	}
	return StateRejected
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// rollback ends tx if it is still open, also when ctx has ended.
func rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = tx.Rollback(rctx)
}
