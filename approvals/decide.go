package approvals

import (
	"context"
	"encoding/json"

	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/workflows"
)

// decideInput is one decision request.
type decideInput struct {
	id       Identity
	runID    string
	step     int64
	decision workflows.Decision
	argsHash string
	// args are an edit's arguments, as sent.
	args    json.RawMessage
	comment string
	// round is the round of the approval reviewed; 0 for the current.
	round  int
	remote string
	agent  string
	via    string
	// invalid, when set, is what the transport found wrong with the request
	// (a body that does not decode, say); the request is refused with it
	// once its audit row is written.
	invalid *apiError
}

// decide records a decision and sends it to the run, through the one path
// every decision takes (runs.Client.Decide: approvalstore.Decide checks the
// role, locks the step and writes the audit row, then the run is
// signalled). See [DecideResponse] for what it returns; every refusal is an
// *apiError.
func (s *Server) decide(ctx context.Context, in decideInput) (DecideResponse, error) {
	ctx, cancel := s.dbContext(ctx)
	defer cancel()
	req := approvalstore.DecisionRequest{
		Tenant: in.id.Tenant, RunID: in.runID, Step: in.step, Decision: string(in.decision), ArgsHash: in.argsHash,
		EditedArgs: in.args, Comment: in.comment, Approver: in.id.Name, Role: string(in.id.Role), MayDecide: in.id.Role.CanDecide(),
		RemoteAddr: in.remote, UserAgent: in.agent, Via: in.via, Now: s.cfg.Now(), Round: in.round,
	}
	if in.invalid != nil {
		req.Invalid = in.invalid
	}
	d, err := s.cfg.Runs.Decide(ctx, s.cfg.Pool, req)
	if d.Decision.ID != 0 && !d.Repeated {
		s.log.Info("decision recorded", zap.String("tenant", in.id.Tenant), zap.String("run_id", in.runID),
			zap.Int64("step", in.step), zap.String("decision", string(in.decision)), zap.String("approver", in.id.Name),
			zap.String("via", in.via), zap.String("remote_addr", in.remote))
	}
	if err != nil {
		return DecideResponse{}, refusal(err, in.id, "deciding")
	}
	return DecideResponse{Decision: decisionOf(d.Decision), Repeated: d.Repeated}, nil
}
