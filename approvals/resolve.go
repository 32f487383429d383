package approvals

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
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
	answerStep(s, w, r, id, func(ctx context.Context, sr StepRequest, req ResolveRequest) (ResolveResponse, bool, error) {
		res, err := s.Resolve(ctx, ResolveRequestInput(sr, req))
		return res, res.Repeated, err
	})
}

// ResolveRequestInput is the answer a resolve request of sr gives, as the
// API and the inbox take it: req's round, when set, is the round answered,
// and a result of JSON null is no result.
func ResolveRequestInput(sr StepRequest, req ResolveRequest) ResolveInput {
	result := req.Result
	if bytes.Equal(bytes.TrimSpace(result), []byte("null")) || len(bytes.TrimSpace(result)) == 0 {
		result = nil
	}
	if req.Round != 0 {
		sr.Round = req.Round
	}
	return ResolveInput{StepRequest: sr, Outcome: workflows.Outcome(req.Outcome), Result: result, Note: req.Note}
}

// resolutionRecordOf is the answer of record rec as the API shows it.
func resolutionRecordOf(rec approvalstore.ResolutionRecord) ResolutionRecord {
	return ResolutionRecord{RunID: rec.RunID, Step: rec.Step, Round: rec.Round, Outcome: workflows.Outcome(rec.Decision),
		Result: rec.Result, Resolver: rec.Resolver, Role: Role(rec.Role), Note: rec.Note, DecidedAt: rec.DecidedAt, Via: rec.Via}
}

// Resolve records an answer about a step whose outcome is unknown and sends
// it to the run, through the one path every answer takes
// (runs.Client.Resolve, as decide does for approvals): every request on a
// step of the caller's tenant that has needed resolution leaves one audit
// row in the answers' audit table; one naming no such step leaves none.
func (s *Server) Resolve(ctx context.Context, in ResolveInput) (ResolveResponse, error) {
	ctx, cancel := s.dbContext(ctx)
	defer cancel()
	req := approvalstore.ResolveRequest{StepRequest: in.store(), Outcome: string(in.Outcome), Result: in.Result, Note: in.Note}
	res, err := s.cfg.Runs.Resolve(ctx, s.cfg.Pool, req)
	if rec := res.Decision; rec.ID != 0 && !res.Repeated {
		s.log.Info("resolution recorded", zap.String("tenant", in.Identity.Tenant), zap.String("run_id", in.RunID),
			zap.Int64("step", in.Step), zap.Int("round", rec.Round), zap.String("outcome", rec.Decision),
			zap.String("resolver", in.Identity.Name), zap.String("via", in.Via), zap.String("remote_addr", in.RemoteAddr))
	}
	if err != nil {
		return ResolveResponse{}, refusal(err, in.Identity, "resolving")
	}
	return ResolveResponse{Resolution: resolutionRecordOf(res.Decision), Repeated: res.Repeated}, nil
}
