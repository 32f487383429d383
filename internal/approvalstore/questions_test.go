package approvalstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/questions"
)

// sizeQuestion asks which size, one of S, M or L.
var sizeQuestion = questions.Item{ID: "size", Mode: questions.ModeForm, Message: "Which size?",
	Schema: json.RawMessage(`{"type":"object","properties":{"size":{"type":"string","enum":["S","M","L"]}},"required":["size"]}`)}

// asked is round 1 of step 2 of run r1 of tenant acme: the shop's server
// asks which size, for dana only, until t0 + 48h.
func asked() approvalstore.QuestionRequest {
	return approvalstore.QuestionRequest{Tenant: "acme", RunID: "r1", Step: 2, AskID: "run/1", Tool: "shop_order_shirt",
		Key: "v1/acme/r1/2/shop_order_shirt", Server: "shop", Args: json.RawMessage(`{"sku":"tee"}`), ArgsHash: hashA, Goal: "a shirt",
		Items: []questions.Item{sizeQuestion}, AnswerBy: []string{"dana"}, RequestedBy: "ops", RequestedAt: t0, Deadline: t0.Add(48 * time.Hour)}
}

func setupAsked(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.NewPool(t, 4)
	round, err := approvalstore.RecordQuestion(context.Background(), pool, asked())
	require.NoError(t, err)
	require.Equal(t, 1, round)
	return pool
}

// danasAnswer is dana's answer: M, an hour after the question.
func danasAnswer() approvalstore.AnswerRequest {
	return approvalstore.AnswerRequest{
		StepRequest: approvalstore.StepRequest{Tenant: "acme", RunID: "r1", Step: 2, By: "dana", Role: "approver", May: true,
			RemoteAddr: "127.0.0.1", Via: approvalstore.ViaAPI},
		Answers: questions.Answers{"size": {Action: questions.ActionAccept, Content: json.RawMessage(`{"size":"M"}`)}},
		Note:    "she wears M", Now: t0.Add(time.Hour),
	}
}

func answered(t *testing.T, pool *pgxpool.Pool, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM question_answers WHERE run_id = 'r1' AND `+where, args...).Scan(&n))
	return n
}

// A round is numbered the step's next; the same request again finds it.
func TestRecordQuestionNumbersRoundsAndFindsARepeat(t *testing.T) {
	t.Parallel()
	pool := setupAsked(t)
	ctx := context.Background()
	again, err := approvalstore.RecordQuestion(ctx, pool, asked())
	require.NoError(t, err)
	assert.Equal(t, 1, again, "a repeat finds its round")
	next := asked()
	next.AskID = "run/2"
	round, err := approvalstore.RecordQuestion(ctx, pool, next)
	require.NoError(t, err)
	assert.Equal(t, 2, round)
	other := asked()
	other.Step = 3
	round, err = approvalstore.RecordQuestion(ctx, pool, other)
	require.NoError(t, err)
	assert.Equal(t, 1, round, "rounds are the step's")

	q, err := approvalstore.LookupQuestion(ctx, pool, "acme", "r1", 2, 0)
	require.NoError(t, err)
	assert.Equal(t, 2, q.Round, "round 0 is the latest")
	require.Len(t, q.Items, 1)
	assert.JSONEq(t, string(sizeQuestion.Schema), string(q.Items[0].Schema), "the schema, as jsonb keeps it")
	q.Items[0].Schema = sizeQuestion.Schema
	assert.Equal(t, []questions.Item{sizeQuestion}, q.Items)
	assert.Equal(t, []string{"dana"}, q.AnswerBy)
	assert.Equal(t, approvalstore.QuestionPending, q.State)
}

// Rounds of one step asked at once each get a number of their own.
func TestRoundsAskedAtOnceGetNumbersOfTheirOwn(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 8)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		rounds []int
	)
	for i := range 6 {
		wg.Go(func() {
			q := asked()
			q.AskID = "live/" + string(rune('a'+i))
			round, err := approvalstore.RecordQuestion(context.Background(), pool, q)
			assert.NoError(t, err)
			mu.Lock()
			rounds = append(rounds, round)
			mu.Unlock()
		})
	}
	wg.Wait()
	assert.ElementsMatch(t, []int{1, 2, 3, 4, 5, 6}, rounds)
}

// Each refusal is its sentinel error and leaves the row the order of the
// checks calls for.
func TestAnswerRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		change  func(*approvalstore.AnswerRequest)
		want    error
		outcome string // "" for no row
	}{
		{"another tenant's step", func(r *approvalstore.AnswerRequest) { r.Tenant = "globex" }, approvalstore.ErrNotFound, ""},
		{"a step asked nothing", func(r *approvalstore.AnswerRequest) { r.Step = 3 }, approvalstore.ErrNotFound, ""},
		{"a run id no key can hold", func(r *approvalstore.AnswerRequest) { r.RunID = "" }, approvalstore.ErrNotFound, ""},
		{"a role that may not answer", func(r *approvalstore.AnswerRequest) { r.May = false }, approvalstore.ErrForbidden, approvalstore.OutcomeForbidden},
		{"someone the round does not name", func(r *approvalstore.AnswerRequest) { r.By = "olga" }, approvalstore.ErrForbidden, approvalstore.OutcomeForbidden},
		{"a value the schema refuses", func(r *approvalstore.AnswerRequest) {
			r.Answers["size"] = questions.Answer{Action: questions.ActionAccept, Content: json.RawMessage(`{"size":"XXL"}`)}
		}, approvalstore.ErrInvalid, approvalstore.OutcomeInvalid},
		{"a question left out", func(r *approvalstore.AnswerRequest) {
			r.Answers = questions.Answers{"colour": {Action: questions.ActionDecline}}
		}, approvalstore.ErrInvalid, approvalstore.OutcomeInvalid},
		{"content with a decline", func(r *approvalstore.AnswerRequest) {
			r.Answers["size"] = questions.Answer{Action: questions.ActionDecline, Content: json.RawMessage(`{"size":"M"}`)}
		}, approvalstore.ErrInvalid, approvalstore.OutcomeInvalid},
		{"an accept without content", func(r *approvalstore.AnswerRequest) {
			r.Answers["size"] = questions.Answer{Action: questions.ActionAccept}
		}, approvalstore.ErrInvalid, approvalstore.OutcomeInvalid},
		{"a note with a control character", func(r *approvalstore.AnswerRequest) { r.Note = "a\x00b" }, approvalstore.ErrInvalid, approvalstore.OutcomeInvalid},
		{"a round the step does not have", func(r *approvalstore.AnswerRequest) { r.Round = 4 }, approvalstore.ErrNotPending, approvalstore.OutcomeNotPending},
		{"after the deadline", func(r *approvalstore.AnswerRequest) { r.Now = t0.Add(49 * time.Hour) }, approvalstore.ErrNotPending, approvalstore.OutcomeNotPending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := setupAsked(t)
			r := danasAnswer()
			tc.change(&r)
			_, err := approvalstore.Answer(context.Background(), pool, r)
			require.ErrorIs(t, err, tc.want)
			if tc.outcome == "" {
				assert.Zero(t, answered(t, pool, "true"))
				return
			}
			assert.Equal(t, 1, answered(t, pool, "true"))
			assert.Equal(t, 1, answered(t, pool, "outcome = $1", tc.outcome))
		})
	}
}

// The first answer is the answer of record, and the run is to hear of it;
// the same again is a repeat; another is a conflict; once the run recorded
// the round, a repeat is not sent again. A local request (the CLI) may
// answer whoever the round names.
func TestAnswerRecordsOneAnswerOfRecord(t *testing.T) {
	t.Parallel()
	pool := setupAsked(t)
	ctx := context.Background()

	res, err := approvalstore.Answer(ctx, pool, danasAnswer())
	require.NoError(t, err)
	assert.True(t, res.Deliver)
	assert.False(t, res.Repeated)
	assert.False(t, res.Live)
	assert.Equal(t, 1, res.Record.Round)
	assert.JSONEq(t, `{"size":{"action":"accept","content":{"size":"M"}}}`, string(res.Record.Answers))

	res, err = approvalstore.Answer(ctx, pool, danasAnswer())
	require.NoError(t, err)
	assert.True(t, res.Repeated)
	assert.True(t, res.Deliver, "still pending: sent again")

	other := danasAnswer()
	other.Answers["size"] = questions.Answer{Action: questions.ActionAccept, Content: json.RawMessage(`{"size":"L"}`)}
	_, err = approvalstore.Answer(ctx, pool, other)
	require.ErrorIs(t, err, approvalstore.ErrConflict)
	assert.Contains(t, err.Error(), "already answered by dana")

	done, err := approvalstore.RecordQuestionOutcome(ctx, pool, approvalstore.QuestionOutcome{Tenant: "acme", RunID: "r1", Step: 2, Round: 1,
		State: approvalstore.QuestionAnswered, By: "dana", At: t0.Add(2 * time.Hour), Answers: danasAnswer().Answers})
	require.NoError(t, err)
	assert.True(t, done)
	res, err = approvalstore.Answer(ctx, pool, danasAnswer())
	require.NoError(t, err)
	assert.True(t, res.Repeated)
	assert.False(t, res.Deliver, "the run has it")

	q, err := approvalstore.LookupQuestion(ctx, pool, "acme", "r1", 2, 1)
	require.NoError(t, err)
	assert.Equal(t, approvalstore.QuestionAnswered, q.State)
	assert.Equal(t, "dana", q.AnsweredBy)
	assert.JSONEq(t, `{"size":{"action":"accept","content":{"size":"M"}}}`, string(q.Answers))

	assert.Equal(t, 1, answered(t, pool, "outcome = 'accepted'"))
	assert.Equal(t, 2, answered(t, pool, "outcome = 'repeated'"))
	assert.Equal(t, 1, answered(t, pool, "outcome = 'conflict'"))
}

// A round of one question may be answered with one action, whatever the
// question's id; a round of two may not.
func TestAnswerTheOnlyQuestion(t *testing.T) {
	t.Parallel()
	pool := setupAsked(t)
	ctx := context.Background()
	r := danasAnswer()
	r.Answers, r.Only = nil, &questions.Answer{Action: questions.ActionAccept, Content: json.RawMessage(`{"size":"S"}`)}
	res, err := approvalstore.Answer(ctx, pool, r)
	require.NoError(t, err)
	assert.JSONEq(t, `{"size":{"action":"accept","content":{"size":"S"}}}`, string(res.Record.Answers))

	two := asked()
	two.Step, two.Items = 5, []questions.Item{sizeQuestion, {ID: "colour", Mode: questions.ModeForm, Message: "Which colour?",
		Schema: json.RawMessage(`{"type":"object"}`)}}
	_, err = approvalstore.RecordQuestion(ctx, pool, two)
	require.NoError(t, err)
	r.Step = 5
	_, err = approvalstore.Answer(ctx, pool, r)
	require.ErrorIs(t, err, approvalstore.ErrInvalid)
	assert.Contains(t, err.Error(), `round 1 asks 2 questions ("size", "colour"): answer each by its id`)
}

// A live question's answer is left for its worker: the run is not
// signalled. Once lost with its worker, it can no longer be answered.
func TestALiveQuestionIsAnsweredThroughTheTableAndLostWithItsWorker(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 4)
	ctx := context.Background()
	live := asked()
	live.AskID, live.Live, live.AnswerBy = "live/1", true, nil
	_, err := approvalstore.RecordQuestion(ctx, pool, live)
	require.NoError(t, err)
	r := danasAnswer()
	r.By = "olga" // anyone may: the round names nobody
	res, err := approvalstore.Answer(ctx, pool, r)
	require.NoError(t, err)
	assert.True(t, res.Live)
	assert.False(t, res.Deliver, "its worker reads it from the table")
	rec, err := approvalstore.AnswerOfRecord(ctx, pool, "acme", "r1", 2, 1)
	require.NoError(t, err)
	require.NotNil(t, rec)
	assert.Equal(t, "olga", rec.Answerer)

	live.AskID = "live/2"
	_, err = approvalstore.RecordQuestion(ctx, pool, live)
	require.NoError(t, err)
	n, err := approvalstore.LoseLiveQuestions(ctx, pool, "acme", "r1", 2, t0.Add(time.Minute), "the worker stopped")
	require.NoError(t, err)
	assert.EqualValues(t, 2, n, "both were pending")
	_, err = approvalstore.Answer(ctx, pool, r)
	require.ErrorIs(t, err, approvalstore.ErrNotPending)
	assert.Contains(t, err.Error(), "the round is lost")
}

// The pending list holds the rounds that wait: pending, unanswered,
// deadline ahead; the nearest deadline first.
func TestListQuestionsListsWhatWaits(t *testing.T) {
	t.Parallel()
	pool := setupAsked(t)
	ctx := context.Background()
	soon := asked()
	soon.Step, soon.Deadline = 4, t0.Add(time.Hour)
	_, err := approvalstore.RecordQuestion(ctx, pool, soon)
	require.NoError(t, err)
	gone := asked()
	gone.Step, gone.Deadline = 6, t0.Add(time.Minute)
	_, err = approvalstore.RecordQuestion(ctx, pool, gone)
	require.NoError(t, err)
	answeredOne := asked()
	answeredOne.Step = 7
	_, err = approvalstore.RecordQuestion(ctx, pool, answeredOne)
	require.NoError(t, err)
	r := danasAnswer()
	r.Step = 7
	_, err = approvalstore.Answer(ctx, pool, r)
	require.NoError(t, err)

	list, err := approvalstore.ListQuestions(ctx, pool, approvalstore.Page{Tenant: "acme", Now: t0.Add(30 * time.Minute), Limit: 10})
	require.NoError(t, err)
	var steps []int64
	for _, q := range list {
		steps = append(steps, q.Step)
	}
	assert.Equal(t, []int64{4, 2}, steps, "6 is past its deadline, 7 answered")
}

// A live round whose worker stopped renewing its hold reads lost whatever
// step it belongs to and however that step's retries ended: the lists stop
// offering it, an answer is refused and writes the loss down, and a
// renewal after the lapse is refused too. A round renewed in time stays
// offered, as does one recorded without a hold (before holds were kept).
func TestALiveQuestionWhoseHoldLapsedIsLost(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 4)
	ctx := context.Background()
	live := asked()
	live.Live, live.AnswerBy = true, nil
	for step, hold := range map[int64]time.Duration{2: time.Second, 3: 3 * time.Second, 4: 0} {
		live.Step, live.AskID, live.Hold = step, fmt.Sprintf("live/%d", step), hold
		_, err := approvalstore.RecordQuestion(ctx, pool, live)
		require.NoError(t, err)
	}
	for range 3 {
		time.Sleep(time.Second)
		ok, err := approvalstore.RenewLiveQuestion(ctx, pool, "acme", "r1", 3, 1, 3*time.Second)
		require.NoError(t, err)
		require.True(t, ok, "step 3's worker renews in time")
	}

	now := t0.Add(time.Minute)
	list, err := approvalstore.ListQuestions(ctx, pool, approvalstore.Page{Tenant: "acme", Now: now, Limit: 10})
	require.NoError(t, err)
	steps := func(qs []approvalstore.Question) []int64 {
		var out []int64
		for _, q := range qs {
			out = append(out, q.Step)
		}
		slices.Sort(out)
		return out
	}
	assert.Equal(t, []int64{3, 4}, steps(list), "step 2's hold lapsed")
	pending, err := approvalstore.PendingQuestions(ctx, pool, "", now)
	require.NoError(t, err)
	assert.Equal(t, []int64{3, 4}, steps(pending))
	q, err := approvalstore.LookupQuestion(ctx, pool, "acme", "r1", 2, 0)
	require.NoError(t, err)
	assert.Equal(t, approvalstore.QuestionLost, q.State)
	assert.Contains(t, q.Note, "stopped renewing its hold")

	r := danasAnswer()
	r.Step, r.Now = 2, now
	_, err = approvalstore.Answer(ctx, pool, r)
	require.ErrorIs(t, err, approvalstore.ErrNotPending)
	assert.Contains(t, err.Error(), "the round is lost: the worker that held the session")
	var state string
	require.NoError(t, pool.QueryRow(ctx, `SELECT state FROM questions WHERE step = 2`).Scan(&state))
	assert.Equal(t, approvalstore.QuestionLost, state, "the answer wrote the loss down")
	ok, err := approvalstore.RenewLiveQuestion(ctx, pool, "acme", "r1", 2, 1, time.Second)
	require.NoError(t, err)
	assert.False(t, ok)

	r.Step = 3
	_, err = approvalstore.Answer(ctx, pool, r)
	require.NoError(t, err, "step 3's round is still held")
}
