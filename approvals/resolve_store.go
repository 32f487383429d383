package approvals

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/edge"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/workflows"
)

// viaCLI marks an answer given with the CLI without ONCERUN_API.
const viaCLI = "cli"

// resolveInput is one resolve request.
type resolveInput struct {
	id      Identity
	runID   string
	step    int64
	round   int
	outcome workflows.Outcome
	result  json.RawMessage
	note    string
	remote  string
	agent   string
	via     string
	// invalid, when set, is what the transport found wrong with the request;
	// it is refused with it once its audit row is written.
	invalid *apiError
	retried bool
}

// mayResolve reports whether the request's sender may answer: an approver
// or operator token, or the CLI with the database's credentials.
func (in resolveInput) mayResolve() bool { return in.id.Role.CanDecide() || in.via == viaCLI }

// check finds what is wrong with the request's own values, if anything.
func (in resolveInput) check() *apiError {
	if in.invalid != nil {
		return in.invalid
	}
	if in.round < 0 {
		return errorf(http.StatusBadRequest, "invalid_request", "round %d is not a round number (1, 2, ...; leave it out for the latest)", in.round)
	}
	r := workflows.Resolution{Step: in.step, Round: in.round, Outcome: in.outcome, Result: in.result, Resolver: in.id.Name, Note: in.note}
	if err := r.Validate(); err != nil {
		return errorf(http.StatusBadRequest, "invalid_request", "%s", err)
	}
	return nil
}

// roundRow is a round of a step's resolution as the run recorded it.
type roundRow struct {
	round      int
	state      string
	resolvedBy string
	resolvedAt *time.Time
	result     []byte
	note       string
}

func noResolution(runID string, step int64) *apiError {
	return errorf(http.StatusNotFound, "not_found", "run %q has no step %d whose outcome waits to be resolved", runID, step)
}

// resolve records an answer about a step whose outcome is unknown and sends
// it to the run, as decide does for approvals: every request on a step of
// the caller's tenant that has needed resolution leaves one audit row in
// resolution_decisions; one naming no such step leaves none.
func (s *Server) resolve(ctx context.Context, in resolveInput) (ResolveResponse, error) {
	if _, err := keys.New(in.id.Tenant, in.runID, in.step, "tool"); err != nil {
		// No run of the tenant can have this id.
		return ResolveResponse{}, noResolution(edge.Cut(in.runID, keys.MaxRunIDLen), in.step)
	}
	ctx, cancel := s.dbContext(ctx)
	defer cancel()
	tx, err := s.cfg.Pool.Begin(ctx)
	if err != nil {
		return ResolveResponse{}, fmt.Errorf("resolve: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()

	// An answer locks the round, so that two people are serialised; a
	// refused viewer's request does not.
	lock := ""
	if in.mayResolve() {
		lock = " FOR UPDATE"
	}
	want := max(in.round, 0)
	var row roundRow
	found := true
	err = tx.QueryRow(ctx, `
SELECT round, state, coalesce(resolved_by, ''), resolved_at, result, note FROM resolutions
WHERE tenant = $1 AND run_id = $2 AND step = $3 AND ($4::integer = 0 OR round = $4::integer)
ORDER BY round DESC LIMIT 1`+lock, in.id.Tenant, in.runID, in.step, want).
		Scan(&row.round, &row.state, &row.resolvedBy, &row.resolvedAt, &row.result, &row.note)
	if errors.Is(err, pgx.ErrNoRows) {
		if want == 0 {
			return ResolveResponse{}, noResolution(in.runID, in.step)
		}
		// A round the step does not have: audited if the step has others.
		var exists bool
		err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM resolutions WHERE tenant = $1 AND run_id = $2 AND step = $3)`,
			in.id.Tenant, in.runID, in.step).Scan(&exists)
		if err != nil {
			return ResolveResponse{}, fmt.Errorf("resolve: read step %d of run %s: %w", in.step, in.runID, err)
		}
		if !exists {
			return ResolveResponse{}, noResolution(in.runID, in.step)
		}
		found, row.round = false, want
	} else if err != nil {
		return ResolveResponse{}, fmt.Errorf("resolve: read step %d of run %s: %w", in.step, in.runID, err)
	}
	if !in.mayResolve() {
		if err := s.resolveAuditCommit(ctx, tx, in, row.round, outcomeForbidden, "the token's role may not resolve"); err != nil {
			return ResolveResponse{}, err
		}
		return ResolveResponse{}, errorf(http.StatusForbidden, "forbidden", "%s is a %s; resolving takes an approver or operator token", in.id.Name, in.id.Role)
	}
	if bad := in.check(); bad != nil {
		if err := s.resolveAuditCommit(ctx, tx, in, row.round, outcomeInvalid, bad.message); err != nil {
			return ResolveResponse{}, err
		}
		return ResolveResponse{}, bad
	}
	if !found {
		if err := s.resolveAuditCommit(ctx, tx, in, row.round, outcomeNotPending, fmt.Sprintf("the step has no round %d", want)); err != nil {
			return ResolveResponse{}, err
		}
		return ResolveResponse{}, errorf(http.StatusNotFound, "not_found", "step %d of run %s has no round %d needing resolution", in.step, in.runID, want)
	}

	orig, err := s.resolutionOfRecord(ctx, tx, in, row.round)
	if err != nil {
		return ResolveResponse{}, err
	}
	if orig == nil && row.state != "pending" {
		// Answered around this service and the CLI: the run's record is the
		// answer of record.
		orig = &ResolveDecision{RunID: in.runID, Step: in.step, Round: row.round, Outcome: workflows.Outcome(row.state),
			Result: row.result, Resolver: row.resolvedBy, Note: row.note, Via: viaRun}
		if row.resolvedAt != nil {
			orig.DecidedAt = *row.resolvedAt
		}
	}
	if orig != nil && row.state != "pending" && row.state != string(orig.Outcome) {
		if err := s.resolveAuditCommit(ctx, tx, in, row.round, outcomeNotPending, "the run recorded the round as "+row.state); err != nil {
			return ResolveResponse{}, err
		}
		return ResolveResponse{}, errorf(http.StatusConflict, "resolved_otherwise",
			"round %d of step %d of run %s was answered %s by %s at %s, but the run recorded it as %s",
			row.round, in.step, in.runID, orig.Outcome, orig.Resolver, orig.DecidedAt.UTC().Format(time.RFC3339), row.state)
	}
	if orig != nil {
		if orig.Outcome != in.outcome || !sameJSON(orig.Result, in.result) {
			what := "answered " + string(orig.Outcome)
			if orig.Outcome == in.outcome {
				what += " with another result"
			}
			if err := s.resolveAuditCommit(ctx, tx, in, row.round, outcomeConflict, "the round was already "+what); err != nil {
				return ResolveResponse{}, err
			}
			return ResolveResponse{}, errorf(http.StatusConflict, "decision_conflict",
				"round %d of step %d of run %s was already %s by %s at %s; an answer cannot be changed",
				row.round, in.step, in.runID, what, orig.Resolver, orig.DecidedAt.UTC().Format(time.RFC3339))
		}
		if err := s.resolveAuditCommit(ctx, tx, in, row.round, outcomeRepeated, ""); err != nil {
			return ResolveResponse{}, err
		}
		if row.state == "pending" {
			// The first request may have been recorded without reaching the
			// run; sending the answer again is harmless.
			if err := s.signalResolution(ctx, in.id.Tenant, *orig); err != nil {
				return ResolveResponse{}, undelivered("answer", in.runID, "", err)
			}
		}
		return ResolveResponse{Resolution: *orig, Repeated: true}, nil
	}

	rec := ResolveDecision{RunID: in.runID, Step: in.step, Round: row.round, Outcome: in.outcome, Resolver: in.id.Name,
		Role: in.id.Role, Note: in.note, Via: in.via}
	var stored []byte
	err = tx.QueryRow(ctx, resolveAuditInsert+" RETURNING decided_at, result", resolveAuditArgs(in, row.round, outcomeAccepted, "")...).
		Scan(&rec.DecidedAt, &stored)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && !in.retried {
		// Another answer of record won a race the row lock should have
		// prevented: answer as if this request came second.
		_ = tx.Rollback(ctx)
		in.retried = true
		return s.resolve(ctx, in)
	}
	if err != nil {
		return ResolveResponse{}, fmt.Errorf("resolve: record the answer on step %d of run %s: %w", in.step, in.runID, err)
	}
	rec.Result = stored
	if err := tx.Commit(ctx); err != nil {
		return ResolveResponse{}, fmt.Errorf("resolve: record the answer on step %d of run %s: %w", in.step, in.runID, err)
	}
	s.log.Info("resolution recorded", zap.String("tenant", in.id.Tenant), zap.String("run_id", in.runID),
		zap.Int64("step", in.step), zap.Int("round", row.round), zap.String("outcome", string(in.outcome)),
		zap.String("resolver", in.id.Name), zap.String("via", in.via), zap.String("remote_addr", in.remote))
	if err := s.signalResolution(ctx, in.id.Tenant, rec); err != nil {
		return ResolveResponse{}, undelivered("answer", in.runID, "", err)
	}
	return ResolveResponse{Resolution: rec}, nil
}

func (s *Server) signalResolution(ctx context.Context, tenant string, d ResolveDecision) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.QueryTimeout)
	defer cancel()
	return s.cfg.Runs.Resolve(ctx, tenant, d.RunID, workflows.Resolution{Step: d.Step, Round: d.Round, Outcome: d.Outcome,
		Result: d.Result, Resolver: d.Resolver, Note: d.Note})
}

func (s *Server) resolutionOfRecord(ctx context.Context, tx pgx.Tx, in resolveInput, round int) (*ResolveDecision, error) {
	d := ResolveDecision{RunID: in.runID, Step: in.step, Round: round}
	var role string
	err := tx.QueryRow(ctx, `
SELECT decision, result, resolver, role, note, decided_at, via FROM resolution_decisions
WHERE tenant = $1 AND run_id = $2 AND step = $3 AND round = $4 AND outcome = 'accepted'`,
		in.id.Tenant, in.runID, in.step, round).Scan(&d.Outcome, &d.Result, &d.Resolver, &role, &d.Note, &d.DecidedAt, &d.Via)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resolve: read the answer on step %d of run %s: %w", in.step, in.runID, err)
	}
	d.Role = Role(role)
	return &d, nil
}

// sameJSON reports whether two results are the same JSON value (by their
// canonical form), absent ones included.
func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	ca, errA := keys.Canonicalize(a)
	cb, errB := keys.Canonicalize(b)
	return errA == nil && errB == nil && string(ca) == string(cb)
}

const resolveAuditInsert = `
INSERT INTO resolution_decisions (tenant, run_id, step, round, decision, outcome, result, resolver, role, note,
                                  remote_addr, user_agent, via, detail)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`

// resolveAuditArgs are the values of a resolve request's audit row, with
// what the client sent escaped and cut as for decisions. A result that is
// not JSON the database can hold is not recorded; an outcome that is neither
// applied nor not_applied is recorded as "" with the request "invalid"
// (a viewer's too, its detail saying it was forbidden).
func resolveAuditArgs(in resolveInput, round int, outcome, detail string) []any {
	decision := string(in.outcome)
	if in.outcome != workflows.OutcomeApplied && in.outcome != workflows.OutcomeNotApplied {
		decision = ""
		if outcome != outcomeInvalid {
			detail = strings.TrimSuffix(outcome+": "+detail, ": ")
			outcome = outcomeInvalid
		}
	}
	var result any
	if len(in.result) > 0 && len(in.result) <= workflows.MaxResultBytes && edge.JSON("result", in.result) == nil {
		result = []byte(in.result)
	}
	note := in.note
	if edge.Text("note", note, MaxCommentBytes) != nil {
		note = edge.Clean(note, MaxCommentBytes)
	}
	return []any{in.id.Tenant, in.runID, in.step, round, decision, outcome, result, edge.Clean(in.id.Name, workflows.MaxApproverBytes),
		string(in.id.Role), note, in.remote, edge.Clean(in.agent, maxAuditUserAgent), in.via, edge.Clean(detail, maxAuditDetail)}
}

// resolveAuditCommit records a refused or repeated resolve request and
// commits.
func (s *Server) resolveAuditCommit(ctx context.Context, tx pgx.Tx, in resolveInput, round int, outcome, detail string) error {
	if _, err := tx.Exec(ctx, resolveAuditInsert, resolveAuditArgs(in, round, outcome, detail)...); err != nil {
		return fmt.Errorf("resolve: audit the %s request on step %d of run %s: %w", outcome, in.step, in.runID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("resolve: audit the %s request on step %d of run %s: %w", outcome, in.step, in.runID, err)
	}
	return nil
}

// pendingResolutions lists the tenant's steps whose outcome waits to be
// resolved, oldest first, by the partial index of pending rounds; each
// joins its answer of record, if any, by one probe of the unique index.
func (s *Server) pendingResolutions(ctx context.Context, tenant string, limit int) ([]Item, error) {
	rows, err := s.cfg.Pool.Query(ctx, `
SELECT r.run_id, r.step, r.round, r.tool, r.key, r.args, r.args_hash, r.goal, r.first_sent_at, r.known,
       r.requested_at, r.deadline, r.state,
       d.decision, d.result, d.resolver, d.role, d.note, d.decided_at, d.via
FROM resolutions r LEFT JOIN LATERAL (
    SELECT * FROM resolution_decisions d
    WHERE d.tenant = r.tenant AND d.run_id = r.run_id AND d.step = r.step AND d.round = r.round AND d.outcome = 'accepted'
    LIMIT 1) d ON true
WHERE r.tenant = $1 AND r.state = 'pending'
ORDER BY r.requested_at, r.run_id, r.step LIMIT $2`, tenant, limit)
	if err != nil {
		return nil, fmt.Errorf("list pending resolutions of tenant %s: %w", tenant, err)
	}
	defer rows.Close()
	now := s.cfg.Now()
	var items []Item
	for rows.Next() {
		var (
			it                          Item
			info                        ResolutionInfo
			dDecision, dResolver, dRole *string
			dNote, dVia                 *string
			dResult                     []byte
			dDecidedAt                  *time.Time
		)
		if err := rows.Scan(&it.RunID, &it.Step, &info.Round, &it.Tool, &info.Key, &it.Args, &it.ArgsHash, &it.Goal,
			&info.FirstSentAt, &info.Known, &info.RequestedAt, &info.Deadline, &it.State,
			&dDecision, &dResult, &dResolver, &dRole, &dNote, &dDecidedAt, &dVia); err != nil {
			return nil, fmt.Errorf("list pending resolutions of tenant %s: %w", tenant, err)
		}
		if dDecision != nil {
			info.Decision = &ResolveDecision{RunID: it.RunID, Step: it.Step, Round: info.Round, Outcome: workflows.Outcome(*dDecision),
				Result: dResult, Resolver: *dResolver, Role: Role(*dRole), Note: *dNote, DecidedAt: *dDecidedAt, Via: *dVia}
		}
		it.Kind, it.Resolution = KindOutcomeUnknown, &info
		it.RequestedAt, it.Deadline = info.RequestedAt, info.Deadline
		it.Problem = resolutionProblem(it, now)
		items = append(items, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list pending resolutions of tenant %s: %w", tenant, err)
	}
	return items, nil
}

// resolutionProblem says in words what was sent, when, what is known, and
// what the step waits for.
func resolutionProblem(it Item, now time.Time) string {
	info := it.Resolution
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s was sent under key %s, first at %s, and nobody could tell whether it was applied",
		it.Tool, edge.Cut(compactJSON(it.Args), 200), info.Key, info.FirstSentAt.UTC().Format(time.RFC3339))
	if info.Known != "" {
		fmt.Fprintf(&b, "; what we know: %s", info.Known)
	}
	if d := info.Decision; d != nil {
		fmt.Fprintf(&b, ". %s answered %s at %s, but the run has not applied the answer: is a worker running, is the run still open?",
			d.Resolver, d.Outcome, d.DecidedAt.UTC().Format(time.RFC3339))
		return b.String()
	}
	if round := info.Round; round > 1 {
		fmt.Fprintf(&b, " (round %d: it was resolved as not applied before)", round)
	}
	if now.Before(info.Deadline) {
		fmt.Fprintf(&b, ". Say whether the provider applied it; an alert is raised at %s if nobody answers.", info.Deadline.UTC().Format(time.RFC3339))
	} else {
		fmt.Fprintf(&b, ". Say whether the provider applied it; nobody has answered since the deadline %s passed.", info.Deadline.UTC().Format(time.RFC3339))
	}
	return b.String()
}

func compactJSON(raw json.RawMessage) string {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return string(raw)
	}
	return buf.String()
}

// mergeItems merges two lists sorted oldest first into one of at most limit
// items.
func mergeItems(a, b []Item, limit int) []Item {
	out := append(a, b...)
	slices.SortStableFunc(out, func(x, y Item) int {
		return cmp.Or(x.RequestedAt.Compare(y.RequestedAt), strings.Compare(x.RunID, y.RunID), cmp.Compare(x.Step, y.Step))
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}
