package approvals

import (
	"context"

	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/approvalstore"
)

// Decide records a decision and sends it to the run, through the one path
// every decision takes (runs.Client.Decide: approvalstore.Decide checks the
// role, locks the step and writes the audit row, then the run is
// signalled). See [DecideResponse] for what it returns; every refusal is an
// *APIError.
func (s *Server) Decide(ctx context.Context, in DecideInput) (DecideResponse, error) {
	ctx, cancel := s.dbContext(ctx)
	defer cancel()
	req := approvalstore.DecisionRequest{StepRequest: in.store(), Decision: string(in.Decision), ArgsHash: in.ArgsHash,
		EditedArgs: in.Args, Comment: in.Comment, Now: s.cfg.Now()}
	d, err := s.cfg.Runs.Decide(ctx, s.cfg.Pool, req)
	if d.Decision.ID != 0 && !d.Repeated {
		s.log.Info("decision recorded", zap.String("tenant", in.Identity.Tenant), zap.String("run_id", in.RunID),
			zap.Int64("step", in.Step), zap.String("decision", string(in.Decision)), zap.String("approver", in.Identity.Name),
			zap.String("via", in.Via), zap.String("remote_addr", in.RemoteAddr))
	}
	if err != nil {
		return DecideResponse{}, refusal(err, in.Identity, "deciding")
	}
	return DecideResponse{Decision: decisionOf(d.Decision), Repeated: d.Repeated}, nil
}
