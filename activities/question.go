package activities

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/activity"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/questions"
)

// Question is a round of questions a tool's server asked a person during
// a step's call (an MCP server's elicitation): what it asked, the schema
// of each answer, who may answer and how long they have.
type Question = questions.Asked

// Reply is what a step's call sends back once its server's questions are
// answered: the answers and the server's request state.
type Reply = questions.Reply

// QuestionRequest records a round of questions a step's call was asked in
// its answer, for the step to wait on and a person to answer.
type QuestionRequest = approvalstore.QuestionRequest

// QuestionRecorded is the round a recorded request was numbered.
type QuestionRecorded struct {
	Round int `json:"round"`
}

// QuestionOutcome records what became of a round of questions.
type QuestionOutcome = approvalstore.QuestionOutcome

// RequestQuestion writes the pending round of a step's questions and
// returns its number. A retried request finds the round it wrote.
func (a *Activities) RequestQuestion(ctx context.Context, in QuestionRequest) (QuestionRecorded, error) {
	round, err := approvalstore.RecordQuestion(ctx, a.Pool, in)
	if err != nil {
		return QuestionRecorded{}, dataError(err)
	}
	a.log(ctx).Info("step waits for an answer to its server's questions", zap.String("tenant", in.Tenant),
		zap.String("run_id", in.RunID), zap.Int64("step", in.Step), zap.String("tool", in.Tool), zap.Int("round", round),
		zap.String("server", in.Server), zap.Time("deadline", in.Deadline))
	return QuestionRecorded{Round: round}, nil
}

// RecordQuestionOutcome records what became of a round of questions: its
// answer, or its expiry or withdrawal. A round no longer pending is left as
// it was.
func (a *Activities) RecordQuestionOutcome(ctx context.Context, in QuestionOutcome) error {
	pending, err := approvalstore.RecordQuestionOutcome(ctx, a.Pool, in)
	if err != nil {
		return dataError(err)
	}
	if !pending {
		a.log(ctx).Info("questions row not pending; its outcome left as it was", zap.String("tenant", in.Tenant),
			zap.String("run_id", in.RunID), zap.Int64("step", in.Step), zap.Int("round", in.Round), zap.String("state", in.State))
	}
	return nil
}

// livePoll is how often a live question's worker looks for its answer.
const livePoll = 500 * time.Millisecond

// liveHold is how long a live question's worker is taken for alive after
// it last renewed its hold on the round; it renews every sixth of it, at
// most as often as it polls (livePoll). A
// worker that dies (on whatever attempt of whatever step) leaves its round
// offered to people for at most liveHold.
const liveHold = 30 * time.Second

// askLive is how a step's call puts a question its server asks over the
// live session to a person: the round is recorded (live), and the call
// waits for its answer of record, which only this worker can give the
// server. Past the round's wait, the server is told the question was
// dismissed (cancel) and the round expires; a call that ends first (its
// worker stops, its attempt times out) loses the round.
func (a *Activities) askLive(in ToolInput, key keys.Key) questions.Live {
	return func(ctx context.Context, asked questions.Asked) (questions.Answers, error) {
		log := a.log(ctx).With(callFields(key)...)
		now := time.Now()
		req := approvalstore.QuestionRequest{
			Tenant: in.Tenant, RunID: in.RunID, Step: in.Step, AskID: "live/" + uuid.NewString(), Tool: in.Tool, Key: key.String(),
			Server: asked.Server, Args: in.Args, ArgsHash: in.ArgsHash, Items: asked.Items, Live: true, AnswerBy: asked.AnswerBy,
			RequestedAt: now, Deadline: now.Add(asked.Wait), Hold: a.liveHold(),
		}
		round, err := approvalstore.RecordQuestion(ctx, a.Pool, req)
		if err != nil {
			return nil, err
		}
		log.Info("a live question waits for a person", zap.Int("round", round), zap.String("question", asked.Summary()),
			zap.Time("deadline", req.Deadline))
		outcome := approvalstore.QuestionOutcome{Tenant: in.Tenant, RunID: in.RunID, Step: in.Step, Round: round}
		record := func(state, note string) {
			outcome.State, outcome.Note, outcome.At = state, note, time.Now()
			if _, err := approvalstore.RecordQuestionOutcome(context.WithoutCancel(ctx), a.Pool, outcome); err != nil {
				log.Error("the outcome of a live question could not be recorded", zap.Int("round", round), zap.Error(err))
			}
		}
		wait := time.NewTimer(time.Until(req.Deadline))
		defer wait.Stop()
		poll := time.NewTicker(livePoll)
		defer poll.Stop()
		renewed := time.Now()
		for held := true; ; {
			rec, err := approvalstore.AnswerOfRecord(ctx, a.Pool, in.Tenant, in.RunID, in.Step, round)
			if err == nil && rec == nil && !held {
				// The hold could not be renewed (it lapsed, or the round
				// is no longer pending) and no answer came: the round
				// reads lost, and no answer will be accepted.
				record(approvalstore.QuestionLost, "its hold lapsed: the worker could not renew it within "+a.liveHold().String())
				log.Warn("a live question's hold could not be renewed; it is lost", zap.Int("round", round))
				return nil, fmt.Errorf("round %d of the questions of step %d: %w", round, in.Step, errLiveQuestionGone)
			}
			if err == nil && rec != nil {
				var answers questions.Answers
				if err := json.Unmarshal(rec.Answers, &answers); err != nil {
					record(approvalstore.QuestionLost, "its answer of record could not be read: "+err.Error())
					return nil, fmt.Errorf("the answer of record to round %d: %w", round, err)
				}
				outcome.By, outcome.Answers, outcome.Note = rec.Answerer, answers, rec.Note
				record(approvalstore.QuestionAnswered, rec.Note)
				log.Info("a live question was answered", zap.Int("round", round), zap.String("by", rec.Answerer))
				return answers, nil
			}
			if err != nil {
				log.Warn("could not look for a live question's answer", zap.Int("round", round), zap.Error(err))
			}
			if activity.IsActivity(ctx) {
				activity.RecordHeartbeat(ctx)
			}
			if held && time.Since(renewed) >= a.liveHold()/6 {
				ok, err := approvalstore.RenewLiveQuestion(ctx, a.Pool, in.Tenant, in.RunID, in.Step, round, a.liveHold())
				switch {
				case err != nil:
					log.Warn("could not renew the hold on a live question", zap.Int("round", round), zap.Error(err))
				case !ok:
					held = false // look for an answer once more, then stop
					continue
				default:
					renewed = time.Now()
				}
			}
			select {
			case <-ctx.Done():
				record(approvalstore.QuestionLost, "the call that asked it ended before it was answered: "+context.Cause(ctx).Error())
				return nil, context.Cause(ctx)
			case <-wait.C:
				record(approvalstore.QuestionExpired, fmt.Sprintf("nobody answered within %s: the server was told the question was dismissed (cancel)", asked.Wait))
				log.Warn("a live question expired unanswered; the server is told cancel", zap.Int("round", round))
				return questions.Answers{questions.LiveItem: {Action: questions.ActionCancel}}, nil
			case <-poll.C:
			}
		}
	}
}

// errLiveQuestionGone: a live question stopped waiting before it was
// answered: its hold lapsed, or another attempt of the step took it over.
var errLiveQuestionGone = errors.New("the live question can no longer be answered: its hold lapsed, or another attempt of the step took it over")

// liveHold is how long a live question's hold lasts unrenewed.
func (a *Activities) liveHold() time.Duration {
	return cmp.Or(a.liveHoldFor, liveHold)
}

// loseLiveQuestions records, on a retry of a step's call (another
// attempt, or the call sent again with answers or after a person's
// resolution), and once the call's retries ran out (over), that the
// live questions an earlier attempt left pending can no longer be
// answered: the worker that held the server's session is gone. The first
// attempt of the step's first call has none, and skips the write.
func (a *Activities) loseLiveQuestions(ctx context.Context, in ToolInput, over bool) {
	if !activity.IsActivity(ctx) || a.Pool == nil {
		return
	}
	if info := activity.GetInfo(ctx); !over && info.Attempt <= 1 && !strings.Contains(info.ActivityID, "#") {
		return
	}
	n, err := approvalstore.LoseLiveQuestions(ctx, a.Pool, in.Tenant, in.RunID, in.Step, time.Now(),
		"the worker that held the server's session stopped before the question was answered: its answer can no longer reach the server")
	if err != nil {
		a.log(ctx).Warn("could not record an earlier attempt's live questions lost", zap.String("run_id", in.RunID),
			zap.Int64("step", in.Step), zap.Error(err))
		return
	}
	if n > 0 {
		a.log(ctx).Warn("an earlier attempt's live questions are lost with its worker", zap.String("tenant", in.Tenant),
			zap.String("run_id", in.RunID), zap.Int64("step", in.Step), zap.Int64("questions", n))
	}
}

// askedOf returns the questions a tool's error says its server asked.
func askedOf(err error) (*questions.Asked, bool) {
	var ae *questions.AskedError
	if !errors.As(err, &ae) {
		return nil, false
	}
	return &ae.Asked, true
}
