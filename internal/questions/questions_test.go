package questions_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/questions"
)

func form(id, schema string) questions.Item {
	return questions.Item{ID: id, Mode: questions.ModeForm, Message: "Which size?", Schema: json.RawMessage(schema)}
}

const sizes = `{"type":"object","properties":{"size":{"type":"string","enum":["S","M","L"]},"count":{"type":"integer","minimum":1}},"required":["size"]}`

// What a server asks is bounded, and named in each refusal.
func TestValidateBoundsWhatAServerAsks(t *testing.T) {
	t.Parallel()
	secret := filepath.Join(t.TempDir(), "secret.json")
	require.NoError(t, os.WriteFile(secret, []byte(`{"type":"string","const":"hunter2"}`), 0o600))
	many := make([]questions.Item, questions.MaxItems+1)
	for i := range many {
		many[i] = form(strings.Repeat("q", i+1), sizes)
	}
	for _, tc := range []struct {
		name  string
		asked questions.Asked
		want  string
	}{
		{"nothing", questions.Asked{}, "the server asked nothing"},
		{"too many", questions.Asked{Items: many}, "the server asked 9 questions at once; at most 8"},
		{"a state too large", questions.Asked{Items: []questions.Item{form("size", sizes)}, State: strings.Repeat("s", questions.MaxStateBytes+1)},
			"request state is 65537 bytes"},
		{"twice", questions.Asked{Items: []questions.Item{form("size", sizes), form("size", sizes)}}, `question "size" is asked twice`},
		{"an id with a control character", questions.Asked{Items: []questions.Item{form("si\x07ze", sizes)}}, `question "si\aze": id`},
		{"a message with a control character", questions.Asked{Items: []questions.Item{{ID: "size", Mode: questions.ModeForm,
			Message: "Which\x1b[31m size?", Schema: json.RawMessage(sizes)}}}, "message holds"},
		{"a schema that is not an object's", questions.Asked{Items: []questions.Item{form("size", `{"type":"string"}`)}}, `schema must describe an object`},
		{"no schema", questions.Asked{Items: []questions.Item{form("size", ``)}}, "a form question needs a schema"},
		{"a schema that loads a file", questions.Asked{Items: []questions.Item{form("size",
			`{"type":"object","properties":{"size":{"$ref":"file://`+secret+`"}}}`)}}, "schema"},
		{"a schema that loads an address", questions.Asked{Items: []questions.Item{form("size",
			`{"type":"object","properties":{"size":{"$ref":"https://example.com/s.json"}}}`)}}, "schema"},
		{"an unknown mode", questions.Asked{Items: []questions.Item{{ID: "size", Mode: "voice", Message: "?"}}}, `mode "voice" is not form or url`},
		{"a url question with a script address", questions.Asked{Items: []questions.Item{{ID: "pay", Mode: questions.ModeURL, Message: "Pay",
			URL: "javascript:alert(1)"}}}, "is not an http or https address"},
		{"a url question with a schema", questions.Asked{Items: []questions.Item{{ID: "pay", Mode: questions.ModeURL, Message: "Pay",
			URL: "https://pay.example.com/x", Schema: json.RawMessage(sizes)}}}, "a url question has no schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.asked.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), "hunter2", "nothing of a local file comes back")
		})
	}
	require.NoError(t, questions.Asked{Items: []questions.Item{form("size", sizes),
		{ID: "pay", Mode: questions.ModeURL, Message: "Pay the deposit", URL: "https://pay.example.com/x"}}}.Validate())
}

// An answer is held to the round's questions and their schemas.
func TestCheckHoldsAnAnswerToTheQuestions(t *testing.T) {
	t.Parallel()
	asked := questions.Asked{Items: []questions.Item{form("size", sizes),
		{ID: "pay", Mode: questions.ModeURL, Message: "Pay the deposit", URL: "https://pay.example.com/x"}}}
	ok := questions.Answers{
		"size": {Action: questions.ActionAccept, Content: json.RawMessage(`{"size":"M","count":2}`)},
		"pay":  {Action: questions.ActionAccept},
	}
	require.NoError(t, asked.Check(ok))
	with := func(id string, a questions.Answer) questions.Answers {
		out := questions.Answers{"size": ok["size"], "pay": ok["pay"]}
		out[id] = a
		return out
	}
	for _, tc := range []struct {
		name    string
		answers questions.Answers
		want    string
	}{
		{"nothing", questions.Answers{}, "no answer given"},
		{"one left out", questions.Answers{"size": ok["size"]}, `question "pay" is not answered`},
		{"one not asked", with("colour", questions.Answer{Action: questions.ActionDecline}), `question "colour" is not asked (asked: "size", "pay")`},
		{"an action that is none", with("size", questions.Answer{Action: "maybe"}), `answers.size: action "maybe" is not accept, decline or cancel`},
		{"content with a decline", with("size", questions.Answer{Action: questions.ActionDecline, Content: json.RawMessage(`{}`)}),
			"content is given only with action accept"},
		{"an accept without content", with("size", questions.Answer{Action: questions.ActionAccept}), "content is required"},
		{"content on a url question", with("pay", questions.Answer{Action: questions.ActionAccept, Content: json.RawMessage(`{}`)}),
			"a url question is accepted without content"},
		{"a value out of the enum", with("size", questions.Answer{Action: questions.ActionAccept, Content: json.RawMessage(`{"size":"XL"}`)}),
			"answers.size: content does not match the question's schema: at /size"},
		{"a required value missing", with("size", questions.Answer{Action: questions.ActionAccept, Content: json.RawMessage(`{"count":1}`)}),
			"missing property 'size'"},
		{"content that is not an object", with("size", questions.Answer{Action: questions.ActionAccept, Content: json.RawMessage(`["M"]`)}),
			"content must be a JSON object"},
		{"content with a NUL", with("size", questions.Answer{Action: questions.ActionAccept, Content: json.RawMessage(`{"size":"M\u0000"}`)}),
			"content"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := asked.Check(tc.answers)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	require.NoError(t, asked.Check(with("size", questions.Answer{Action: questions.ActionCancel})), "a question may be dismissed")
}
