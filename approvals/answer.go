package approvals

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/workflows"
)

// KindQuestion is an item of the approvals list for a step whose tool's
// server asked a person questions during the call: it waits for answers.
const KindQuestion = "question"

// AnswerRequest is the body of POST /v1/runs/{run_id}/steps/{step}/answer:
// a person's answers to the questions a step's server asked.
type AnswerRequest struct {
	// Action and Content answer a round of one question: accept (Content
	// is then the answer's values, a JSON object that matches the
	// question's schema), decline or cancel.
	Action  string          `json:"action,omitempty"`
	Content json.RawMessage `json:"content,omitempty"`
	// Answers answer each question of a round by its id, instead.
	Answers map[string]workflows.QuestionAnswer `json:"answers,omitempty"`
	// Note is recorded with the answer: at most 2,000 bytes of text.
	Note string `json:"note,omitempty"`
	// Round is the round answered. Default: the step's latest.
	Round int `json:"round,omitempty"`
}

// AnswerResponse answers an answer request: 202 when the answer was
// accepted (and sent to the run, or left for the worker that holds a live
// question's session), 200 when the same answer had been given before
// (Answer is then the original).
type AnswerResponse struct {
	Answer   AnswerRecord `json:"answer"`
	Repeated bool         `json:"repeated"`
}

// AnswerRecord is the answer of record to one round of a step's questions.
type AnswerRecord struct {
	RunID    string                              `json:"run_id"`
	Step     int64                               `json:"step"`
	Round    int                                 `json:"round"`
	Answers  map[string]workflows.QuestionAnswer `json:"answers"`
	Answerer string                              `json:"answerer"`
	// Role is the answerer's token's role, or "local" for an answer given
	// with the CLI without ONCERUN_API.
	Role       Role      `json:"role,omitempty"`
	Note       string    `json:"note,omitempty"`
	AnsweredAt time.Time `json:"answered_at"`
	// Via is api or inbox through this service, cli with the CLI without
	// ONCERUN_API.
	Via string `json:"via"`
}

// QuestionInfo is what an item of kind question says about the questions.
type QuestionInfo struct {
	Round int `json:"round"`
	// Server names the MCP server that asked; Key is the step's key.
	Server string `json:"server,omitempty"`
	Key    string `json:"key"`
	// Items are the questions: each one's id, mode (form or url), message,
	// the schema its answer's content must match (form) or the page it
	// asks the person to open (url, the server's address, shown as text).
	Items []workflows.QuestionItem `json:"items"`
	// Live says the server asked over its live session, the call in
	// flight: only the worker holding it can pass the answer on, and the
	// question is lost if that worker stops first.
	Live bool `json:"live,omitempty"`
	// AnswerBy names who may answer; empty: any approver or operator of
	// the tenant. MayAnswer says it in words.
	AnswerBy  []string `json:"answer_by,omitempty"`
	MayAnswer string   `json:"may_answer"`
}

func (s *Server) answerAPI(w http.ResponseWriter, r *http.Request, id Identity) {
	answerStep(s, w, r, id, func(ctx context.Context, sr StepRequest, req AnswerRequest) (AnswerResponse, bool, error) {
		res, err := s.Answer(ctx, AnswerRequestInput(sr, req))
		return res, res.Repeated, err
	})
}

// AnswerInput is one answer to a round of a step's questions.
type AnswerInput struct {
	StepRequest
	// Answers answer the questions by id; Only, when set instead, answers
	// a round of one question.
	Answers map[string]workflows.QuestionAnswer
	Only    *workflows.QuestionAnswer
	Note    string
}

// AnswerRequestInput is the answer a request of sr gives, as the API and
// the inbox take it: req's round, when set, is the round answered; an
// action alone answers a round of one question.
func AnswerRequestInput(sr StepRequest, req AnswerRequest) AnswerInput {
	if req.Round != 0 {
		sr.Round = req.Round
	}
	in := AnswerInput{StepRequest: sr, Answers: req.Answers, Note: req.Note}
	if req.Action != "" || len(req.Content) > 0 {
		in.Only = &workflows.QuestionAnswer{Action: req.Action, Content: req.Content}
	}
	return in
}

// Answer records a person's answers to a step's questions and sends them
// to the run, through the one path every answer takes
// (runs.Client.Answer): every request on a step of the caller's tenant
// that was asked leaves one audit row; one naming no such step leaves
// none.
func (s *Server) Answer(ctx context.Context, in AnswerInput) (AnswerResponse, error) {
	ctx, cancel := s.dbContext(ctx)
	defer cancel()
	req := approvalstore.AnswerRequest{StepRequest: in.store(), Answers: in.Answers, Only: in.Only, Note: in.Note, Now: s.cfg.Now()}
	res, err := s.cfg.Runs.Answer(ctx, s.cfg.Pool, req)
	if rec := res.Record; rec.ID != 0 && !res.Repeated {
		s.log.Info("answer recorded", zap.String("tenant", in.Identity.Tenant), zap.String("run_id", in.RunID),
			zap.Int64("step", in.Step), zap.Int("round", rec.Round), zap.String("answerer", in.Identity.Name),
			zap.Bool("live", res.Live), zap.String("via", in.Via), zap.String("remote_addr", in.RemoteAddr))
	}
	var re *approvalstore.RefusedError
	if errors.As(err, &re) && errors.Is(re.Err, approvalstore.ErrForbidden) && in.Identity.Role.CanDecide() {
		// An approver the round does not name.
		return AnswerResponse{}, errorf(http.StatusForbidden, "forbidden", "%s", re.Message)
	}
	if err != nil {
		return AnswerResponse{}, refusal(err, in.Identity, "answering")
	}
	rec, err := answerRecordOf(res.Record)
	if err != nil {
		return AnswerResponse{}, err
	}
	return AnswerResponse{Answer: rec, Repeated: res.Repeated}, nil
}

// answerRecordOf is the answer of record rec as the API shows it.
func answerRecordOf(rec approvalstore.AnswerRecord) (AnswerRecord, error) {
	out := AnswerRecord{RunID: rec.RunID, Step: rec.Step, Round: rec.Round, Answerer: rec.Answerer, Role: Role(rec.Role),
		Note: rec.Note, AnsweredAt: rec.AnsweredAt, Via: rec.Via}
	if err := json.Unmarshal(rec.Answers, &out.Answers); err != nil {
		return AnswerRecord{}, fmt.Errorf("read the answer of record to step %d of run %s: %w", rec.Step, rec.RunID, err)
	}
	return out, nil
}

// mayAnswer says who may answer a round, in words.
func mayAnswer(tenant string, answerBy []string) string {
	if len(answerBy) == 0 {
		return "any approver or operator of " + tenant
	}
	return strings.Join(answerBy, ", ")
}

// pendingQuestions lists the tenant's rounds of questions that wait for an
// answer, the nearest deadline first.
func (s *Server) pendingQuestions(ctx context.Context, tenant string, now time.Time, limit int) ([]Item, error) {
	rows, err := approvalstore.ListQuestions(ctx, s.cfg.Pool, approvalstore.Page{Tenant: tenant, Now: now, Limit: limit})
	if err != nil {
		return nil, err
	}
	items := make([]Item, 0, len(rows))
	for _, q := range rows {
		items = append(items, questionItem(q, now))
	}
	return items, nil
}

// questionItem is a round of questions as the lists show it, at now.
func questionItem(q approvalstore.Question, now time.Time) Item {
	info := QuestionInfo{Round: q.Round, Server: q.Server, Key: q.Key, Items: q.Items, Live: q.Live, AnswerBy: q.AnswerBy,
		MayAnswer: mayAnswer(q.Tenant, q.AnswerBy)}
	it := Item{Kind: KindQuestion, RunID: q.RunID, Step: q.Step, Tool: q.Tool, Args: q.Args, ArgsHash: q.ArgsHash, Goal: q.Goal,
		ParentGoal: q.ParentGoal, Reason: "its server asks a person: " + questionSummary(q), RequestedBy: q.RequestedBy,
		RequestedAt: q.RequestedAt, Deadline: q.Deadline, State: q.State, Round: q.Round, Question: &info}
	if len(q.Lineage) > 0 {
		it.Lineage = q.Lineage
	}
	if q.State == approvalstore.QuestionPending {
		it.SecondsLeft = secondsLeft(now, q.Deadline)
	}
	return it
}

// questionSummary is what a round asks, in one line.
func questionSummary(q approvalstore.Question) string {
	parts := make([]string, 0, len(q.Items))
	for _, it := range q.Items {
		parts = append(parts, it.Message)
	}
	return strings.Join(parts, " / ")
}

// mergeByDeadline merges two lists sorted by deadline into one of at most
// limit items, the nearest deadline first.
func mergeByDeadline(a, b []Item, limit int) []Item {
	out := append(a, b...)
	slices.SortStableFunc(out, func(x, y Item) int {
		return cmp.Or(x.Deadline.Compare(y.Deadline), strings.Compare(x.RunID, y.RunID), cmp.Compare(x.Step, y.Step))
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}
