package approvals

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// CheckResponse is what the provider said when a person asked it again
// about a step whose outcome is unknown (POST …/check).
type CheckResponse struct {
	// Found is the paired read's answer: the provider holds the effect.
	Found bool `json:"found"`
	// Record is the paired read's answer as it came.
	Record json.RawMessage `json:"record"`
	// Resolution is, when Found, the answer recorded from it: applied, with
	// the provider's record as the result, by the person who asked. A step
	// the provider does not hold is not answered: whether nothing else can
	// still apply it is the person's call.
	Resolution *ResolutionRecord `json:"resolution,omitempty"`
}

// checkTimeout bounds one paired read asked for from the inbox or the API.
const checkTimeout = 30 * time.Second

// Check runs the paired read of a step whose outcome is unknown now, with
// the arguments the step was sent with and under its key. When the provider
// holds the effect, the step is answered applied with the provider's record,
// through the path every answer takes (resolve); otherwise nothing is
// recorded, and the answer says what the provider said.
func (s *Server) Check(ctx context.Context, in StepRequest) (CheckResponse, error) {
	if !in.Identity.Role.CanDecide() {
		return CheckResponse{}, errorf(http.StatusForbidden, "forbidden", "role %s may not resolve steps", in.Identity.Role)
	}
	dctx, cancel := s.dbContext(ctx)
	row, found, err := approvalstore.PendingResolution(dctx, s.cfg.Pool, in.Identity.Tenant, in.RunID, in.Step)
	cancel()
	if err != nil {
		return CheckResponse{}, err
	}
	if !found {
		return CheckResponse{}, errorf(http.StatusNotFound, "not_found", "run %s has no step %d whose outcome waits to be resolved", in.RunID, in.Step)
	}
	t, ok := s.Tool(row.Tool)
	if !ok || t.PairedRead == "" {
		return CheckResponse{}, errorf(http.StatusConflict, "no_paired_read",
			"tool %s has no paired read to ask the provider with: check with the provider and answer applied or not_applied", row.Tool)
	}
	read, ok := s.Tool(t.PairedRead)
	if !ok || read.Run == nil {
		return CheckResponse{}, errorf(http.StatusConflict, "no_paired_read", "the paired read %s of %s is not registered here", t.PairedRead, row.Tool)
	}
	key, err := keys.New(row.Tenant, row.RunID, row.Step, row.Tool)
	if err != nil {
		return CheckResponse{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	out, err := read.Run(rctx, tools.Call{Key: key, Args: row.Args, ArgsHash: row.ArgsHash, DB: s.cfg.Pool})
	var record json.RawMessage
	if err == nil {
		record, err = json.Marshal(out)
	}
	var holds bool
	if err == nil {
		holds, err = tools.Found(read.Name, record)
	}
	if err != nil {
		s.log.Warn("check with the provider: the paired read failed", zap.String("tenant", row.Tenant), zap.String("run_id", row.RunID),
			zap.Int64("step", row.Step), zap.String("paired_read", read.Name), zap.Error(err))
		return CheckResponse{}, errorf(http.StatusBadGateway, "provider_unavailable", "the paired read %s could not tell: %v", read.Name, err)
	}
	res := CheckResponse{Found: holds, Record: record}
	s.log.Info("checked with the provider", zap.String("tenant", row.Tenant), zap.String("run_id", row.RunID), zap.Int64("step", row.Step),
		zap.String("paired_read", read.Name), zap.Bool("found", res.Found), zap.String("by", in.Identity.Name))
	if !res.Found {
		return res, nil
	}
	answer := in
	answer.Round = row.Round
	resolved, err := s.Resolve(ctx, ResolveInput{StepRequest: answer, Outcome: workflows.OutcomeApplied, Result: record,
		Note: fmt.Sprintf("the provider holds the effect: its paired read %s found it when %s asked again", read.Name, in.Identity.Name)})
	if err != nil {
		return CheckResponse{}, err
	}
	res.Resolution = &resolved.Resolution
	return res, nil
}

func (s *Server) checkAPI(w http.ResponseWriter, r *http.Request, id Identity) {
	step, err := ParseStep(r.PathValue("step"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := s.Check(r.Context(), StepRequestOf(r, id, approvalstore.ViaAPI, step))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
