package approvals

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/edge"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/workflows"
)

// View selects the approvals a list shows.
type View string

// Views of the approvals list.
const (
	// ViewPending lists the steps that wait for a decision: no decision has
	// been recorded and the deadline has not passed.
	ViewPending View = "pending"
	// ViewDecided lists the steps that were decided or expired, and those
	// whose decision the run is applying.
	ViewDecided View = "decided"
	// ViewNeedsResolution lists the steps a person should look at: a
	// recorded decision the run did not apply (it recorded another outcome,
	// or has not applied it within the grace period), or a passed deadline
	// the run has not recorded.
	ViewNeedsResolution View = "needs_resolution"
)

// Bounds of a list.
const (
	DefaultListLimit = 100
	MaxListLimit     = 500
)

// Item is a step that asked for approval, or whose outcome waits to be
// resolved, as the approvals list shows it.
type Item struct {
	// Kind is KindApproval, or KindOutcomeUnknown for a step whose outcome
	// waits to be resolved (listed under needs_resolution).
	Kind     string          `json:"kind"`
	RunID    string          `json:"run_id"`
	Step     int64           `json:"step"`
	Tool     string          `json:"tool"`
	Args     json.RawMessage `json:"args"`
	ArgsHash string          `json:"args_hash"`
	Goal     string          `json:"goal"`
	// Reason is why the step needs approval (the tool's rule).
	Reason string `json:"reason"`
	// RequestedBy names who started the run that asks.
	RequestedBy string    `json:"requested_by"`
	RequestedAt time.Time `json:"requested_at"`
	Deadline    time.Time `json:"deadline"`
	// State is the step as its run recorded it: pending, approved, rejected
	// or expired.
	State     string     `json:"state"`
	DecidedBy string     `json:"decided_by,omitempty"`
	DecidedAt *time.Time `json:"decided_at,omitempty"`
	Comment   string     `json:"comment,omitempty"`
	// Decision is the decision of record sent through this service, if any.
	Decision *Decision `json:"decision,omitempty"`
	// Problem says why a step needs resolution.
	Problem string `json:"problem,omitempty"`
	// Resolution says what was sent, when, and what is known, for an item
	// of KindOutcomeUnknown.
	Resolution *ResolutionInfo `json:"resolution,omitempty"`
}

// Decision is a decision of record.
type Decision struct {
	RunID     string             `json:"run_id"`
	Step      int64              `json:"step"`
	Decision  workflows.Decision `json:"decision"`
	Approver  string             `json:"approver"`
	Role      Role               `json:"role,omitempty"`
	Comment   string             `json:"comment,omitempty"`
	ArgsHash  string             `json:"args_hash"`
	DecidedAt time.Time          `json:"decided_at"`
	// Via is where the decision was made: api or inbox through this
	// service, run when the run recorded a decision sent around it.
	Via string `json:"via"`
}

// Where a decision came from.
const (
	viaAPI   = "api"
	viaInbox = "inbox"
	viaRun   = "run"
)

// Outcomes of a decision request, as the audit table records them.
const (
	outcomeAccepted     = "accepted"
	outcomeRepeated     = "repeated"
	outcomeConflict     = "conflict"
	outcomeArgsMismatch = "args_mismatch"
	outcomeForbidden    = "forbidden"
	outcomeNotPending   = "not_pending"
	outcomeInvalid      = "invalid"
)

// pastTense is the approvals-table state a decision leads to.
func pastTense(d workflows.Decision) string {
	if d == workflows.DecisionApprove {
		return "approved"
	}
	return "rejected"
}

// itemColumns are the columns of an Item, from approvals a and the decision
// of record d.
const itemColumns = `a.run_id, a.step, a.tool, a.args, a.args_hash, a.goal, a.reason, a.requested_by,
    a.requested_at, a.deadline, a.state, coalesce(a.decided_by, '') AS decided_by, a.decided_at, a.comment,
    d.decision AS d_decision, d.approver AS d_approver, d.role AS d_role, d.comment AS d_comment,
    d.args_hash AS d_args_hash, d.decided_at AS d_decided_at, d.via AS d_via`

// decisionJoin joins a step's decision of record, if any, by one probe of
// the unique index per step: the lists read a page of steps, never every
// decision of the tenant.
const decisionJoin = `LEFT JOIN LATERAL (
    SELECT * FROM approval_decisions d
    WHERE d.tenant = a.tenant AND d.run_id = a.run_id AND d.step = a.step AND d.outcome = 'accepted'
    LIMIT 1) d ON true`

// list returns the tenant's approvals in one view: pending and needing
// resolution oldest first, decided newest first.
func (s *Server) list(ctx context.Context, tenant string, view View, limit int) ([]Item, error) {
	if view != ViewPending && view != ViewDecided && view != ViewNeedsResolution {
		return nil, errorf(http.StatusBadRequest, "invalid_request", "state %q is not pending, decided or needs_resolution", view)
	}
	ctx, cancel := s.dbContext(ctx)
	defer cancel()
	now := s.cfg.Now()
	cutoff := now.Add(-s.cfg.ResolveGrace)
	var query string
	switch view {
	case ViewPending:
		query = `SELECT ` + itemColumns + ` FROM approvals a ` + decisionJoin + `
WHERE a.tenant = @tenant AND a.state = 'pending' AND a.deadline > @now
  AND NOT EXISTS (SELECT 1 FROM approval_decisions n
                  WHERE n.tenant = a.tenant AND n.run_id = a.run_id AND n.step = a.step AND n.outcome = 'accepted')
ORDER BY a.requested_at, a.run_id, a.step LIMIT @limit`
	case ViewNeedsResolution:
		query = `SELECT * FROM (
    (SELECT ` + itemColumns + ` FROM approvals a ` + decisionJoin + `
     WHERE a.tenant = @tenant AND a.decision_mismatch)
    UNION ALL
    (SELECT ` + itemColumns + ` FROM approvals a ` + decisionJoin + `
     WHERE a.tenant = @tenant AND a.state = 'pending' AND d.decided_at < @cutoff)
    UNION ALL
    (SELECT ` + itemColumns + ` FROM approvals a ` + decisionJoin + `
     WHERE a.tenant = @tenant AND a.state = 'pending' AND a.deadline < @cutoff AND d.id IS NULL)
) x ORDER BY requested_at, run_id, step LIMIT @limit`
	default:
		query = `SELECT run_id, step, tool, args, args_hash, goal, reason, requested_by, requested_at, deadline, state,
       decided_by, decided_at, comment, d_decision, d_approver, d_role, d_comment, d_args_hash, d_decided_at, d_via
FROM (
    (SELECT ` + itemColumns + `, a.decided_at AS sort_at FROM approvals a ` + decisionJoin + `
     WHERE a.tenant = @tenant AND a.state <> 'pending' AND NOT a.decision_mismatch
     ORDER BY a.decided_at DESC LIMIT @limit)
    UNION ALL
    (SELECT ` + itemColumns + `, d.decided_at FROM approval_decisions r
     JOIN approvals a ON a.tenant = r.tenant AND a.run_id = r.run_id AND a.step = r.step ` + decisionJoin + `
     WHERE r.tenant = @tenant AND r.outcome = 'accepted' AND r.decided_at >= @cutoff AND a.state = 'pending')
    UNION ALL
    (SELECT ` + itemColumns + `, a.deadline FROM approvals a ` + decisionJoin + `
     WHERE a.tenant = @tenant AND a.state = 'pending' AND a.deadline <= @now AND a.deadline >= @cutoff AND d.id IS NULL)
) x ORDER BY sort_at DESC, run_id, step LIMIT @limit`
	}
	rows, err := s.cfg.Pool.Query(ctx, query, pgx.NamedArgs{"tenant": tenant, "now": now, "cutoff": cutoff, "limit": limit})
	if err != nil {
		return nil, fmt.Errorf("list %s approvals of tenant %s: %w", view, tenant, err)
	}
	items := []Item{}
	for rows.Next() {
		var (
			it                                    = Item{Kind: KindApproval}
			dDecision, dApprover, dRole, dComment *string
			dArgsHash, dVia                       *string
			dDecidedAt                            *time.Time
		)
		if err := rows.Scan(&it.RunID, &it.Step, &it.Tool, &it.Args, &it.ArgsHash, &it.Goal, &it.Reason,
			&it.RequestedBy, &it.RequestedAt, &it.Deadline, &it.State, &it.DecidedBy, &it.DecidedAt, &it.Comment,
			&dDecision, &dApprover, &dRole, &dComment, &dArgsHash, &dDecidedAt, &dVia); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list %s approvals of tenant %s: %w", view, tenant, err)
		}
		if dDecision != nil {
			it.Decision = &Decision{RunID: it.RunID, Step: it.Step, Decision: workflows.Decision(*dDecision),
				Approver: *dApprover, Role: Role(*dRole), Comment: *dComment, ArgsHash: *dArgsHash,
				DecidedAt: *dDecidedAt, Via: *dVia}
		}
		if view == ViewNeedsResolution {
			it.Problem = problem(it)
		}
		items = append(items, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list %s approvals of tenant %s: %w", view, tenant, err)
	}
	if view == ViewNeedsResolution {
		// Steps whose outcome is unknown: their own query, on their own
		// index.
		unknown, err := s.pendingResolutions(ctx, tenant, limit)
		if err != nil {
			return nil, err
		}
		items = mergeItems(items, unknown, limit)
	}
	return items, nil
}

// problem says why an item needs resolution.
func problem(it Item) string {
	d := it.Decision
	switch {
	case d != nil && it.State != "pending":
		return fmt.Sprintf("%s %s this step at %s, but the run recorded it as %s", d.Approver, pastTense(d.Decision),
			d.DecidedAt.UTC().Format(time.RFC3339), it.State)
	case d != nil:
		return fmt.Sprintf("%s %s this step at %s, but the run has not applied the decision: is a worker running, is the run still open?",
			d.Approver, pastTense(d.Decision), d.DecidedAt.UTC().Format(time.RFC3339))
	default:
		return fmt.Sprintf("the deadline %s passed, but the run has not recorded the expiry: is a worker running, is the run still open?",
			it.Deadline.UTC().Format(time.RFC3339))
	}
}

// decideInput is one decision request.
type decideInput struct {
	id       Identity
	runID    string
	step     int64
	decision workflows.Decision
	argsHash string
	comment  string
	remote   string
	agent    string
	via      string
	// invalid, when set, is what the transport found wrong with the request
	// (a body that does not decode, say); the request is refused with it
	// once its audit row is written.
	invalid *apiError
	retried bool
}

// check finds what is wrong with the request's own values, if anything.
func (in decideInput) check() *apiError {
	if in.invalid != nil {
		return in.invalid
	}
	if in.decision != workflows.DecisionApprove && in.decision != workflows.DecisionReject {
		return errorf(http.StatusBadRequest, "invalid_request", "decision %q is not approve or reject", edge.Cut(string(in.decision), 64))
	}
	if !isHash(in.argsHash) {
		return errorf(http.StatusBadRequest, "invalid_request",
			"args_hash %q is not the 64 hex digits of the arguments hash you reviewed (GET /v1/approvals lists it)", edge.Cut(in.argsHash, 128))
	}
	if err := edge.Text("comment", in.comment, MaxCommentBytes); err != nil {
		return errorf(http.StatusBadRequest, "invalid_request", "%s", err)
	}
	return nil
}

// decide records a decision and sends it to the run. See [DecideResponse]
// for what it returns; every refusal is an *apiError. Every request on a
// step of the caller's tenant leaves one audit row, whatever is wrong with
// it: a viewer's is "forbidden", one whose values are wrong is "invalid".
// A request naming no step of the tenant leaves none, so that nobody can
// fill the table with made-up steps.
func (s *Server) decide(ctx context.Context, in decideInput) (DecideResponse, error) {
	if _, err := keys.New(in.id.Tenant, in.runID, in.step, "tool"); err != nil {
		// No run of the tenant can have this id.
		return DecideResponse{}, errorf(http.StatusNotFound, "not_found", "run %q has no step %d waiting for approval", edge.Cut(in.runID, keys.MaxRunIDLen), in.step)
	}
	ctx, cancel := s.dbContext(ctx)
	defer cancel()
	tx, err := s.cfg.Pool.Begin(ctx)
	if err != nil {
		return DecideResponse{}, fmt.Errorf("decide: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()

	var (
		state, argsHash, decidedBy, comment string
		decidedAt                           *time.Time
		deadline                            time.Time
	)
	// A decision locks the step, so that two approvers are serialised; a
	// viewer's request, refused whatever the step's state, does not.
	lock := ""
	if in.id.Role.CanDecide() {
		lock = " FOR UPDATE"
	}
	err = tx.QueryRow(ctx, `
SELECT state, args_hash, coalesce(decided_by, ''), decided_at, comment, deadline
FROM approvals WHERE tenant = $1 AND run_id = $2 AND step = $3`+lock,
		in.id.Tenant, in.runID, in.step).Scan(&state, &argsHash, &decidedBy, &decidedAt, &comment, &deadline)
	if errors.Is(err, pgx.ErrNoRows) {
		return DecideResponse{}, errorf(http.StatusNotFound, "not_found", "run %q has no step %d waiting for approval", in.runID, in.step)
	}
	if err != nil {
		return DecideResponse{}, fmt.Errorf("decide: read step %d of run %s: %w", in.step, in.runID, err)
	}
	if !in.id.Role.CanDecide() {
		if err := s.auditCommit(ctx, tx, in, outcomeForbidden, "the token's role may not decide"); err != nil {
			return DecideResponse{}, err
		}
		return DecideResponse{}, errorf(http.StatusForbidden, "forbidden", "%s is a %s; deciding takes an approver or operator token", in.id.Name, in.id.Role)
	}
	if bad := in.check(); bad != nil {
		if err := s.auditCommit(ctx, tx, in, outcomeInvalid, bad.message); err != nil {
			return DecideResponse{}, err
		}
		return DecideResponse{}, bad
	}

	orig, err := s.decisionOfRecord(ctx, tx, in)
	if err != nil {
		return DecideResponse{}, err
	}
	if orig == nil && (state == "approved" || state == "rejected") && decidedBy != "" {
		// Decided around this service (the CLI without ONCERUN_API): the
		// run's record is the decision of record.
		orig = &Decision{RunID: in.runID, Step: in.step, Decision: decisionOf(state), Approver: decidedBy,
			Comment: comment, ArgsHash: argsHash, Via: viaRun}
		if decidedAt != nil {
			orig.DecidedAt = *decidedAt
		}
	}
	if orig != nil && state != "pending" && state != pastTense(orig.Decision) {
		// The run recorded another outcome than the decision of record
		// (its deadline came first): neither repeating nor changing the
		// decision can be answered as if it had been applied.
		if err := s.auditCommit(ctx, tx, in, outcomeNotPending, "the run recorded the step as "+state); err != nil {
			return DecideResponse{}, err
		}
		return DecideResponse{}, errorf(http.StatusConflict, "resolved_otherwise",
			"step %d of run %s was %s by %s at %s, but the run recorded it as %s; it is listed under needs_resolution",
			in.step, in.runID, pastTense(orig.Decision), orig.Approver, orig.DecidedAt.UTC().Format(time.RFC3339), state)
	}
	if orig != nil {
		if orig.Decision != in.decision {
			if err := s.auditCommit(ctx, tx, in, outcomeConflict, "the step was already "+pastTense(orig.Decision)); err != nil {
				return DecideResponse{}, err
			}
			return DecideResponse{}, errorf(http.StatusConflict, "decision_conflict",
				"step %d of run %s was already %s by %s at %s; a decision cannot be changed",
				in.step, in.runID, pastTense(orig.Decision), orig.Approver, orig.DecidedAt.UTC().Format(time.RFC3339))
		}
		if in.argsHash != argsHash {
			// The same decision, for arguments other than the step's: not
			// a repeat of the decision of record.
			return DecideResponse{}, s.argsMismatch(ctx, tx, in, "the step's", argsHash)
		}
		if err := s.auditCommit(ctx, tx, in, outcomeRepeated, ""); err != nil {
			return DecideResponse{}, err
		}
		if state == "pending" {
			// The first request may have been recorded without reaching the
			// run; sending the decision again is harmless.
			if err := s.signal(ctx, in.id.Tenant, *orig); err != nil {
				return DecideResponse{}, undelivered("decision", in.runID, "; it is listed under needs_resolution", err)
			}
		}
		return DecideResponse{Decision: *orig, Repeated: true}, nil
	}
	if state != "pending" {
		if err := s.auditCommit(ctx, tx, in, outcomeNotPending, "the step is "+state); err != nil {
			return DecideResponse{}, err
		}
		return DecideResponse{}, errorf(http.StatusNotFound, "not_found", "step %d of run %s is not pending: it is %s", in.step, in.runID, state)
	}
	if now := s.cfg.Now(); !now.Before(deadline) {
		if err := s.auditCommit(ctx, tx, in, outcomeNotPending, "the deadline has passed"); err != nil {
			return DecideResponse{}, err
		}
		return DecideResponse{}, errorf(http.StatusNotFound, "not_found", "step %d of run %s is not pending: its deadline %s has passed",
			in.step, in.runID, deadline.UTC().Format(time.RFC3339))
	}
	if in.argsHash != argsHash {
		return DecideResponse{}, s.argsMismatch(ctx, tx, in, "the pending step's", argsHash)
	}
	rec := Decision{RunID: in.runID, Step: in.step, Decision: in.decision, Approver: in.id.Name, Role: in.id.Role,
		Comment: in.comment, ArgsHash: in.argsHash, Via: in.via}
	err = tx.QueryRow(ctx, auditInsert+" RETURNING decided_at", auditArgs(in, outcomeAccepted, "")...).Scan(&rec.DecidedAt)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && !in.retried {
		// Another decision of record won a race the row lock should have
		// prevented: answer as if this request came second.
		_ = tx.Rollback(ctx)
		in.retried = true
		return s.decide(ctx, in)
	}
	if err != nil {
		return DecideResponse{}, fmt.Errorf("decide: record the decision on step %d of run %s: %w", in.step, in.runID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return DecideResponse{}, fmt.Errorf("decide: record the decision on step %d of run %s: %w", in.step, in.runID, err)
	}
	s.log.Info("decision recorded", zap.String("tenant", in.id.Tenant), zap.String("run_id", in.runID),
		zap.Int64("step", in.step), zap.String("decision", string(in.decision)), zap.String("approver", in.id.Name),
		zap.String("via", in.via), zap.String("remote_addr", in.remote))
	if err := s.signal(ctx, in.id.Tenant, rec); err != nil {
		return DecideResponse{}, undelivered("decision", in.runID, "; it is listed under needs_resolution", err)
	}
	return DecideResponse{Decision: rec}, nil
}

// argsMismatch audits and refuses a decision given for arguments other than
// the step's.
func (s *Server) argsMismatch(ctx context.Context, tx pgx.Tx, in decideInput, whose, stepHash string) error {
	if err := s.auditCommit(ctx, tx, in, outcomeArgsMismatch, "the step's args_hash is "+stepHash); err != nil {
		return err
	}
	return errorf(http.StatusConflict, "args_hash_mismatch",
		"the args_hash you reviewed, %s, is not %s %s: review the step's arguments again", in.argsHash, whose, stepHash)
}

// undelivered answers a recorded decision or answer (what) whose signal
// failed: a run that is not open can never apply it (409, with closedHint
// appended when set); otherwise sending it again may (503).
func undelivered(what, runID, closedHint string, err error) error {
	if errors.Is(err, runs.ErrNotFound) {
		return errorf(http.StatusConflict, "run_closed",
			"the %s is recorded but run %s is no longer open and cannot apply it%s", what, runID, closedHint)
	}
	return errorf(http.StatusServiceUnavailable, "unavailable",
		"the %s is recorded but the run could not be reached (%s); send the same %s again to deliver it", what, err, what)
}

func (s *Server) signal(ctx context.Context, tenant string, d Decision) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.QueryTimeout)
	defer cancel()
	return s.cfg.Runs.Signal(ctx, runs.Decision{Tenant: tenant, RunID: d.RunID, Step: d.Step, Decision: d.Decision,
		Approver: d.Approver, Comment: d.Comment, ArgsHash: d.ArgsHash})
}

func (s *Server) decisionOfRecord(ctx context.Context, tx pgx.Tx, in decideInput) (*Decision, error) {
	rows, err := tx.Query(ctx, `
SELECT run_id, step, decision, approver, role, comment, args_hash, decided_at, via
FROM approval_decisions
WHERE tenant = $1 AND run_id = $2 AND step = $3 AND outcome = 'accepted'`, in.id.Tenant, in.runID, in.step)
	if err != nil {
		return nil, fmt.Errorf("decide: read the decision on step %d of run %s: %w", in.step, in.runID, err)
	}
	d, err := pgx.CollectOneRow(rows, pgx.RowToAddrOfStructByPos[Decision])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("decide: read the decision on step %d of run %s: %w", in.step, in.runID, err)
	}
	return d, nil
}

const auditInsert = `
INSERT INTO approval_decisions (tenant, run_id, step, decision, outcome, args_hash, approver, role, comment, remote_addr, user_agent, via, detail)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`

// Bounds of what an audit row records of a request.
const (
	maxAuditArgsHash  = 128
	maxAuditUserAgent = 512
	maxAuditDetail    = 1000
)

// auditArgs are the values of a request's audit row. What the client sent
// is recorded as it was when it is valid text, and escaped and cut (see
// edge.Clean) when it is not, so that no request can fail to leave its row.
func auditArgs(in decideInput, outcome, detail string) []any {
	decision := string(in.decision)
	if in.decision != workflows.DecisionApprove && in.decision != workflows.DecisionReject {
		decision = ""
	}
	comment := in.comment
	if edge.Text("comment", comment, MaxCommentBytes) != nil {
		comment = edge.Clean(comment, MaxCommentBytes)
	}
	return []any{in.id.Tenant, in.runID, in.step, decision, outcome, edge.Clean(in.argsHash, maxAuditArgsHash), in.id.Name,
		string(in.id.Role), comment, in.remote, edge.Clean(in.agent, maxAuditUserAgent), in.via, edge.Clean(detail, maxAuditDetail)}
}

// auditCommit records a refused or repeated decision request and commits.
func (s *Server) auditCommit(ctx context.Context, tx pgx.Tx, in decideInput, outcome, detail string) error {
	if _, err := tx.Exec(ctx, auditInsert, auditArgs(in, outcome, detail)...); err != nil {
		return fmt.Errorf("decide: audit the %s decision on step %d of run %s: %w", outcome, in.step, in.runID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("decide: audit the %s decision on step %d of run %s: %w", outcome, in.step, in.runID, err)
	}
	return nil
}

func decisionOf(state string) workflows.Decision {
	if state == "approved" {
		return workflows.DecisionApprove
	}
	return workflows.DecisionReject
}

func isHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && s == lowerHex(s)
}

func lowerHex(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'F' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
