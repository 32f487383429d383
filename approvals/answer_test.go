package approvals

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/questions"
	"github.com/oncerun/oncerun/workflows"
)

// answerCount counts the rows of question_answers of run r1 that match
// where.
func (e *apiEnv) answerCount(t *testing.T, where string) int {
	t.Helper()
	var n int
	require.NoError(t, e.Pool.QueryRow(t.Context(), `SELECT count(*) FROM question_answers WHERE run_id = 'r1' AND `+where).Scan(&n))
	return n
}

// An approver answers a step's question: 202 with the answer of record,
// the run is signalled the answers, and the request is audited; the same
// answer again is 200 and repeated; another is 409.
func TestAnswerAPIRecordsAndSendsTheAnswer(t *testing.T) {
	t.Parallel()
	e := setupAPI(t)
	e.Asked("r1", 2, false)

	status, _, body := e.Call("dana", http.MethodPost, "/v1/runs/r1/steps/2/answer",
		`{"action": "accept", "content": {"size": "M"}, "note": "she wears M"}`)
	require.Equal(t, http.StatusAccepted, status, body)
	var res AnswerResponse
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	assert.False(t, res.Repeated)
	rec := res.Answer
	assert.Equal(t, "r1", rec.RunID)
	assert.EqualValues(t, 2, rec.Step)
	assert.Equal(t, 1, rec.Round)
	assert.Equal(t, "dana", rec.Answerer)
	assert.Equal(t, RoleApprover, rec.Role)
	assert.Equal(t, "api", rec.Via)
	assert.Equal(t, "she wears M", rec.Note)
	require.Contains(t, rec.Answers, "size", "the round's only question, by its id")
	assert.Equal(t, questions.ActionAccept, rec.Answers["size"].Action)
	assert.JSONEq(t, `{"size":"M"}`, string(rec.Answers["size"].Content))

	sent := e.Temporal.Answers()
	require.Len(t, sent, 1)
	assert.JSONEq(t, `{"size":"M"}`, string(sent[0].Answers["size"].Content))
	sent[0].Answers = nil
	assert.Equal(t, workflows.Answer{Step: 2, Round: 1, Answerer: "dana", Note: "she wears M"}, sent[0])

	status, _, body = e.Call("ops", http.MethodPost, "/v1/runs/r1/steps/2/answer", `{"answers": {"size": {"action": "accept", "content": {"size": "M"}}}}`)
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	assert.True(t, res.Repeated)
	assert.Equal(t, "dana", res.Answer.Answerer, "the answer of record")

	status, _, body = e.Call("ops", http.MethodPost, "/v1/runs/r1/steps/2/answer", `{"action": "decline"}`)
	require.Equal(t, http.StatusConflict, status, body)
	assert.Contains(t, errorOf(t, body).Message, "already answered by dana")

	assert.Equal(t, 1, e.answerCount(t, "outcome = 'accepted'"))
	assert.Equal(t, 1, e.answerCount(t, "outcome = 'repeated'"))
	assert.Equal(t, 1, e.answerCount(t, "outcome = 'conflict'"))
}

// Each refusal has its status and code, and an audit row unless it names
// no step of the tenant.
func TestAnswerAPIRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, who, path, body string
		status                int
		code, message         string
		audited               string // the row's outcome; "" for none
	}{
		{"a value the schema refuses", "dana", "/v1/runs/r1/steps/2/answer", `{"action": "accept", "content": {"size": "XXL"}}`,
			http.StatusBadRequest, "invalid_request", "answers.size: content does not match the question's schema: at /size", "invalid"},
		{"an action that is none", "dana", "/v1/runs/r1/steps/2/answer", `{"action": "maybe"}`,
			http.StatusBadRequest, "invalid_request", `action "maybe" is not accept, decline or cancel`, "invalid"},
		{"an accept without content", "dana", "/v1/runs/r1/steps/2/answer", `{"action": "accept"}`,
			http.StatusBadRequest, "invalid_request", "content is required to accept a form question", "invalid"},
		{"a question the round does not ask", "dana", "/v1/runs/r1/steps/2/answer", `{"answers": {"colour": {"action": "decline"}}}`,
			http.StatusBadRequest, "invalid_request", `question "colour" is not asked`, "invalid"},
		{"a body that is not JSON", "dana", "/v1/runs/r1/steps/2/answer", `size=M`,
			http.StatusBadRequest, "invalid_request", "the request body is not valid", "invalid"},
		{"a field it does not know", "dana", "/v1/runs/r1/steps/2/answer", `{"action": "decline", "sizes": "M"}`,
			http.StatusBadRequest, "invalid_request", "sizes", "invalid"},
		{"a viewer", "vic", "/v1/runs/r1/steps/2/answer", `{"action": "decline"}`,
			http.StatusForbidden, "forbidden", "vic is a viewer", "forbidden"},
		{"a step that was asked nothing", "dana", "/v1/runs/r1/steps/3/answer", `{"action": "decline"}`,
			http.StatusNotFound, "not_found", "has no step 3 that was asked a question", ""},
		{"another tenant's step", "omar", "/v1/runs/r1/steps/2/answer", `{"action": "decline"}`,
			http.StatusNotFound, "not_found", "has no step 2 that was asked a question", ""},
		{"a round the step does not have", "dana", "/v1/runs/r1/steps/2/answer", `{"action": "decline", "round": 3}`,
			http.StatusNotFound, "not_found", "has no round 3", "not_pending"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setupAPI(t)
			e.Asked("r1", 2, false)
			status, _, body := e.Call(tc.who, http.MethodPost, tc.path, tc.body)
			require.Equal(t, tc.status, status, body)
			detail := errorOf(t, body)
			assert.Equal(t, tc.code, detail.Code)
			assert.Contains(t, detail.Message, tc.message)
			if tc.audited == "" {
				assert.Zero(t, e.answerCount(t, "true"))
			} else {
				assert.Equal(t, 1, e.answerCount(t, "outcome = '"+tc.audited+"'"))
			}
			assert.Empty(t, e.Temporal.Answers(), "nothing reached the run")
		})
	}
}

// A round that names who may answer refuses an approver it does not name,
// saying whom it is for.
func TestAnswerAPIKeepsARoundToThoseItNames(t *testing.T) {
	t.Parallel()
	e := setupAPI(t)
	e.Asked("r1", 2, false, "ops")
	status, _, body := e.Call("dana", http.MethodPost, "/v1/runs/r1/steps/2/answer", `{"action": "accept", "content": {"size": "S"}}`)
	require.Equal(t, http.StatusForbidden, status, body)
	assert.Contains(t, errorOf(t, body).Message, "dana may not answer the questions of step 2 of run r1: they are for ops")
	assert.Equal(t, 1, e.answerCount(t, "outcome = 'forbidden'"))

	status, _, body = e.Call("ops", http.MethodPost, "/v1/runs/r1/steps/2/answer", `{"action": "accept", "content": {"size": "S"}}`)
	require.Equal(t, http.StatusAccepted, status, body)
}

// A live question's answer is recorded for the worker that holds the
// server's session, which reads it from the table: the run is not
// signalled.
func TestAnswerAPILeavesALiveAnswerToItsWorker(t *testing.T) {
	t.Parallel()
	e := setupAPI(t)
	e.Asked("r1", 2, true)
	status, _, body := e.Call("dana", http.MethodPost, "/v1/runs/r1/steps/2/answer", `{"action": "accept", "content": {"size": "L"}}`)
	require.Equal(t, http.StatusAccepted, status, body)
	assert.Empty(t, e.Temporal.Answers())
	assert.Equal(t, 1, e.answerCount(t, "outcome = 'accepted'"))
}

// The pending list shows each round of questions as an item of kind
// question: what the server asked, the schema of the answer, who may
// answer and the deadline, beside the approvals, the nearest deadline
// first.
func TestThePendingListShowsTheQuestions(t *testing.T) {
	t.Parallel()
	e := setupAPI(t)
	e.Asked("r1", 2, false, "dana")
	e.Asked("r2", 1, true)

	status, _, body := e.Call("vic", http.MethodGet, "/v1/approvals?state=pending", "")
	require.Equal(t, http.StatusOK, status, body)
	var list ApprovalList
	require.NoError(t, json.Unmarshal([]byte(body), &list), body)
	require.Len(t, list.Approvals, 2)
	it := list.Approvals[0]
	assert.Equal(t, KindQuestion, it.Kind)
	assert.Equal(t, "r1", it.RunID)
	assert.Equal(t, "shop_order_shirt", it.Tool)
	assert.Equal(t, "a shirt for Ana", it.Goal)
	assert.Equal(t, "pending", it.State)
	assert.Positive(t, it.SecondsLeft)
	require.NotNil(t, it.Question)
	q := it.Question
	assert.Equal(t, 1, q.Round)
	assert.Equal(t, "shop", q.Server)
	assert.Equal(t, "v1/acme/r1/2/shop_order_shirt", q.Key)
	assert.Equal(t, []string{"dana"}, q.AnswerBy)
	assert.Equal(t, "dana", q.MayAnswer)
	require.Len(t, q.Items, 1)
	assert.Equal(t, "Which size should the shirt be?", q.Items[0].Message)
	assert.Contains(t, string(q.Items[0].Schema), `"enum"`)
	assert.False(t, q.Live)
	assert.Contains(t, it.Reason, "Which size should the shirt be?")

	assert.True(t, list.Approvals[1].Question.Live)
	assert.Equal(t, "any approver or operator of acme", list.Approvals[1].Question.MayAnswer)

	// Answered, it leaves the list.
	status, _, body = e.Call("dana", http.MethodPost, "/v1/runs/r1/steps/2/answer", `{"action": "accept", "content": {"size": "M"}}`)
	require.Equal(t, http.StatusAccepted, status, body)
	_, _, body = e.Call("vic", http.MethodGet, "/v1/approvals?state=pending", "")
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Len(t, list.Approvals, 1)
	assert.Equal(t, "r2", list.Approvals[0].RunID)
}
