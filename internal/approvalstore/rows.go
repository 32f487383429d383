package approvalstore

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncerun/oncerun/internal/untrusted"
)

// DB is what the store's statements run on: a *pgxpool.Pool, a *pgx.Conn
// or a pgx.Tx. [Decide] and [Resolve] begin their own transaction on it (a
// savepoint when it is a transaction).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// States of an approvals row, as the table spells them.
const (
	StatePending  = "pending"
	StateApproved = "approved"
	StateRejected = "rejected"
	StateExpired  = "expired"
	// StateCancelled: the run was cancelled, which withdrew the request;
	// a decision sent after is refused.
	StateCancelled = "cancelled"
)

// States of a resolutions row, as the table spells them.
const (
	ResolutionPending    = "pending"
	ResolutionApplied    = "applied"
	ResolutionNotApplied = "not_applied"
)

// Decisions, as approval_decisions spells them.
const (
	DecisionApprove = "approve"
	DecisionReject  = "reject"
	DecisionEdit    = "edit"
)

// Outcomes of a decision or resolve request, as the audit tables record
// them.
const (
	OutcomeAccepted     = "accepted"
	OutcomeRepeated     = "repeated"
	OutcomeConflict     = "conflict"
	OutcomeArgsMismatch = "args_mismatch"
	OutcomeNotPending   = "not_pending"
	OutcomeForbidden    = "forbidden"
	OutcomeInvalid      = "invalid"
	// OutcomeRefusedByRun is an edit the run refused after the service
	// accepted it (their registries disagreed); it is no longer the
	// decision of record.
	OutcomeRefusedByRun = "refused_by_run"
)

// Where a request came from, as the audit tables record it.
const (
	// ViaAPI is the approvals service's JSON API.
	ViaAPI = "api"
	// ViaInbox is the approvals service's web inbox.
	ViaInbox = "inbox"
	// ViaCLI is the CLI with the database's and Temporal's credentials
	// (without ONCERUN_API).
	ViaCLI = "cli"
)

// Who made a request with direct access (the CLI without ONCERUN_API): no
// token, but the database's and Temporal's credentials.
const (
	// RoleLocal is the role recorded for such a request.
	RoleLocal = "local"
	// RemoteLocal is the remote address recorded for it.
	RemoteLocal = "local"
)

// Bounds of what the tables record of people's text. They are the bounds
// the clients check (workflows.MaxApproverBytes, MaxCommentBytes and
// MaxResultBytes); text over them, or that is not text, is escaped and cut
// so that no request fails to leave its audit row.
const (
	MaxNameBytes    = 128
	MaxCommentBytes = 2000
	MaxResultBytes  = 64 << 10

	maxAuditArgsHash   = 128
	maxAuditRemoteAddr = 512
	maxAuditUserAgent  = 512
	maxAuditDetail     = 1000
)

// Request is a step's request for a person's decision, as its run makes
// it: the one model of a pending step. The run's activity takes it
// (activities.ApprovalRequest), its row keeps it (Approval), and `oncerun
// approvals` lists it; the approvals API shows it as an approvals.Item.
type Request struct {
	Tenant   string          `json:"tenant" db:"tenant"`
	RunID    string          `json:"run_id" db:"run_id"`
	Step     int64           `json:"step" db:"step"`
	Tool     string          `json:"tool" db:"tool"`
	Args     json.RawMessage `json:"args" db:"args"`
	ArgsHash string          `json:"args_hash" db:"args_hash"`
	Goal     string          `json:"goal" db:"goal"`
	// Reason is why the step needs approval: the tool's rule, or, for Kind
	// KindLimit, the spend limit the step would cross.
	Reason string `json:"reason" db:"reason"`
	// RequestedBy names who started the run.
	RequestedBy string    `json:"requested_by,omitempty" db:"requested_by"`
	RequestedAt time.Time `json:"requested_at" db:"requested_at"`
	Deadline    time.Time `json:"deadline" db:"deadline"`
	// OnExpiry is what the deadline does to the step undecided: "expire"
	// or "reject", as the run's starter chose.
	OnExpiry string `json:"on_expiry,omitempty" db:"on_expiry"`
	// Kind is KindRule when the tool's approval rule asked, KindLimit when
	// the step would cross a spend limit (Reason says which): approving
	// it is then an exception.
	Kind string `json:"kind,omitempty" db:"kind"`
	// Round numbers the step's waits: a step approved under its rule that
	// met a limit when it ran waits again, in round 2 of the same row.
	// Each round has its own decision of record. Empty: the first.
	Round int `json:"round,omitempty" db:"round"`
	// Traceparent is the trace context of the run when it asked (W3C
	// traceparent), which a decision's request links to; the worker's
	// activity fills it in, so it is not part of the run's history.
	Traceparent string `json:"-" db:"-"`
	// Lineage, for a step of a child run, lists the runs and steps from
	// the first run of the tree down to the step that started the child;
	// ParentGoal is the parent run's goal. Both empty for a run a person
	// started.
	Lineage    []Hop  `json:"lineage,omitempty" db:"lineage"`
	ParentGoal string `json:"parent_goal,omitempty" db:"parent_goal"`
}

// Hop is one step of a child run's lineage: a run, and its step that
// delegated.
type Hop struct {
	RunID string `json:"run_id"`
	Step  int64  `json:"step"`
}

// Approval is a row of the approvals table: a step's request, pending or
// decided, as its run recorded it.
type Approval struct {
	Request
	// State is StatePending, StateApproved, StateRejected, StateExpired
	// or StateCancelled.
	State string `db:"state"`
	// DecidedBy, DecidedAt and Comment are the decision the run applied
	// (DecidedAt is also the expiry's time); for a withdrawn step, who
	// cancelled the run, when and why.
	DecidedBy string     `db:"decided_by"`
	DecidedAt *time.Time `db:"decided_at"`
	Comment   string     `db:"comment"`
	// DecisionMismatch is set when the run recorded another outcome than
	// the decision of record.
	DecisionMismatch bool `db:"decision_mismatch"`
	// EditedArgs and EditedArgsHash are the arguments that ran when an
	// approver edited the step (Args and ArgsHash stay the proposed ones).
	EditedArgs     json.RawMessage `db:"edited_args"`
	EditedArgsHash string          `db:"edited_args_hash"`
}

// Approval kinds, as the table spells them.
const (
	KindRule  = "rule"
	KindLimit = "limit"
)

// DecisionRecord is a row of approval_decisions: one decision request on a step,
// accepted or refused. The accepted one is the step's decision of record.
type DecisionRecord struct {
	ID     int64  `db:"id"`
	Tenant string `db:"tenant"`
	RunID  string `db:"run_id"`
	Step   int64  `db:"step"`
	// Decision is DecisionApprove, DecisionReject or DecisionEdit, or ""
	// for an invalid request that named none.
	Decision string `db:"decision"`
	// Outcome is what became of the request: OutcomeAccepted, ...
	Outcome    string    `db:"outcome"`
	ArgsHash   string    `db:"args_hash"`
	Approver   string    `db:"approver"`
	Role       string    `db:"role"`
	Comment    string    `db:"comment"`
	RemoteAddr string    `db:"remote_addr"`
	UserAgent  string    `db:"user_agent"`
	Via        string    `db:"via"`
	Detail     string    `db:"detail"`
	DecidedAt  time.Time `db:"decided_at"`
	// EditedArgs and EditedArgsHash are what an edit asked to run instead
	// of the arguments reviewed (ArgsHash).
	EditedArgs     json.RawMessage `db:"edited_args"`
	EditedArgsHash string          `db:"edited_args_hash"`
	// Round is the step's wait the decision was for (see Approval.Round).
	Round int `db:"round"`
	// Exception is set on an approve of a wait at a spend limit: the step
	// runs past the limit.
	Exception bool `db:"exception"`
}

// Resolution is a row of the resolutions table: one round of a step whose
// external effect's outcome is unknown, as its run recorded it.
type Resolution struct {
	Tenant   string          `db:"tenant"`
	RunID    string          `db:"run_id"`
	Step     int64           `db:"step"`
	Round    int             `db:"round"`
	Tool     string          `db:"tool"`
	Key      string          `db:"key"`
	Args     json.RawMessage `db:"args"`
	ArgsHash string          `db:"args_hash"`
	Goal     string          `db:"goal"`
	// FirstSentAt is when the step's first attempt began.
	FirstSentAt time.Time `db:"first_sent_at"`
	// Known is what oncerun knows of the outcome.
	Known       string    `db:"known"`
	RequestedAt time.Time `db:"requested_at"`
	Deadline    time.Time `db:"deadline"`
	// State is ResolutionPending, ResolutionApplied or
	// ResolutionNotApplied.
	State      string          `db:"state"`
	ResolvedBy string          `db:"resolved_by"`
	ResolvedAt *time.Time      `db:"resolved_at"`
	Result     json.RawMessage `db:"result"`
	Note       string          `db:"note"`
}

// ResolutionRecord is a row of resolution_decisions: one answer about a
// round of a step whose outcome is unknown, accepted or refused. The
// accepted one is the round's answer of record.
type ResolutionRecord struct {
	ID     int64  `db:"id"`
	Tenant string `db:"tenant"`
	RunID  string `db:"run_id"`
	Step   int64  `db:"step"`
	Round  int    `db:"round"`
	// Decision is ResolutionApplied or ResolutionNotApplied, or "" for an
	// invalid request that named neither.
	Decision   string          `db:"decision"`
	Outcome    string          `db:"outcome"`
	Result     json.RawMessage `db:"result"`
	Resolver   string          `db:"resolver"`
	Role       string          `db:"role"`
	Note       string          `db:"note"`
	RemoteAddr string          `db:"remote_addr"`
	UserAgent  string          `db:"user_agent"`
	Via        string          `db:"via"`
	Detail     string          `db:"detail"`
	DecidedAt  time.Time       `db:"decided_at"`
}

// storable is text of a run's (a goal, an approver's name, a comment) as
// the tables can hold it: as it is when it is text, escaped otherwise (a
// NUL becomes \u0000). Clients check such text where it enters; a run
// started or decided around them, or by an earlier release, must still be
// listed rather than fail.
func storable(s string) string {
	if untrusted.Text("text", s, len(s)) == nil {
		return s
	}
	return untrusted.Escape(s)
}

// auditText is what a request sent, as an audit row records it: as it was
// when it is valid text of at most maxBytes, escaped and cut otherwise.
func auditText(field, s string, maxBytes int) string {
	if untrusted.Text(field, s, maxBytes) == nil {
		return s
	}
	return untrusted.Clean(s, maxBytes)
}
