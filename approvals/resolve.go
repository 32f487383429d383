package approvals

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/workflows"
	"go.uber.org/zap"
)

// Kinds of the items of the approvals list.
const (
	// KindApproval is a step that asked for approval.
	KindApproval = "approval"
	// KindOutcomeUnknown is a step of an external tool whose outcome nobody
	// could tell: the run waits for a person to resolve it.
	KindOutcomeUnknown = "outcome_unknown"
)

// ResolveRequest is the body of POST /v1/runs/{run_id}/steps/{step}/resolve:
// a person's answer about a step whose outcome is unknown.
type ResolveRequest struct {
	// Outcome is "applied" (the effect happened) or "not_applied" (it did
	// not; the run sends it again under the same key). Required.
	Outcome string `json:"outcome"`
	// Result is the effect's result, any JSON value (the provider's answer,
	// if known), given only with applied. Default null.
	Result json.RawMessage `json:"result,omitempty"`
	// Note is recorded with the answer: at most 2,000 bytes of text.
	Note string `json:"note,omitempty"`
	// Round is the round the answer is about (a step can need resolution
	// again after a not_applied answer). Default: the step's latest round.
	Round int `json:"round,omitempty"`
}

// ResolveResponse answers a resolve request: 202 when the answer was
// accepted and sent to the run, 200 when the same answer had been given
// before (Resolution is then the original).
type ResolveResponse struct {
	Resolution ResolutionRecord `json:"resolution"`
	// Repeated is true when this request repeated the answer of record.
	Repeated bool `json:"repeated"`
}

// ResolutionRecord is the answer of record about one round of a step whose
// outcome was unknown.
type ResolutionRecord struct {
	RunID    string            `json:"run_id"`
	Step     int64             `json:"step"`
	Round    int               `json:"round"`
	Outcome  workflows.Outcome `json:"outcome"`
	Result   json.RawMessage   `json:"result,omitempty"`
	Resolver string            `json:"resolver"`
	// Role is the resolver's token's role, or "local" for an answer given
	// with the CLI without ONCERUN_API.
	Role      Role      `json:"role,omitempty"`
	Note      string    `json:"note,omitempty"`
	DecidedAt time.Time `json:"decided_at"`
	// Via is api or inbox through this service, cli with the CLI without
	// ONCERUN_API.
	Via string `json:"via"`
}

// ResolutionInfo is what an item of kind outcome_unknown says about the
// step's unknown outcome.
type ResolutionInfo struct {
	Round int `json:"round"`
	// Key is the idempotency key the step was sent under.
	Key string `json:"key"`
	// FirstSentAt is when the step's first attempt began.
	FirstSentAt time.Time `json:"first_sent_at"`
	// Known is what oncerun knows of the outcome: the failure it met, the
	// paired read's answer.
	Known       string    `json:"known"`
	RequestedAt time.Time `json:"requested_at"`
	// Deadline is when an alert is raised if nobody has answered; the run
	// waits on after it.
	Deadline time.Time `json:"deadline"`
	// Decision is the answer of record given through this service or the
	// CLI, if any: the run has not applied it yet.
	Decision *ResolutionRecord `json:"decision,omitempty"`
}

func (s *Server) resolveAPI(w http.ResponseWriter, r *http.Request, id Identity) {
	step, err := stepNumber(r.PathValue("step"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var req ResolveRequest
	// A body that does not decode is refused once the request is audited,
	// if it names a step.
	bad := s.decodeBody(w, r, &req)
	in := resolveRequestInput(id, r.PathValue("run_id"), step, req, approvalstore.ViaAPI)
	in.remote, in.agent, in.invalid = remoteAddr(r), r.UserAgent(), bad
	res, err := s.resolve(r.Context(), in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusAccepted
	if res.Repeated {
		status = http.StatusOK
	}
	writeJSON(w, status, res)
}

// resolveRequestInput is the resolve input of a request. A result of JSON
// null is no result.
func resolveRequestInput(id Identity, runID string, step int64, req ResolveRequest, via string) resolveInput {
	result := req.Result
	if bytes.Equal(bytes.TrimSpace(result), []byte("null")) || len(bytes.TrimSpace(result)) == 0 {
		result = nil
	}
	return resolveInput{id: id, runID: runID, step: step, round: req.Round, outcome: workflows.Outcome(req.Outcome),
		result: result, note: req.Note, via: via}
}

// resolveForm answers the inbox's resolve form, with the protections of the
// decision form: a signed-in session, a form of at most MaxBodyBytes and the
// session's CSRF token, or no audit row.
func (s *Server) resolveForm(w http.ResponseWriter, r *http.Request) {
	sess, p, step, ok := s.inboxForm(w, r)
	if !ok {
		return
	}
	runID := r.PathValue("run_id")
	req := ResolveRequest{Outcome: r.PostForm.Get("outcome"), Result: json.RawMessage(r.PostForm.Get("result")),
		Note: r.PostForm.Get("note")}
	var bad *apiError
	if v := r.PostForm.Get("round"); v != "" {
		var err error
		if req.Round, err = strconv.Atoi(v); err != nil {
			bad = errorf(http.StatusBadRequest, "invalid_request", "round %q is not a round number", v)
		}
	}
	in := resolveRequestInput(sess.id, runID, step, req, approvalstore.ViaInbox)
	in.remote, in.agent, in.invalid = remoteAddr(r), r.UserAgent(), bad
	ctx, cancel := s.dbContext(r.Context())
	defer cancel()
	res, err := s.resolve(ctx, in)
	if err != nil {
		s.formFailed(ctx, w, r, s.formError(p, "answer", runID, step, err), err)
		return
	}
	s.redirectWithFlash(w, r, resolvedFlash(res.Resolution))
}

// resolutionRecordOf is the answer of record rec as the API shows it.
func resolutionRecordOf(rec approvalstore.ResolutionRecord) ResolutionRecord {
	return ResolutionRecord{RunID: rec.RunID, Step: rec.Step, Round: rec.Round, Outcome: workflows.Outcome(rec.Decision),
		Result: rec.Result, Resolver: rec.Resolver, Role: Role(rec.Role), Note: rec.Note, DecidedAt: rec.DecidedAt, Via: rec.Via}
}

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
}

// resolve records an answer about a step whose outcome is unknown and sends
// it to the run, through the one path every answer takes
// (runs.Client.Resolve, as decide does for approvals): every request on a
// step of the caller's tenant that has needed resolution leaves one audit
// row in the answers' audit table; one naming no such step leaves none.
func (s *Server) resolve(ctx context.Context, in resolveInput) (ResolveResponse, error) {
	ctx, cancel := s.dbContext(ctx)
	defer cancel()
	req := approvalstore.ResolveRequest{
		Tenant: in.id.Tenant, RunID: in.runID, Step: in.step, Round: in.round, Outcome: string(in.outcome), Result: in.result,
		Note: in.note, Resolver: in.id.Name, Role: string(in.id.Role), MayResolve: in.id.Role.CanDecide(),
		RemoteAddr: in.remote, UserAgent: in.agent, Via: in.via,
	}
	if in.invalid != nil {
		req.Invalid = in.invalid
	}
	res, err := s.cfg.Runs.Resolve(ctx, s.cfg.Pool, req)
	if rec := res.Decision; rec.ID != 0 && !res.Repeated {
		s.log.Info("resolution recorded", zap.String("tenant", in.id.Tenant), zap.String("run_id", in.runID),
			zap.Int64("step", in.step), zap.Int("round", rec.Round), zap.String("outcome", rec.Decision),
			zap.String("resolver", in.id.Name), zap.String("via", in.via), zap.String("remote_addr", in.remote))
	}
	if err != nil {
		return ResolveResponse{}, refusal(err, in.id, "resolving")
	}
	return ResolveResponse{Resolution: resolutionRecordOf(res.Decision), Repeated: res.Repeated}, nil
}
