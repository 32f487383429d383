package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/internal/spend"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// StartRequest is the body of POST /v1/runs. The tenant is the token's.
type StartRequest struct {
	// RunID is the caller's id for the run. An Idempotency-Key header, when
	// present, is the run id; a body that names another is refused.
	RunID string `json:"run_id,omitempty"`
	// Goal is what the agent should achieve.
	Goal string `json:"goal,omitempty"`
	// Planner is "script" (default with a plan) or "openai" (default
	// without).
	Planner string `json:"planner,omitempty"`
	// Plan lists the calls of a scripted run.
	Plan   []tools.ProposedCall `json:"plan,omitempty"`
	Limits *StartLimits         `json:"limits,omitempty"`
	// OnApprovalExpiry is what a step's approval deadline does to it when
	// nobody decided: "expire" (default) or "reject". The planner cannot
	// change it.
	OnApprovalExpiry string `json:"on_approval_expiry,omitempty"`
}

// StartLimits bound a run started through the API.
type StartLimits struct {
	MaxSteps int `json:"max_steps,omitempty"`
	// ApprovalDeadline is a Go duration, such as "72h".
	ApprovalDeadline string `json:"approval_deadline,omitempty"`
	// Parallel is how many steps of one planning turn run at once
	// (workflows.Limits.Parallel): default 4, at most 64.
	Parallel int `json:"parallel,omitempty"`
	// Spend is the run's budget per currency, in minor units by upper-case
	// ISO 4217 code ({"EUR": 50000}; workflows.Limits.Spend).
	Spend map[string]int64 `json:"spend,omitempty"`
	// OtherCurrencies is what the budget does with an amount in a
	// currency it does not name: "park" (default) or "allow"
	// (workflows.Limits.OtherCurrencies).
	OtherCurrencies string `json:"other_currencies,omitempty"`
}

// StartResponse answers POST /v1/runs: 201 for a new run, 200 for a run
// that was started before with the same request.
type StartResponse struct {
	Tenant        string `json:"tenant"`
	RunID         string `json:"run_id"`
	WorkflowID    string `json:"workflow_id"`
	TemporalRunID string `json:"temporal_run_id"`
	Existing      bool   `json:"existing"`
	StatusURL     string `json:"status_url"`
}

func (s *Server) startRun(w http.ResponseWriter, r *http.Request, id Identity) {
	if !id.Role.CanStart() {
		s.fail(w, r, errorf(http.StatusForbidden, "forbidden", "%s is a %s; starting runs takes an operator token", id.Name, id.Role))
		return
	}
	var req StartRequest
	if bad := s.decodeBody(w, r, &req); bad != nil {
		s.fail(w, r, bad)
		return
	}
	in, err := s.runInput(r, id, req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.QueryTimeout)
	defer cancel()
	started, err := s.cfg.Runs.Start(ctx, in)
	switch {
	case errors.Is(err, runs.ErrConflict):
		s.fail(w, r, errorf(http.StatusUnprocessableEntity, "run_conflict", "%s", err))
		return
	case errors.Is(err, workflows.ErrInvalidInput):
		s.fail(w, r, errorf(http.StatusBadRequest, "invalid_request", "%s", err))
		return
	case err != nil:
		s.fail(w, r, errorf(http.StatusServiceUnavailable, "unavailable", "start run %s: %s", in.RunID, err))
		return
	}
	status := http.StatusCreated
	if started.Existing {
		status = http.StatusOK
	} else {
		s.log.Info("run started", zap.String("tenant", id.Tenant), zap.String("run_id", in.RunID),
			zap.String("by", id.Name), zap.String("remote_addr", RemoteAddr(r)))
	}
	w.Header().Set("Location", "/v1/runs/"+url.PathEscape(in.RunID))
	writeJSON(w, status, StartResponse{
		Tenant: id.Tenant, RunID: in.RunID, WorkflowID: started.WorkflowID, TemporalRunID: started.RunID,
		Existing: started.Existing, StatusURL: "/v1/runs/" + url.PathEscape(in.RunID),
	})
}

// runInput turns a start request into a run input, naming the field that
// is wrong.
func (s *Server) runInput(r *http.Request, id Identity, req StartRequest) (workflows.RunInput, error) {
	runID := req.RunID
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		if runID != "" && runID != key {
			return workflows.RunInput{}, errorf(http.StatusBadRequest, "invalid_request",
				"the Idempotency-Key header %q and run_id %q differ; the key is the run id", key, runID)
		}
		runID = key
	}
	if runID == "" {
		return workflows.RunInput{}, errorf(http.StatusBadRequest, "invalid_request",
			"run_id is required (in the body or as the Idempotency-Key header)")
	}
	in := workflows.RunInput{Tenant: id.Tenant, RunID: runID, Goal: req.Goal, Planner: req.Planner, Plan: req.Plan, StartedBy: id.Name,
		OnApprovalExpiry: req.OnApprovalExpiry}
	if req.Limits != nil {
		in.Limits.MaxSteps, in.Limits.Parallel, in.Limits.Spend = req.Limits.MaxSteps, req.Limits.Parallel, req.Limits.Spend
		// park is the default, and is written as none: a start that names
		// it and one that does not are the same request.
		if in.Limits.OtherCurrencies = req.Limits.OtherCurrencies; in.Limits.OtherCurrencies == spend.OtherPark {
			in.Limits.OtherCurrencies = ""
		}
		if req.Limits.ApprovalDeadline != "" {
			d, err := time.ParseDuration(req.Limits.ApprovalDeadline)
			if err != nil || d <= 0 {
				return workflows.RunInput{}, errorf(http.StatusBadRequest, "invalid_request",
					"limits.approval_deadline %q is not a positive duration such as \"72h\"", req.Limits.ApprovalDeadline)
			}
			in.Limits.ApprovalDeadline = d
		}
	}
	if in.Goal == "" && len(in.Plan) == 0 {
		return workflows.RunInput{}, errorf(http.StatusBadRequest, "invalid_request", "give a goal or a plan")
	}
	if err := in.Validate(); err != nil {
		return workflows.RunInput{}, errorf(http.StatusBadRequest, "invalid_request", "%s", err)
	}
	if s.cfg.Tools != nil {
		for i, c := range in.Plan {
			if _, err := s.cfg.Tools.Prepare(c); err != nil {
				return workflows.RunInput{}, errorf(http.StatusBadRequest, "invalid_request", "plan[%d]: %s", i, err)
			}
		}
	}
	return in, nil
}

func (s *Server) runStatus(w http.ResponseWriter, r *http.Request, id Identity) {
	st, err := s.Status(r.Context(), id, r.PathValue("run_id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// Status asks the run of the identity's tenant for its status.
func (s *Server) Status(ctx context.Context, id Identity, runID string) (workflows.Status, error) {
	if _, err := keys.New(id.Tenant, runID, 1, "x"); err != nil {
		// No run of the tenant can have this id.
		return workflows.Status{}, errorf(http.StatusNotFound, "not_found", "no run %q", untrusted.Cut(runID, keys.MaxRunIDLen))
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	st, err := s.cfg.Runs.Status(ctx, id.Tenant, runID)
	switch {
	case errors.Is(err, runs.ErrNotFound):
		return st, errorf(http.StatusNotFound, "not_found", "no run %q", runID)
	case err != nil:
		return st, errorf(http.StatusServiceUnavailable, "unavailable", "run %s did not answer: %s", runID, err)
	}
	return st, nil
}

// ApprovalList is the body of GET /v1/approvals.
type ApprovalList struct {
	State     string `json:"state"`
	Approvals []Item `json:"approvals"`
}

func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request, id Identity) {
	q := r.URL.Query()
	for name := range q {
		if name != "state" && name != "limit" {
			s.fail(w, r, errorf(http.StatusBadRequest, "invalid_request", "unknown query parameter %q (known: state, limit)", name))
			return
		}
	}
	view := View(q.Get("state"))
	if view == "" {
		view = ViewPending
	}
	limit := DefaultListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			s.fail(w, r, errorf(http.StatusBadRequest, "invalid_request", "limit %q is not a number from 1 to %d", v, MaxListLimit))
			return
		}
		limit = n
	}
	items, err := s.List(r.Context(), id, ListQuery{View: view, Limit: limit})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ApprovalList{State: string(view), Approvals: items})
}

// DecideRequest is the body of a decision.
type DecideRequest struct {
	// ArgsHash is the hash of the arguments the approver reviewed; the
	// decision applies only to those arguments. Required.
	ArgsHash string `json:"args_hash"`
	Comment  string `json:"comment,omitempty"`
	// Round is the round of the step's approval reviewed (the approvals
	// list's round); a step that waits in another round by now is refused
	// with 409 round_changed. Without it, the first round: a decision of
	// a later round (a wait at a spend limit) must name it.
	Round int `json:"round,omitempty"`
}

// DecideResponse answers a decision: 202 when it was accepted and sent to
// the run, 200 when the same decision had been made before (Decision is then
// the original).
type DecideResponse struct {
	Decision DecisionRecord `json:"decision"`
	// Repeated is true when this request repeated the decision of record.
	Repeated bool `json:"repeated"`
}

func (s *Server) decideAPI(verb string) func(http.ResponseWriter, *http.Request, Identity) {
	return func(w http.ResponseWriter, r *http.Request, id Identity) {
		answerStep(s, w, r, id, func(ctx context.Context, sr StepRequest, req DecideRequest) (DecideResponse, bool, error) {
			sr.Round = req.Round
			res, err := s.Decide(ctx, DecideInput{StepRequest: sr, Decision: workflows.Decision(verb), ArgsHash: req.ArgsHash,
				Comment: req.Comment})
			return res, res.Repeated, err
		})
	}
}

// EditRequest is the body of an edit: the approver approves the step with
// Args in place of the proposed arguments.
type EditRequest struct {
	// ArgsHash is the hash of the arguments the approver reviewed (the
	// proposed ones); a stale hash is refused with 409. Required.
	ArgsHash string `json:"args_hash"`
	// Args are the arguments to run: a JSON object the step's tool's schema
	// accepts and its edit rule allows. Required.
	Args    json.RawMessage `json:"args"`
	Comment string          `json:"comment,omitempty"`
	// Round is as for DecideRequest.
	Round int `json:"round,omitempty"`
}

// editAPI records an edit decision: 202 when accepted and sent to the run
// (the run checks the edit again and applies it; the decision's
// edited_args_hash is what the approval binds to), 200 when the same edit
// was made before, 422 edit_refused when the arguments do not fit the tool
// (the message names the field) or its edit rule, 409 when the reviewed
// hash is stale.
func (s *Server) editAPI(w http.ResponseWriter, r *http.Request, id Identity) {
	answerStep(s, w, r, id, func(ctx context.Context, sr StepRequest, req EditRequest) (DecideResponse, bool, error) {
		sr.Round = req.Round
		res, err := s.Decide(ctx, DecideInput{StepRequest: sr, Decision: workflows.DecisionEdit, ArgsHash: req.ArgsHash,
			Args: req.Args, Comment: req.Comment})
		return res, res.Repeated, err
	})
}

// answerStep answers an API request in which a person answers about a
// step (a decision, a resolution, answers to questions): it reads the
// path's step and the body into a Req, lets do record the answer (a body
// that does not decode is refused there, once the request is audited, if
// it names a step), and answers 202 for an answer accepted now, 200 for a
// repeat of the answer of record.
func answerStep[Req, Res any](s *Server, w http.ResponseWriter, r *http.Request, id Identity,
	do func(ctx context.Context, sr StepRequest, req Req) (res Res, repeated bool, err error)) {
	step, err := ParseStep(r.PathValue("step"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var req Req
	sr := StepRequestOf(r, id, approvalstore.ViaAPI, step)
	sr.Invalid = s.decodeBody(w, r, &req)
	res, repeated, err := do(r.Context(), sr, req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusAccepted
	if repeated {
		status = http.StatusOK
	}
	writeJSON(w, status, res)
}

// ParseStep reads a step number of a path: 1, 2, …; anything else is an
// *APIError 400.
func ParseStep(v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		return 0, errorf(http.StatusBadRequest, "invalid_request", "step %q is not a step number (1, 2, ...)", v)
	}
	return n, nil
}
