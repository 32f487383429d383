package approvals

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/workflows"
)

// ControlRequest is the body of POST /v1/runs/{run_id}/cancel, /pause and
// /resume.
type ControlRequest struct {
	// Reason says why, in at most workflows.MaxReasonBytes bytes of text.
	// Optional.
	Reason string `json:"reason,omitempty"`
}

// CancelResponse answers a cancel, 200 for the first and for every repeat:
// State is the run's after it, cancelling while a step still runs and
// cancelled once none does, and Receipt says how each step ended.
type CancelResponse struct {
	Tenant    string             `json:"tenant"`
	RunID     string             `json:"run_id"`
	State     workflows.RunState `json:"state"`
	Receipt   *workflows.Receipt `json:"receipt"`
	StatusURL string             `json:"status_url"`
}

// PauseResponse answers a pause or a resume: the run's state after it, and
// the pause in force (null when the run is not paused).
type PauseResponse struct {
	Tenant string                   `json:"tenant"`
	RunID  string                   `json:"run_id"`
	State  workflows.RunState       `json:"state"`
	Paused *workflows.ControlRecord `json:"paused"`
}

// MessageRequest is the body of POST /v1/runs/{run_id}/messages: words for
// the run's planner's next turn. The message id is the caller's: the same
// id with the same text is accepted once.
type MessageRequest struct {
	MessageID string `json:"message_id"`
	Text      string `json:"text"`
}

// MessageResponse answers a message: where it stands among the run's
// messages and when the run accepted it; Duplicate says the run had
// accepted it before and this request changed nothing.
type MessageResponse struct {
	Tenant     string    `json:"tenant"`
	RunID      string    `json:"run_id"`
	MessageID  string    `json:"message_id"`
	Position   int       `json:"position"`
	AcceptedAt time.Time `json:"accepted_at"`
	Duplicate  bool      `json:"duplicate"`
}

// gerunds name what an operator's request does, for a refusal's message.
var gerunds = map[string]string{
	approvalstore.ActionCancel: "cancelling runs", approvalstore.ActionPause: "pausing runs",
	approvalstore.ActionResume: "resuming runs", approvalstore.ActionMessage: "sending runs messages",
}

// Control sends a request to the run of the identity's tenant through the
// one path every such request takes (runs.Client.Operate: the checks, the
// update, the withdrawal of a cancelled run's approvals and the audit
// row). Only operators may: another role's request is refused with 403
// and audited as forbidden, unless the run does not exist (404, no row).
// Every refusal is an *APIError, every other failure one of a run that
// could not be reached.
func (s *Server) Control(ctx context.Context, in ControlInput) (Controlled, error) {
	// Two questions to Temporal (the run's status, the update) and the
	// rows, each within its own bound.
	ctx, cancel := context.WithTimeout(ctx, 2*s.cfg.QueryTimeout+s.cfg.DBTimeout)
	defer cancel()
	req := runs.ControlRequest{Tenant: in.Identity.Tenant, RunID: in.RunID, Action: in.Action, By: in.Identity.Name, Reason: in.Reason,
		MessageID: in.MessageID, Text: in.Text}
	if in.Invalid != nil {
		req.Invalid = in.Invalid
	}
	if !in.Identity.Role.CanStart() {
		s.log.Warn("run control refused: not an operator", zap.String("tenant", in.Identity.Tenant), zap.String("run_id", in.RunID),
			zap.String("action", in.Action), zap.String("name", in.Identity.Name), zap.String("role", string(in.Identity.Role)))
		req.Forbidden = errorf(http.StatusForbidden, "forbidden", "%s is %s; %s takes an operator token",
			in.Identity.Name, withArticle(in.Identity.Role), gerunds[in.Action])
	}
	res, err := s.cfg.Runs.Operate(ctx, s.cfg.Pool, req)
	fields := []zap.Field{zap.String("tenant", in.Identity.Tenant), zap.String("run_id", in.RunID), zap.String("action", in.Action),
		zap.String("by", in.Identity.Name), zap.String("via", in.Via), zap.String("remote_addr", in.RemoteAddr)}
	if res.Unrecorded != nil {
		s.log.Error("run control: not recorded in PostgreSQL", append(fields, zap.Error(res.Unrecorded))...)
	}
	if err != nil {
		return res, s.controlRefusal(in, err)
	}
	if !res.Repeated {
		s.log.Info("run control accepted", append(fields, zap.Int64("withdrawn", res.Withdrawn))...)
	}
	return res, nil
}

// withArticle is a role with its article: "a viewer", "an approver".
func withArticle(r Role) string {
	if r != "" && strings.ContainsRune("aeiou", rune(r[0])) {
		return "an " + string(r)
	}
	return "a " + string(r)
}

// controlRefusal is the API's answer to a request that did not go
// through: 403, 400, 404, 409 run_closed for a run that has ended, 409
// run_refused for one that cannot take it in its state, 503 for a run that
// could not be reached.
func (s *Server) controlRefusal(in ControlInput, err error) error {
	var closed *runs.ClosedError
	var forbidden *APIError
	switch {
	case errors.Is(err, runs.ErrForbidden) && errors.As(err, &forbidden):
		return forbidden
	case errors.Is(err, runs.ErrInvalidRequest) && in.Invalid != nil:
		return in.Invalid
	case errors.Is(err, runs.ErrInvalidRequest):
		return errorf(http.StatusBadRequest, "invalid_request", "%s", strings.TrimPrefix(err.Error(), runs.ErrInvalidRequest.Error()+": "))
	case errors.Is(err, runs.ErrNotFound):
		return errorf(http.StatusNotFound, "not_found", "no run %q", in.RunID)
	case errors.As(err, &closed):
		return errorf(http.StatusConflict, "run_closed", "%s", closed.Error())
	case errors.Is(err, runs.ErrRefused):
		return errorf(http.StatusConflict, "run_refused", "run %s refused: %s", in.RunID,
			strings.TrimPrefix(err.Error(), runs.ErrRefused.Error()+": "))
	}
	s.log.Warn("run control: the run could not be reached", zap.String("tenant", in.Identity.Tenant), zap.String("run_id", in.RunID),
		zap.String("action", in.Action), zap.Error(err))
	return errorf(http.StatusServiceUnavailable, "unavailable", "run %s could not be reached: %s", in.RunID, err)
}

// controlAPI answers POST /v1/runs/{run_id}/cancel, /pause and /resume.
func (s *Server) controlAPI(action string) func(http.ResponseWriter, *http.Request, Identity) {
	return func(w http.ResponseWriter, r *http.Request, id Identity) {
		var req ControlRequest
		in := ControlInput{Caller: CallerOf(r, id, approvalstore.ViaAPI), RunID: r.PathValue("run_id"), Action: action}
		// A body that does not decode is refused once it is audited.
		in.Invalid = s.decodeBody(w, r, &req)
		in.Reason = req.Reason
		res, err := s.Control(r.Context(), in)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		st := res.Status
		if action == approvalstore.ActionCancel {
			writeJSON(w, http.StatusOK, CancelResponse{Tenant: id.Tenant, RunID: in.RunID, State: st.State, Receipt: st.Receipt,
				StatusURL: "/v1/runs/" + url.PathEscape(in.RunID)})
			return
		}
		writeJSON(w, http.StatusOK, PauseResponse{Tenant: id.Tenant, RunID: in.RunID, State: st.State, Paused: st.Paused})
	}
}

// messageAPI answers POST /v1/runs/{run_id}/messages.
func (s *Server) messageAPI(w http.ResponseWriter, r *http.Request, id Identity) {
	var req MessageRequest
	in := ControlInput{Caller: CallerOf(r, id, approvalstore.ViaAPI), RunID: r.PathValue("run_id"), Action: approvalstore.ActionMessage}
	in.Invalid = s.decodeBody(w, r, &req)
	in.MessageID, in.Text = req.MessageID, req.Text
	res, err := s.Control(r.Context(), in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rc := res.Receipt
	writeJSON(w, http.StatusOK, MessageResponse{Tenant: id.Tenant, RunID: in.RunID, MessageID: rc.MessageID, Position: rc.Position,
		AcceptedAt: rc.AcceptedAt, Duplicate: rc.Duplicate})
}
