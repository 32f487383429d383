package inbox

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A question is a card of its own among the pending steps: what the
// server asks, a form drawn from its schema, who may answer, the deadline.
func TestTheInboxShowsAQuestionAndItsForm(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	e.Asked("r1", 2, false)
	status, page := e.signIn("dana").get("/")
	require.Equal(t, http.StatusOK, status)
	for _, want := range []string{
		`data-kind="question"`, "shop_order_shirt — step 2 of run", "asks a person",
		"Which size should the shirt be?", `<legend>Which size should the shirt be?</legend>`,
		`action="/runs/r1/steps/2/answer"`, `name="q.size.kind" value="form"`, `name="q.size.f.select.size"`,
		`<option value="S">S</option>`, `<option value="M">M</option>`, `<option value="L">L</option>`, `>Size <span class="meta">(required)</span>`,
		"May answer: any approver or operator of acme", "your answer is sent back under the step's key",
		`value="accept">Send the answer</button>`, `value="decline" formnovalidate>Decline</button>`,
	} {
		assert.Contains(t, page, want)
	}
}

// The form's answer goes through the API: recorded (via inbox), sent to
// the run, and the inbox says so.
func TestTheInboxAnswersAQuestion(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	e.Asked("r1", 2, false)
	b := e.signIn("dana")
	status, h, body := b.post("/runs/r1/steps/2/answer", url.Values{"csrf": {b.csrf}, "round": {"1"}, "q.size.kind": {"form"},
		"q.size.f.select.size": {"M"}, "action": {"accept"}, "note": {"M fits"}})
	require.Equal(t, http.StatusSeeOther, status, body)
	sent := e.Temporal.Answers()
	require.Len(t, sent, 1)
	assert.Equal(t, "dana", sent[0].Answerer)
	assert.Equal(t, "M fits", sent[0].Note)
	assert.JSONEq(t, `{"size":"M"}`, string(sent[0].Answers["size"].Content))
	var via string
	require.NoError(t, e.Pool.QueryRow(t.Context(), `SELECT via FROM question_answers WHERE outcome = 'accepted'`).Scan(&via))
	assert.Equal(t, "inbox", via)
	_, page := b.get(h.Get("Location"))
	assert.Contains(t, page, `Answered step 2 of run r1 (round 1): size answered {&#34;size&#34;:&#34;M&#34;}.`)
	assert.NotContains(t, page, `data-kind="question"`, "answered, it leaves the list")
}

// Declined, the question goes back declined, with no content.
func TestTheInboxDeclinesAQuestion(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	e.Asked("r1", 2, false)
	b := e.signIn("ops")
	status, _, body := b.post("/runs/r1/steps/2/answer", url.Values{"csrf": {b.csrf}, "round": {"1"}, "q.size.kind": {"form"},
		"q.size.f.select.size": {""}, "action": {"decline"}})
	require.Equal(t, http.StatusSeeOther, status, body)
	sent := e.Temporal.Answers()
	require.Len(t, sent, 1)
	assert.Equal(t, "decline", sent[0].Answers["size"].Action)
	assert.Empty(t, sent[0].Answers["size"].Content)
}

// What the schema refuses is shown on the page, and nothing reaches the
// run; so is a refusal of someone the round does not name, whose card
// offers no form.
func TestTheInboxShowsWhyAnAnswerIsRefused(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	e.Asked("r1", 2, false)
	e.Asked("r2", 1, false, "ops")
	b := e.signIn("dana")
	status, _, body := b.post("/runs/r1/steps/2/answer", url.Values{"csrf": {b.csrf}, "round": {"1"}, "q.size.kind": {"form"},
		"q.size.f.select.size": {"XXL"}, "action": {"accept"}})
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, "content does not match the question&#39;s schema")

	_, page := b.get("/")
	assert.Contains(t, page, "Your token may read but not answer: ops may.")
	status, _, body = b.post("/runs/r2/steps/1/answer", url.Values{"csrf": {b.csrf}, "round": {"1"}, "q.size.kind": {"form"},
		"q.size.f.select.size": {"S"}, "action": {"accept"}})
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, body, "dana may not answer the questions of step 1 of run r2: they are for ops")
	assert.Empty(t, e.Temporal.Answers())

	_, page = e.signIn("vic").get("/")
	assert.Contains(t, page, "Your token may read but not answer")
	assert.NotContains(t, page, `action="/runs/r1/steps/2/answer"`, "a viewer gets no form")
}

// Each kind of property is drawn as the input that takes it, and read
// back as the schema types it; a schema a form cannot draw gets a JSON
// box.
func TestAnswerFieldsFollowTheSchema(t *testing.T) {
	t.Parallel()
	schema := json.RawMessage(`{"type":"object","required":["count"],"properties":{
		"count":{"type":"integer","title":"How many"},"ratio":{"type":"number"},"gift":{"type":"boolean","default":true},
		"colour":{"type":"string","oneOf":[{"const":"r","title":"Red"},{"const":"b","title":"Blue"}]},
		"tags":{"type":"array","items":{"type":"string","enum":["a","b"]}},"name":{"type":"string","description":"on the label"}}}`)
	fields, asJSON := fieldsOf(schema, "q.x.")
	require.False(t, asJSON)
	byName := map[string]answerField{}
	for _, f := range fields {
		byName[f.Name] = f
	}
	assert.Equal(t, answerField{Name: "count", Label: "How many", Input: "integer", Required: true, Form: "q.x.f.integer.count"}, byName["count"])
	assert.Equal(t, "number", byName["ratio"].Input)
	assert.Equal(t, "bool", byName["gift"].Input)
	assert.Equal(t, "true", byName["gift"].Value, "the schema's default")
	assert.Equal(t, []answerOption{{Value: "r", Label: "Red"}, {Value: "b", Label: "Blue"}}, byName["colour"].Options)
	assert.Equal(t, "multi", byName["tags"].Input)
	assert.Equal(t, "on the label", byName["name"].Help)

	content, bad := formContent(url.Values{"q.x.f.integer.count": {"3"}, "q.x.f.number.ratio": {"0.5"}, "q.x.f.bool.gift": {"false", "true"},
		"q.x.f.select.colour": {"b"}, "q.x.f.multi.tags": {"a", "b"}, "q.x.f.text.name": {""}}, "q.x.")
	require.Empty(t, bad)
	assert.JSONEq(t, `{"count":3,"ratio":0.5,"gift":true,"colour":"b","tags":["a","b"]}`, string(content), "an empty optional text is left out")
	_, bad = formContent(url.Values{"q.x.f.integer.count": {"3.5"}}, "q.x.")
	assert.Equal(t, `count "3.5" is not a whole number`, bad)

	_, asJSON = fieldsOf(json.RawMessage(`{"type":"object","properties":{"address":{"type":"object"}}}`), "q.x.")
	assert.True(t, asJSON, "a nested object is written as JSON")
	content, bad = formContent(url.Values{"q.x.json": {`{"address":{"city":"Lyon"}}`}}, "q.x.")
	require.Empty(t, bad)
	assert.JSONEq(t, `{"address":{"city":"Lyon"}}`, string(content))
}

// The run page says what each step's server asked, and whether it waits.
func TestTheRunPageShowsTheQuestions(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	e.Asked("r1", 2, false)
	status, page := e.signIn("vic").get("/runs/r1")
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, page, `data-state="waiting_for_input"`)
	assert.Contains(t, page, "Its server shop asked (round 1): “Which size should the shirt be?” · ")
	assert.Contains(t, page, `<a href="/#step-r1-2">waiting for an answer</a>`)
}
