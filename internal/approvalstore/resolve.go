package approvalstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/untrusted"
)

// ResolveRequest is one answer about a step whose outcome is unknown, as it
// came.
type ResolveRequest struct {
	StepRequest
	// Outcome is ResolutionApplied or ResolutionNotApplied. Anything else
	// is recorded as an invalid request naming no outcome.
	Outcome string
	// Result is the effect's result, with ResolutionApplied only.
	Result json.RawMessage
	Note   string
}

// Resolved is what became of an answer that was not refused.
type Resolved struct {
	// Decision is the answer of record: this request's when it was
	// accepted, the first one's when Repeated.
	Decision ResolutionRecord
	// Repeated is true when the request repeated the answer of record.
	Repeated bool
	// Deliver is true when the run has yet to hear of the answer: it was
	// accepted now, or repeated while the round is still pending. The
	// caller signals the run then.
	Deliver bool
}

// Resolve checks and records an answer about a step whose outcome is
// unknown, as [Decide] does for decisions, in this order: a run id no key
// can hold or a step with no resolutions row is [ErrNotFound] and leaves no
// row; a requester who may not answer is [ErrForbidden]; r.Invalid is
// [ErrInvalid]; a round the step does not have, or one the run has
// recorded with no answer of record, is [ErrNotPending]; then, under the
// round's row lock, another outcome or another result (compared as JSON
// values) than the answer of record is [ErrConflict], an answer of record
// the run recorded otherwise is [ErrResolvedOtherwise], the same answer
// again (the note may differ) is Repeated, and a new answer on a pending
// round is accepted. Every request on a step that has needed resolution
// leaves exactly one row in resolution_decisions.
func Resolve(ctx context.Context, db DB, r ResolveRequest) (Resolved, error) {
	if _, err := keys.New(r.Tenant, r.RunID, r.Step, "tool"); err != nil {
		// No run of the tenant can have this id.
		return Resolved{}, noResolution(untrusted.Cut(r.RunID, keys.MaxRunIDLen), r.Step)
	}
	res, err := resolve(ctx, db, r)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		// Another answer of record won a race the row lock should have
		// prevented: answer as if this request came second.
		res, err = resolve(ctx, db, r)
	}
	return res, err
}

func noResolution(runID string, step int64) error {
	return refused(ErrNotFound, fmt.Sprintf("run %q has no step %d whose outcome waits to be resolved", runID, step))
}

// lockRoundSQL reads a round of a step ($4), or its latest round ($4 = 0),
// for an answer; lockRoundForUpdateSQL also locks it.
const (
	lockRoundSQL = `SELECT round, state FROM resolutions
WHERE tenant = $1 AND run_id = $2 AND step = $3 AND ($4::integer = 0 OR round = $4::integer)
ORDER BY round DESC LIMIT 1`
	lockRoundForUpdateSQL = lockRoundSQL + ` FOR UPDATE`
	hasRoundsSQL          = `SELECT EXISTS (SELECT 1 FROM resolutions WHERE tenant = $1 AND run_id = $2 AND step = $3)`
)

// resolutionDecisionColumns are the columns of a ResolutionRecord.
const resolutionDecisionColumns = `id, tenant, run_id, step, round, decision, outcome, result, resolver, role, note,
    remote_addr, user_agent, via, detail, decided_at`

// answerOfRecordSQL reads a round's answer of record by its unique index.
const answerOfRecordSQL = `SELECT ` + resolutionDecisionColumns + ` FROM resolution_decisions
WHERE tenant = $1 AND run_id = $2 AND step = $3 AND round = $4 AND outcome = 'accepted'`

// insertResolutionDecisionSQL records an answer.
const insertResolutionDecisionSQL = `
INSERT INTO resolution_decisions (tenant, run_id, step, round, decision, outcome, result, resolver, role, note,
                                  remote_addr, user_agent, via, detail)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`

func resolve(ctx context.Context, db DB, r ResolveRequest) (Resolved, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return Resolved{}, fmt.Errorf("resolve: %w", err)
	}
	defer rollback(ctx, tx)

	// An answer locks the round, so that two people are serialised; a
	// refused request does not.
	lock := lockRoundSQL
	if r.May {
		lock = lockRoundForUpdateSQL
	}
	want := max(r.Round, 0)
	if r.Round > MaxRound {
		// No round can be this one; the latest names the row the refusal
		// is recorded under (invalid below), or shows there is none.
		want = 0
	}
	var (
		round int
		state string
		found = true
	)
	err = tx.QueryRow(ctx, lock, r.Tenant, r.RunID, r.Step, want).Scan(&round, &state)
	if errors.Is(err, pgx.ErrNoRows) {
		if want == 0 {
			return Resolved{}, noResolution(r.RunID, r.Step)
		}
		// A round the step does not have: recorded if the step has others.
		var exists bool
		if err := tx.QueryRow(ctx, hasRoundsSQL, r.Tenant, r.RunID, r.Step).Scan(&exists); err != nil {
			return Resolved{}, fmt.Errorf("resolve: read step %d of run %s: %w", r.Step, r.RunID, err)
		}
		if !exists {
			return Resolved{}, noResolution(r.RunID, r.Step)
		}
		found, round = false, want
	} else if err != nil {
		return Resolved{}, fmt.Errorf("resolve: read step %d of run %s: %w", r.Step, r.RunID, err)
	}
	a := resolveAudit{tx: tx, r: r, round: round}
	if !r.May {
		return Resolved{}, a.refuse(ctx, OutcomeForbidden, "the role "+r.Role+" may not resolve",
			refused(ErrForbidden, fmt.Sprintf("%s is a %s, which may not resolve", r.By, r.Role)))
	}
	if bad := r.invalid(); bad != nil {
		return Resolved{}, a.refuse(ctx, OutcomeInvalid, bad.Error(), &RefusedError{Err: ErrInvalid, Message: bad.Error(), Cause: bad})
	}
	if !found {
		return Resolved{}, a.refuse(ctx, OutcomeNotPending, fmt.Sprintf("the step has no round %d", want), refused(ErrNotPending,
			fmt.Sprintf("step %d of run %s has no round %d needing resolution", r.Step, r.RunID, want)))
	}

	orig, err := answerOfRecord(ctx, tx, r.Tenant, r.RunID, r.Step, round)
	if err != nil {
		return Resolved{}, err
	}
	if orig != nil && state != ResolutionPending && state != orig.Decision {
		return Resolved{}, a.refuse(ctx, OutcomeNotPending, "the run recorded the round as "+state, refused(ErrResolvedOtherwise,
			fmt.Sprintf("round %d of step %d of run %s was answered %s by %s at %s, but the run recorded it as %s",
				round, r.Step, r.RunID, orig.Decision, orig.Resolver, stamp(orig.DecidedAt), state)))
	}
	if orig != nil {
		if orig.Decision != r.Outcome || !sameJSON(orig.Result, r.Result) {
			what := "answered " + orig.Decision
			if orig.Decision == r.Outcome {
				what += " with another result"
			}
			return Resolved{}, a.refuse(ctx, OutcomeConflict, "the round was already "+what, refused(ErrConflict,
				fmt.Sprintf("round %d of step %d of run %s was already %s by %s at %s; an answer cannot be changed",
					round, r.Step, r.RunID, what, orig.Resolver, stamp(orig.DecidedAt))))
		}
		if err := a.commit(ctx, OutcomeRepeated, ""); err != nil {
			return Resolved{}, err
		}
		return Resolved{Decision: *orig, Repeated: true, Deliver: state == ResolutionPending}, nil
	}
	if state != ResolutionPending {
		// Every answer the run applies has an answer of record: a round
		// recorded without one was answered by an earlier release, and is
		// not pending.
		return Resolved{}, a.refuse(ctx, OutcomeNotPending, "the run recorded the round as "+state, refused(ErrNotPending,
			fmt.Sprintf("round %d of step %d of run %s is not pending: the run recorded it as %s", round, r.Step, r.RunID, state)))
	}
	rows, err := tx.Query(ctx, insertResolutionDecisionSQL+" RETURNING "+resolutionDecisionColumns, a.args(OutcomeAccepted, "")...)
	if err != nil {
		return Resolved{}, fmt.Errorf("resolve: record the answer on step %d of run %s: %w", r.Step, r.RunID, err)
	}
	rec, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[ResolutionRecord])
	if err != nil {
		return Resolved{}, fmt.Errorf("resolve: record the answer on step %d of run %s: %w", r.Step, r.RunID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Resolved{}, fmt.Errorf("resolve: record the answer on step %d of run %s: %w", r.Step, r.RunID, err)
	}
	return Resolved{Decision: rec, Deliver: true}, nil
}

// invalid is what keeps the answer from being taken on its values: what
// the caller found, or an outcome the table cannot hold.
func (r ResolveRequest) invalid() error {
	if r.Invalid != nil {
		return r.Invalid
	}
	if r.Round > MaxRound {
		return fmt.Errorf("round %d is out of range: rounds are numbered from 1 to %d (0 or none: the latest)", r.Round, MaxRound)
	}
	if r.Outcome != ResolutionApplied && r.Outcome != ResolutionNotApplied {
		return fmt.Errorf("outcome %q is not applied or not_applied", untrusted.Cut(r.Outcome, 64))
	}
	if len(r.Result) > 0 {
		// What is accepted is compared with the next answer and stored on
		// the key: it must read back as it was sent.
		return untrusted.Value("result", r.Result, MaxResultBytes)
	}
	return nil
}

// MaxRound is the highest round a step can have (the column is a
// PostgreSQL integer).
const MaxRound = math.MaxInt32

// answerOfRecord returns the round's accepted answer, or nil.
func answerOfRecord(ctx context.Context, db DB, tenant, runID string, step int64, round int) (*ResolutionRecord, error) {
	rows, err := db.Query(ctx, answerOfRecordSQL, tenant, runID, step, round)
	if err != nil {
		return nil, fmt.Errorf("resolve: read the answer on step %d of run %s: %w", step, runID, err)
	}
	d, err := pgx.CollectOneRow(rows, pgx.RowToAddrOfStructByName[ResolutionRecord])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resolve: read the answer on step %d of run %s: %w", step, runID, err)
	}
	return d, nil
}

// sameJSON reports whether two results are the same JSON value, absent
// ones included: members in any order, numbers by their exact value (an
// id beyond 2⁵³ is not its neighbour).
func sameJSON(a, b json.RawMessage) bool {
	same, err := untrusted.Equal(a, b)
	return err == nil && same
}

// resolveAudit records an answer that is refused or repeated.
type resolveAudit struct {
	tx    pgx.Tx
	r     ResolveRequest
	round int
}

// args are the values of the request's row, with what the client sent
// escaped and cut as for decisions. A result that is not JSON the database
// can hold is not recorded; an outcome that is neither applied nor
// not_applied is recorded as "" with the request invalid (a forbidden one
// too, its detail saying it was forbidden).
func (a resolveAudit) args(outcome, detail string) []any {
	r := a.r
	decision := r.Outcome
	if decision != ResolutionApplied && decision != ResolutionNotApplied {
		decision = ""
		if outcome != OutcomeInvalid {
			detail = strings.TrimSuffix(outcome+": "+detail, ": ")
			outcome = OutcomeInvalid
		}
	}
	var result any
	if len(r.Result) > 0 && untrusted.Value("result", r.Result, MaxResultBytes) == nil {
		result = []byte(r.Result)
	}
	return []any{r.Tenant, r.RunID, r.Step, a.round, decision, outcome, result, untrusted.Clean(r.By, MaxNameBytes),
		untrusted.Clean(r.Role, MaxNameBytes), auditText("note", r.Note, MaxCommentBytes), untrusted.Clean(r.RemoteAddr, maxAuditRemoteAddr),
		untrusted.Clean(r.UserAgent, maxAuditUserAgent), r.Via, untrusted.Clean(detail, maxAuditDetail)}
}

// commit records the request with outcome and commits.
func (a resolveAudit) commit(ctx context.Context, outcome, detail string) error {
	if _, err := a.tx.Exec(ctx, insertResolutionDecisionSQL, a.args(outcome, detail)...); err != nil {
		return fmt.Errorf("resolve: audit the %s request on step %d of run %s: %w", outcome, a.r.Step, a.r.RunID, err)
	}
	if err := a.tx.Commit(ctx); err != nil {
		return fmt.Errorf("resolve: audit the %s request on step %d of run %s: %w", outcome, a.r.Step, a.r.RunID, err)
	}
	return nil
}

// refuse records the request with outcome and returns why it was refused.
func (a resolveAudit) refuse(ctx context.Context, outcome, detail string, why *RefusedError) error {
	if err := a.commit(ctx, outcome, detail); err != nil {
		return err
	}
	return why
}
