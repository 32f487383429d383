package approvals

import (
	"encoding/json"
	"net/http"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/workflows"
)

// Caller is who sends a request and how it came: it goes into the audit
// row of every decision, answer, check and operator's request.
type Caller struct {
	Identity Identity
	// Via is "api" or "inbox".
	Via        string
	RemoteAddr string
	UserAgent  string
}

// StepRequest is what every request about one step says, a decision's
// and an answer's alike: who asks, about which step of a run of the
// caller's tenant, and in which round (0: the step's current round for an
// answer, the first for a decision).
type StepRequest struct {
	Caller
	RunID string
	Step  int64
	Round int
	// Invalid, when set, is what the transport found wrong with the
	// request (a body that does not decode, say); the request is refused
	// with it once its audit row is written.
	Invalid *APIError
}

// DecideInput is one decision about a step that waits for approval.
type DecideInput struct {
	StepRequest
	Decision workflows.Decision
	// ArgsHash is the hash of the arguments the approver reviewed.
	ArgsHash string
	// Args are an edit's arguments, as sent.
	Args    json.RawMessage
	Comment string
}

// ResolveInput is one answer about a step whose outcome is unknown.
type ResolveInput struct {
	StepRequest
	Outcome workflows.Outcome
	// Result is the effect's result, with applied; nil for none.
	Result json.RawMessage
	Note   string
}

// ControlInput is one operator's request about a run: a cancel, pause,
// resume (Reason) or message (MessageID and Text).
type ControlInput struct {
	Caller
	RunID     string
	Action    string
	Reason    string
	MessageID string
	Text      string
	// Invalid is as StepRequest's.
	Invalid *APIError
}

// CallerOf is the caller of request r, of identity id, through via.
func CallerOf(r *http.Request, id Identity, via string) Caller {
	return Caller{Identity: id, Via: via, RemoteAddr: RemoteAddr(r), UserAgent: r.UserAgent()}
}

// StepRequestOf is request r's about step of the run its path names
// ({run_id}), by id, through via: the API's and the inbox's alike.
func StepRequestOf(r *http.Request, id Identity, via string, step int64) StepRequest {
	return StepRequest{Caller: CallerOf(r, id, via), RunID: r.PathValue("run_id"), Step: step}
}

// store is the request as the approvals store records it: a decision and
// an answer alike. Approvers and operators may decide and answer.
func (in StepRequest) store() approvalstore.StepRequest {
	r := approvalstore.StepRequest{Tenant: in.Identity.Tenant, RunID: in.RunID, Step: in.Step, Round: in.Round,
		By: in.Identity.Name, Role: string(in.Identity.Role), May: in.Identity.Role.CanDecide(),
		RemoteAddr: in.RemoteAddr, UserAgent: in.UserAgent, Via: in.Via}
	if in.Invalid != nil {
		// Not a nil *APIError in an error.
		r.Invalid = in.Invalid
	}
	return r
}
