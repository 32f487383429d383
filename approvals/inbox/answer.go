package inbox

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/questions"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/workflows"
)

// answerView is a round of questions' answer form.
type answerView struct {
	Round     int
	Live      bool
	Server    string
	MayAnswer string
	Questions []questionView
}

// questionView is one question of the form: its fields, drawn from the
// server's schema, or one JSON box when the schema asks for more than a
// form can draw.
type questionView struct {
	ID      string
	Mode    string
	Message string
	// URL, for a URL question, is the server's address, shown as text.
	URL    string
	Fields []answerField
	// JSON is set when the schema's fields cannot all be drawn: the
	// content is written as a JSON object instead.
	JSON bool
	// Form is the prefix of the question's form fields.
	Form string
}

// answerField is one property of a form question's schema.
type answerField struct {
	Name, Label, Help string
	// Input is text, integer, number, bool, select or multi.
	Input    string
	Options  []answerOption
	Required bool
	Value    string
	// Form is the field's form name.
	Form string
}

type answerOption struct {
	Value, Label string
}

// answerFieldPrefix starts the form names of a question's fields: q.<question id>.<property>.
const answerFieldPrefix = "q."

// answerFormOf is the answer form of a question item.
func answerFormOf(q *approvals.QuestionInfo) *answerView {
	if q == nil {
		return nil
	}
	v := &answerView{Round: q.Round, Live: q.Live, Server: q.Server, MayAnswer: q.MayAnswer}
	for _, it := range q.Items {
		qv := questionView{ID: it.ID, Mode: it.Mode, Message: it.Message, URL: it.URL, Form: answerFieldPrefix + it.ID + "."}
		if it.Mode == questions.ModeForm {
			qv.Fields, qv.JSON = fieldsOf(it.Schema, qv.Form)
		}
		v.Questions = append(v.Questions, qv)
	}
	return v
}

// fieldsOf draws a form question's schema: one field per property, in the
// schema's order of names, when every property is one a form can take (a
// string, possibly of a list of values, a number, an integer, a boolean,
// or a list of strings to pick from); otherwise ok is false and the content
// is written as JSON.
func fieldsOf(schema json.RawMessage, prefix string) (fields []answerField, asJSON bool) {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if json.Unmarshal(schema, &s) != nil || len(s.Properties) == 0 {
		return nil, true
	}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		f, ok := fieldOf(name, s.Properties[name])
		if !ok {
			return nil, true
		}
		f.Required = slices.Contains(s.Required, name)
		f.Form = prefix + "f." + f.Input + "." + name
		fields = append(fields, f)
	}
	return fields, false
}

// property is what a form reads of one property of a question's schema.
type property struct {
	Type        string          `json:"type"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	Enum        []any           `json:"enum"`
	OneOf       []choice        `json:"oneOf"`
	AnyOf       []choice        `json:"anyOf"`
	Default     json.RawMessage `json:"default"`
	Items       *struct {
		Type  string   `json:"type"`
		Enum  []any    `json:"enum"`
		AnyOf []choice `json:"anyOf"`
	} `json:"items"`
}

type choice struct {
	Const any    `json:"const"`
	Title string `json:"title"`
}

func fieldOf(name string, raw json.RawMessage) (answerField, bool) {
	var p property
	if json.Unmarshal(raw, &p) != nil {
		return answerField{}, false
	}
	f := answerField{Name: name, Label: p.Title, Help: p.Description}
	if f.Label == "" {
		f.Label = name
	}
	if len(p.Default) > 0 {
		var v any
		if json.Unmarshal(p.Default, &v) == nil {
			f.Value = fmt.Sprint(v)
		}
	}
	switch p.Type {
	case "string":
		switch {
		case len(p.Enum) > 0:
			f.Input, f.Options = "select", options(p.Enum, nil)
		case len(p.OneOf) > 0:
			f.Input, f.Options = "select", options(nil, p.OneOf)
		default:
			f.Input = "text"
		}
	case "integer":
		f.Input = "integer"
	case "number":
		f.Input = "number"
	case "boolean":
		f.Input = "bool"
	case "array":
		if p.Items == nil || (len(p.Items.Enum) == 0 && len(p.Items.AnyOf) == 0) {
			return answerField{}, false
		}
		f.Input, f.Options = "multi", options(p.Items.Enum, p.Items.AnyOf)
	default:
		return answerField{}, false
	}
	return f, f.Input != "select" && f.Input != "multi" || len(f.Options) > 0
}

// options are a property's choices: its enum values, or its titled
// constants.
func options(enum []any, titled []choice) []answerOption {
	var out []answerOption
	for _, v := range enum {
		s, ok := v.(string)
		if !ok {
			return nil
		}
		out = append(out, answerOption{Value: s, Label: s})
	}
	for _, c := range titled {
		s, ok := c.Const.(string)
		if !ok {
			return nil
		}
		out = append(out, answerOption{Value: s, Label: cmpOr(c.Title, s)})
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// answerForm answers the inbox's answer form, with the protections of
// every inbox form. The action of the button pressed answers every
// question of the round; accept sends each question's fields as its
// content, as the server's schema types them.
func (s *Inbox) answerForm(w http.ResponseWriter, r *http.Request) {
	sess, p, step, ok := s.inboxForm(w, r)
	if !ok {
		return
	}
	runID := r.PathValue("run_id")
	sr := approvals.StepRequestOf(r, sess.id, approvalstore.ViaInbox, step)
	sr.Round = formRound(r.PostForm.Get("round"))
	ctx, cancel := s.dbContext(r.Context())
	defer cancel()
	answers, bad := formAnswers(r.PostForm)
	if bad != "" {
		sr.Invalid = refused(http.StatusBadRequest, "invalid_request", "%s", bad)
	}
	res, err := s.api.Answer(ctx, approvals.AnswerInput{StepRequest: sr, Answers: answers, Note: r.PostForm.Get("note")})
	if err != nil {
		s.formFailed(ctx, w, r, s.formError(p, "answer", runID, step, err), err)
		return
	}
	a := res.Answer
	s.redirectWithFlash(w, r, fmt.Sprintf("Answered step %d of run %s (round %d): %s.", a.Step, a.RunID, a.Round, answeredText(a.Answers)))
}

// formAnswers reads an answer form: the action of the button pressed, for
// every question the form names (q.<id>.action, one hidden field each),
// and, to accept, each question's content from its fields. bad says what
// cannot be read.
func formAnswers(form url.Values) (map[string]workflows.QuestionAnswer, string) {
	action := form.Get("action")
	out := map[string]workflows.QuestionAnswer{}
	for key := range form {
		id, ok := strings.CutSuffix(strings.TrimPrefix(key, answerFieldPrefix), ".kind")
		if !strings.HasPrefix(key, answerFieldPrefix) || !ok {
			continue
		}
		a := workflows.QuestionAnswer{Action: action}
		if action == questions.ActionAccept && form.Get(key) == questions.ModeForm {
			content, bad := formContent(form, answerFieldPrefix+id+".")
			if bad != "" {
				return nil, fmt.Sprintf("%s: %s", id, bad)
			}
			a.Content = content
		}
		out[id] = a
	}
	if len(out) == 0 {
		return nil, "the form names no question"
	}
	return out, ""
}

// formContent is a question's content from the fields under prefix: each
// field's value as its input types it (f.<name> names the input); the
// JSON box's object when the form drew one.
func formContent(form url.Values, prefix string) (json.RawMessage, string) {
	if raw, ok := form[prefix+"json"]; ok {
		v := strings.TrimSpace(strings.Join(raw, ""))
		if !json.Valid([]byte(v)) {
			return nil, "the answer is not valid JSON"
		}
		return json.RawMessage(v), ""
	}
	content := map[string]any{}
	for key, vals := range form {
		rest, ok := strings.CutPrefix(key, prefix+"f.")
		if !ok {
			continue
		}
		input, name, ok := strings.Cut(rest, ".")
		if !ok {
			continue
		}
		v := strings.TrimSpace(strings.Join(vals, ""))
		switch input {
		case "text", "select":
			if v != "" {
				content[name] = v
			}
		case "multi":
			var picked []string
			for _, x := range vals {
				if x != "" {
					picked = append(picked, x)
				}
			}
			if len(picked) > 0 {
				content[name] = picked
			}
		case "integer":
			if v == "" {
				continue
			}
			if _, err := strconv.ParseInt(v, 10, 64); err != nil {
				return nil, fmt.Sprintf("%s %q is not a whole number", name, v)
			}
			content[name] = json.Number(v)
		case "number":
			if v == "" {
				continue
			}
			if _, err := strconv.ParseFloat(v, 64); err != nil || !json.Valid([]byte(v)) {
				return nil, fmt.Sprintf("%s %q is not a number", name, v)
			}
			content[name] = json.Number(v)
		case "bool":
			// A checkbox sends "true" when ticked; its hidden twin "false"
			// always.
			content[name] = slices.Contains(vals, "true")
		}
	}
	raw, err := json.Marshal(content)
	if err != nil {
		return nil, err.Error()
	}
	return raw, ""
}

// answeredText says what a round's answers are, in words.
func answeredText(answers map[string]workflows.QuestionAnswer) string {
	ids := make([]string, 0, len(answers))
	for id := range answers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	parts := make([]string, 0, len(ids))
	for _, id := range ids {
		a := answers[id]
		switch a.Action {
		case questions.ActionAccept:
			p := id + " answered"
			if len(a.Content) > 0 {
				p += " " + untrusted.Compact(a.Content)
			}
			parts = append(parts, p)
		case questions.ActionDecline:
			parts = append(parts, id+" declined")
		default:
			parts = append(parts, id+" dismissed")
		}
	}
	return strings.Join(parts, "; ")
}
