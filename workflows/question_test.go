package workflows

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/questions"
	"github.com/oncerun/oncerun/tools"
)

// asking fakes the activities of the questions path, and makes RunTool
// answer with a question until a reply comes (rounds of them: one more
// question per reply, up to rounds).
type asking struct {
	mu       sync.Mutex
	requests []activities.QuestionRequest
	outcomes []activities.QuestionOutcome
	rounds   int
	// recordTime is how long each RequestQuestion takes.
	recordTime time.Duration
}

// shirt is the question a server asks: which size.
func shirt(state string) *activities.Question {
	return &activities.Question{Server: "shop", State: state, AnswerBy: []string{"dana@acme"}, Items: []questions.Item{{
		ID: "size", Mode: questions.ModeForm, Message: "Which size?", Schema: json.RawMessage(`{"type":"object","properties":{"size":{"type":"string"}}}`),
	}}}
}

func withQuestions(h *harness, rounds int) *asking {
	q := &asking{rounds: rounds}
	h.env.OnActivity(a.RequestQuestion, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.QuestionRequest) (activities.QuestionRecorded, error) {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.requests = append(q.requests, in)
			return activities.QuestionRecorded{Round: len(q.requests)}, nil
		}).AfterFn(func() time.Duration { return q.recordTime })
	h.env.OnActivity(a.RecordQuestionOutcome, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.QuestionOutcome) error {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.outcomes = append(q.outcomes, in)
			return nil
		})
	h.onQuestion = func(in activities.ToolInput) *activities.Question {
		if in.Tool != "shop_order_shirt" {
			return nil
		}
		asked := 0
		if in.Reply != nil {
			_, _ = fmt.Sscanf(in.Reply.State, "round %d", &asked)
		}
		if asked >= rounds {
			return nil
		}
		return shirt(fmt.Sprintf("round %d", asked+1))
	}
	return q
}

func (h *harness) answerAt(d time.Duration, a Answer) {
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(SignalAnswer, a) }, d)
}

func sizeAnswer(size string) map[string]QuestionAnswer {
	return map[string]QuestionAnswer{"size": {Action: questions.ActionAccept, Content: json.RawMessage(`{"size":"` + size + `"}`)}}
}

// A step whose server asks waits, for days if need be, with the run
// waiting for input; the answer is sent back with the server's state, in
// an activity of its own, under the step's key; then the step is done.
func TestAStepWhoseServerAsksWaitsForAnAnswerAndSendsItBack(t *testing.T) {
	t.Parallel()
	c := call("shop_order_shirt", `{}`, tools.ClassExternal)
	h := setup(t, c)
	q := withQuestions(h, 1)
	during := h.queryAt(t, 2*day)
	h.answerAt(3*day, Answer{Step: 1, Round: 1, Answers: sizeAnswer("M"), Answerer: "dana@acme", Note: "she said M"})

	st := h.run(t, modelRun())

	assert.Equal(t, RunWaitingForInput, during.State)
	require.Len(t, during.Steps, 1)
	assert.Equal(t, StepWaitingForInput, during.Steps[0].State)
	require.Len(t, during.Steps[0].Questions, 1)
	assert.Equal(t, QuestionPending, during.Steps[0].Questions[0].State)

	tc := h.toolCalls()
	require.Len(t, tc, 2, "asked once, sent again once answered")
	assert.Nil(t, tc[0].In.Reply)
	require.NotNil(t, tc[1].In.Reply)
	assert.Equal(t, activities.Reply{Answers: sizeAnswer("M"), State: "round 1"}, *tc[1].In.Reply, "the answers and the server's state")
	assert.Equal(t, 3*day, tc[1].At.Sub(t0), "sent only once answered")
	k := key(t, 1, "shop_order_shirt")
	assert.Equal(t, []string{k, k + "#input1"}, h.startedIDs("RunTool"), "the answer is sent in an activity of its own")

	require.Len(t, q.requests, 1)
	r := q.requests[0]
	assert.Equal(t, "shop", r.Server)
	assert.Equal(t, k, r.Key)
	assert.Equal(t, []string{"dana@acme"}, r.AnswerBy)
	assert.Equal(t, "run/1", r.AskID)
	assert.Equal(t, t0.Add(DefaultApprovalDeadline), r.Deadline, "a question waits as long as an approval")
	require.Len(t, q.outcomes, 1)
	assert.Equal(t, activities.QuestionOutcome{Tenant: testTenant, RunID: testRunID, Step: 1, Round: 1, State: QuestionAnswered,
		By: "dana@acme", At: t0.Add(3 * day), Answers: sizeAnswer("M"), Note: "she said M"}, q.outcomes[0])

	s := st.Steps[0]
	assert.Equal(t, StepDone, s.State)
	require.Len(t, s.Questions, 1)
	assert.Equal(t, StepQuestion{Round: 1, Server: "shop", Items: shirt("").Items, AnswerBy: []string{"dana@acme"}, RequestedAt: t0,
		Deadline: t0.Add(DefaultApprovalDeadline), State: QuestionAnswered, Answers: sizeAnswer("M"), Answerer: "dana@acme",
		Note: "she said M", AnsweredAt: t0.Add(3 * day)}, s.Questions[0])
	assert.Equal(t, RunCompleted, st.State)
}

// A server that asks again after an answer is asked again: a round of its
// own, answered in turn.
func TestAServerThatAsksAgainGetsAnotherRound(t *testing.T) {
	t.Parallel()
	h := setup(t, call("shop_order_shirt", `{}`, tools.ClassExternal))
	q := withQuestions(h, 2)
	h.answerAt(time.Hour, Answer{Step: 1, Round: 1, Answers: sizeAnswer("M"), Answerer: "dana@acme"})
	h.answerAt(2*time.Hour, Answer{Step: 1, Round: 2, Answers: sizeAnswer("L"), Answerer: "dana@acme"})

	st := h.run(t, modelRun())

	k := key(t, 1, "shop_order_shirt")
	assert.Equal(t, []string{k, k + "#input1", k + "#input2"}, h.startedIDs("RunTool"))
	require.Len(t, q.requests, 2)
	assert.Equal(t, []string{"run/1", "run/2"}, []string{q.requests[0].AskID, q.requests[1].AskID})
	assert.Equal(t, StepDone, st.Steps[0].State)
	assert.Len(t, st.Steps[0].Questions, 2)
}

// Nobody answers before the deadline: the step expires, having completed
// nothing, and nothing is sent again.
func TestAnUnansweredQuestionExpiresAtItsDeadline(t *testing.T) {
	t.Parallel()
	h := setup(t, call("shop_order_shirt", `{}`, tools.ClassExternal))
	q := withQuestions(h, 1)
	h.onQuestion = func(in activities.ToolInput) *activities.Question {
		s := shirt("round 1")
		s.Wait = 36 * time.Hour // the configuration's
		return s
	}

	st := h.run(t, modelRun())

	assert.Len(t, h.toolCalls(), 1)
	s := st.Steps[0]
	assert.Equal(t, StepExpired, s.State)
	assert.Contains(t, s.Error, "nobody answered its server's questions before the deadline")
	require.Len(t, s.Questions, 1)
	assert.Equal(t, QuestionExpired, s.Questions[0].State)
	assert.Equal(t, t0.Add(36*time.Hour), s.Questions[0].Deadline, "the wait the configuration gives")
	require.Len(t, q.outcomes, 1)
	assert.Equal(t, QuestionExpired, q.outcomes[0].State)
	assert.Equal(t, t0.Add(36*time.Hour), q.outcomes[0].At)
}

// A server that asks round after round is stopped after MaxRounds.
func TestAStepAskedTooManyRoundsFails(t *testing.T) {
	t.Parallel()
	h := setup(t, call("shop_order_shirt", `{}`, tools.ClassExternal))
	withQuestions(h, questions.MaxRounds+5)
	for i := 1; i <= questions.MaxRounds; i++ {
		h.answerAt(time.Duration(i)*time.Hour, Answer{Step: 1, Round: i, Answers: sizeAnswer("S"), Answerer: "dana@acme"})
	}

	st := h.run(t, modelRun())

	s := st.Steps[0]
	assert.Equal(t, StepFailed, s.State)
	assert.Contains(t, s.Error, "asked 10 rounds of questions and asks again")
	assert.Len(t, s.Questions, questions.MaxRounds)
	assert.Len(t, h.toolCalls(), questions.MaxRounds+1)
}

// A cancel of the run withdraws the questions: the step is cancelled,
// having completed nothing, and an answer sent after changes nothing.
func TestACancelWithdrawsTheQuestions(t *testing.T) {
	t.Parallel()
	h := setup(t, call("shop_order_shirt", `{}`, tools.ClassExternal))
	q := withQuestions(h, 1)
	h.updateAt(time.Hour, UpdateCancel, Control{By: "ops@acme", Reason: "customer left"})
	h.answerAt(2*time.Hour, Answer{Step: 1, Round: 1, Answers: sizeAnswer("M"), Answerer: "dana@acme"})

	st := h.run(t, modelRun())

	assert.Len(t, h.toolCalls(), 1, "nothing sent after the cancel")
	s := st.Steps[0]
	assert.Equal(t, StepCancelled, s.State)
	assert.Contains(t, s.Error, "questions withdrawn")
	require.Len(t, q.outcomes, 1)
	assert.Equal(t, QuestionCancelled, q.outcomes[0].State)
	assert.Equal(t, "ops@acme", q.outcomes[0].By)
	assert.Equal(t, RunCancelled, st.State)
}

// Answers that do not apply change nothing: another round, a step asked
// nothing, no such step, an answer that leaves a question out, one with an
// action that is not one.
func TestAnswerSignalsThatDoNotApplyChangeNothing(t *testing.T) {
	t.Parallel()
	h := setup(t, lookup("o-1"), call("shop_order_shirt", `{}`, tools.ClassExternal))
	withQuestions(h, 1)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(SignalAnswer, Answer{Step: 1, Round: 1, Answers: sizeAnswer("M"), Answerer: "eve"}) // asked nothing
		h.env.SignalWorkflow(SignalAnswer, Answer{Step: 3, Round: 1, Answers: sizeAnswer("M"), Answerer: "eve"}) // no such step
		h.env.SignalWorkflow(SignalAnswer, Answer{Step: 2, Round: 2, Answers: sizeAnswer("M"), Answerer: "eve"}) // another round
		h.env.SignalWorkflow(SignalAnswer, Answer{Step: 2, Round: 1, Answers: map[string]QuestionAnswer{"colour": {Action: "accept"}},
			Answerer: "eve"}) // leaves size out
		h.env.SignalWorkflow(SignalAnswer, Answer{Step: 2, Round: 1, Answers: map[string]QuestionAnswer{"size": {Action: "maybe"}},
			Answerer: "eve"}) // no such action
		h.env.SignalWorkflow(SignalAnswer, Answer{Step: 2, Round: 1, Answers: sizeAnswer("S")}) // nobody named
	}, time.Hour)
	during := h.queryAt(t, 2*time.Hour)
	h.answerAt(3*time.Hour, Answer{Step: 2, Round: 1, Answers: sizeAnswer("L"), Answerer: "dana@acme"})
	h.answerAt(4*time.Hour, Answer{Step: 2, Round: 1, Answers: sizeAnswer("S"), Answerer: "eve"}) // after the answer

	st := h.run(t, modelRun())

	assert.Equal(t, StepWaitingForInput, during.Steps[1].State, "none of them answered")
	s := st.Steps[1]
	assert.Equal(t, StepDone, s.State)
	assert.Equal(t, "dana@acme", s.Questions[0].Answerer)
	assert.Equal(t, sizeAnswer("L"), s.Questions[0].Answers)
	assert.Equal(t, 3*time.Hour, s.Questions[0].AnsweredAt.Sub(t0))
}

// An answer that reaches the run while its round is still being recorded
// (the inbox lists the round as soon as its row commits) is kept, and
// applied once the round's number is known.
func TestAnAnswerThatComesWhileTheRoundIsRecordedIsKept(t *testing.T) {
	t.Parallel()
	h := setup(t, call("shop_order_shirt", `{}`, tools.ClassExternal))
	q := withQuestions(h, 1)
	q.recordTime = time.Minute
	h.answerAt(30*time.Second, Answer{Step: 1, Round: 1, Answers: sizeAnswer("S"), Answerer: "dana@acme"})

	st := h.run(t, modelRun())

	s := st.Steps[0]
	require.Equal(t, StepDone, s.State, s.Error)
	assert.Equal(t, "dana@acme", s.Questions[0].Answerer)
	assert.Len(t, h.toolCalls(), 2, "asked, then sent with the answer")
}

// A cancel that comes while the call runs withdraws the questions its
// server then asks: nobody is asked, nothing is sent again.
func TestACancelWhileTheCallRunsWithdrawsItsQuestions(t *testing.T) {
	t.Parallel()
	h := setup(t, call("shop_order_shirt", `{}`, tools.ClassExternal))
	q := withQuestions(h, 1)
	h.toolTime = time.Hour
	h.updateAt(time.Minute, UpdateCancel, Control{By: "ops@acme", Reason: "customer left"})

	st := h.run(t, modelRun())

	s := st.Steps[0]
	assert.Equal(t, StepCancelled, s.State)
	assert.Contains(t, s.Error, "questions withdrawn")
	assert.Empty(t, q.requests, "nobody was asked")
	assert.Len(t, h.toolCalls(), 1)
	assert.Equal(t, RunCancelled, st.State)
}
