package inbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/oncerun/oncerun/internal/money"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// Inputs of the edit form: how one argument is shown and read back.
const (
	// inputText is a one-line string.
	inputText = "text"
	// inputTextarea is a string of several lines, or a long one.
	inputTextarea = "textarea"
	// inputInteger is a whole number, sent as a JSON integer.
	inputInteger = "integer"
	// inputNumber is any JSON number.
	inputNumber = "number"
	// inputMoney is an amount in minor units shown and typed in the
	// currency's units ("259.00" for 25900 EUR), sent as a JSON integer.
	inputMoney = "money"
	// inputBool is true or false.
	inputBool = "bool"
	// inputJSON is any other JSON value, typed as JSON.
	inputJSON = "json"
)

// Form fields of the edit form: argument name is the field argPrefix+name;
// rawArgsField, when not empty, holds the whole arguments as JSON instead
// (the needs-resolution card resends an edit that way).
const (
	argPrefix    = "arg."
	rawArgsField = "args"
)

// textareaAfter: a string longer than this is edited in a textarea.
const textareaAfter = 80

// hiddenHint is the hint of a field whose value holds characters the page
// shows escaped elsewhere (see visible): the field itself holds them as
// they are, so that they are sent back unchanged.
const hiddenHint = "This value holds control or format characters (such as a right-to-left override), " +
	"shown escaped in the arguments above; they are kept unless you change the value."

// editField is one argument of the edit form.
type editField struct {
	Name  string
	Input string
	Value string
	// Currency is the code an inputMoney amount is typed in.
	Currency string
	// Hint says how to write the value.
	Hint string
	// ReadOnly is set for a value the tool's edit rule keeps as proposed
	// (the currency of an amount that may only be lowered).
	ReadOnly bool
}

// editView is the edit form of a pending step.
type editView struct {
	Fields []editField
	// Rule says what the tool lets an approver change.
	Rule string
	// Open, Error and Comment are set when the form comes back refused:
	// it is shown open, with the reason, and with what was typed.
	Open    bool
	Error   string
	Comment string
}

// editAttempt is an edit the inbox refused, to show again on its card.
type editAttempt struct {
	RunID   string
	Step    int64
	Form    url.Values
	Message string
}

// ruleText says what an edit rule allows, for the form.
func ruleText(t tools.Tool) string {
	if t.Edits == tools.EditNoIncrease {
		var names []string
		for _, a := range t.Amounts {
			names = append(names, a.Field)
		}
		return "You may change the arguments; " + strings.Join(names, ", ") +
			" may only be lowered, and the currency cannot change."
	}
	return "You may change any argument, within the tool's schema."
}

// schemaTypes maps each top-level property of a JSON Schema to its type
// ("integer", "string", ...); a type list such as ["string", "null"] gives
// its first type other than null.
func schemaTypes(schema json.RawMessage) map[string]string {
	var s struct {
		Properties map[string]struct {
			Type json.RawMessage `json:"type"`
		} `json:"properties"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return nil
	}
	out := make(map[string]string, len(s.Properties))
	for name, p := range s.Properties {
		var one string
		var many []string
		switch {
		case json.Unmarshal(p.Type, &one) == nil:
			out[name] = one
		case json.Unmarshal(p.Type, &many) == nil:
			for _, t := range many {
				if t != "null" {
					out[name] = t
					break
				}
			}
		}
	}
	return out
}

// inputOf is how an argument is edited: by its schema type, or, when the
// schema does not say, by the JSON type of its proposed value.
func inputOf(schemaType string, value json.RawMessage) string {
	switch schemaType {
	case "integer":
		return inputInteger
	case "number":
		return inputNumber
	case "string":
		return inputText
	case "boolean":
		return inputBool
	case "object", "array", "null":
		return inputJSON
	}
	v := bytes.TrimSpace(value)
	switch {
	case len(v) == 0:
		return inputJSON
	case v[0] == '"':
		return inputText
	case bytes.Equal(v, []byte("true")) || bytes.Equal(v, []byte("false")):
		return inputBool
	case v[0] == '-' || (v[0] >= '0' && v[0] <= '9'):
		if _, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return inputInteger
		}
		return inputNumber
	}
	return inputJSON
}

// isCurrencyOf reports whether name is the currency field of one of the
// tool's amounts.
func isCurrencyOf(t tools.Tool, name string) bool {
	for _, a := range t.Amounts {
		if a.Currency == name {
			return true
		}
	}
	return false
}

// decimalsText says how many decimals an amount may have.
func decimalsText(scale int) string {
	switch scale {
	case 0:
		return "in whole units"
	case 1:
		return "with up to 1 decimal"
	}
	return fmt.Sprintf("with up to %d decimals", scale)
}

// amountOf returns the tool's amount whose field is name, if any.
func amountOf(t tools.Tool, name string) (tools.Amount, bool) {
	for _, a := range t.Amounts {
		if a.Field == name {
			return a, true
		}
	}
	return tools.Amount{}, false
}

// editFormOf is the edit form of a pending step, prefilled with its
// arguments (or, when submitted is not nil, with what was typed), or nil
// when the tool does not allow edits or the server does not know it.
func (s *Inbox) editFormOf(toolName string, args json.RawMessage, submitted url.Values) *editView {
	t, ok := s.api.Tool(toolName)
	if !ok || t.Edits == tools.EditForbidden {
		return nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(args, &obj) != nil || obj == nil {
		return nil
	}
	types := schemaTypes(t.Schema)
	names := make([]string, 0, len(obj))
	for k := range obj {
		names = append(names, k)
	}
	slices.Sort(names)
	v := &editView{Rule: ruleText(t)}
	for _, name := range names {
		raw := bytes.TrimSpace(obj[name])
		f := editField{Name: name, Input: inputOf(types[name], raw)}
		switch f.Input {
		case inputText:
			var str string
			if json.Unmarshal(raw, &str) != nil {
				str = string(raw)
			}
			f.Value = str
			if len(str) > textareaAfter || strings.Contains(str, "\n") {
				f.Input = inputTextarea
			}
		case inputJSON:
			f.Value, f.Hint = indentJSON(raw), "JSON"
		default:
			f.Value = string(raw)
		}
		if a, ok := amountOf(t, name); ok && f.Input == inputInteger {
			var code string
			if a.Currency != "" {
				_ = json.Unmarshal(obj[a.Currency], &code)
			}
			if minor, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
				if scale, unit, ok := money.Scale(code); ok {
					f.Input, f.Currency, f.Value = inputMoney, unit, money.Decimal(minor, scale, false)
					f.Hint = fmt.Sprintf("Amount in %s, %s; proposed %s.", unit, decimalsText(scale), money.Format(minor, code))
				} else {
					f.Hint = "In minor units (the currency's smallest unit)."
				}
			}
			if t.Edits == tools.EditNoIncrease {
				f.Hint = strings.TrimSpace(f.Hint + " May only be lowered.")
			}
		}
		if t.Edits == tools.EditNoIncrease && isCurrencyOf(t, name) {
			f.ReadOnly, f.Hint = true, "The currency cannot change."
		}
		if submitted != nil {
			if vals, ok := submitted[argPrefix+name]; ok && len(vals) > 0 {
				f.Value = vals[0]
			}
		}
		if holdsHidden(f.Value) {
			f.Hint = strings.TrimSpace(f.Hint + " " + hiddenHint)
		}
		v.Fields = append(v.Fields, f)
	}
	if submitted != nil {
		v.Open, v.Comment = true, submitted.Get("comment")
	}
	return v
}

// editArgs reads the edit form back into arguments for a call of the
// named tool whose proposed arguments are proposed: each argument from its
// field (a field left out keeps the proposed value; an empty one, but for
// a string, leaves the argument out), integers and amounts as JSON
// integers, an amount in the units of the currency the form gives for it.
// A form with a non-empty rawArgsField gives the arguments as JSON. An
// error names the field; a field that is not UTF-8 is [errNotUTF8], as the
// API refuses the same bytes, rather than text with U+FFFD in their place.
func (s *Inbox) editArgs(toolName string, proposed json.RawMessage, form url.Values) (json.RawMessage, error) {
	if raw := strings.TrimSpace(form.Get(rawArgsField)); raw != "" {
		if err := checkUTF8(rawArgsField, raw); err != nil {
			return nil, err
		}
		return json.RawMessage(raw), nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(proposed, &obj); err != nil || obj == nil {
		return nil, errors.New("the proposed arguments are not a JSON object; send the arguments as JSON")
	}
	t, _ := s.api.Tool(toolName)
	types := schemaTypes(t.Schema)
	out := make(map[string]json.RawMessage, len(obj))
	for name, raw := range obj {
		vals, ok := form[argPrefix+name]
		if !ok || len(vals) == 0 {
			out[name] = raw
			continue
		}
		if err := checkUTF8(name, vals[0]); err != nil {
			return nil, err
		}
		// Browsers send a textarea's line breaks as CRLF.
		typed := strings.ReplaceAll(vals[0], "\r\n", "\n")
		input := inputOf(types[name], raw)
		if input != inputText && strings.TrimSpace(typed) == "" {
			continue
		}
		var (
			v   json.RawMessage
			err error
		)
		switch input {
		case inputText:
			v, err = json.Marshal(typed)
		case inputInteger:
			v, err = s.integerArg(t, name, typed, obj, form)
		case inputNumber:
			typed = strings.TrimSpace(typed)
			if _, perr := strconv.ParseFloat(typed, 64); perr != nil || !json.Valid([]byte(typed)) {
				err = fmt.Errorf("%q is not a number", typed)
			}
			v = json.RawMessage(typed)
		case inputBool:
			switch strings.TrimSpace(typed) {
			case "true", "false":
				v = json.RawMessage(strings.TrimSpace(typed))
			default:
				err = fmt.Errorf("%q is not true or false", typed)
			}
		default:
			if !json.Valid([]byte(typed)) {
				err = errors.New("not valid JSON")
			}
			v = json.RawMessage(typed)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = v
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encode the edited arguments: %w", err)
	}
	return b, nil
}

// errNotUTF8 is the refusal of a field of the edit form that is not
// UTF-8.
var errNotUTF8 = errors.New("not valid UTF-8")

// checkUTF8 refuses a field (name) whose value is not UTF-8, saying where.
func checkUTF8(name, value string) error {
	if utf8.ValidString(value) {
		return nil
	}
	at := 0
	for at < len(value) {
		r, size := utf8.DecodeRuneInString(value[at:])
		if r == utf8.RuneError && size == 1 {
			break
		}
		at += size
	}
	return fmt.Errorf("%s is %w (at byte %d)", name, errNotUTF8, at)
}

// integerArg reads an integer argument: an amount of the tool's, whose
// currency (as the form gives it, else as proposed) is known, in that
// currency's units; anything else as a whole number.
func (s *Inbox) integerArg(t tools.Tool, name, typed string, proposed map[string]json.RawMessage, form url.Values) (json.RawMessage, error) {
	typed = strings.TrimSpace(typed)
	if a, ok := amountOf(t, name); ok && a.Currency != "" {
		var code string
		if vals, ok := form[argPrefix+a.Currency]; ok && len(vals) > 0 {
			code = vals[0]
		} else {
			_ = json.Unmarshal(proposed[a.Currency], &code)
		}
		if scale, unit, ok := money.Scale(code); ok {
			minor, err := parseAmount(typed, scale)
			if err != nil {
				return nil, fmt.Errorf("amount in %s: %w", unit, err)
			}
			return json.RawMessage(strconv.FormatInt(minor, 10)), nil
		}
	}
	n, err := strconv.ParseInt(typed, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%q is not a whole number", typed)
	}
	return json.RawMessage(strconv.FormatInt(n, 10)), nil
}

// editForm answers the inbox's edit form: the approver approves the step
// with the arguments typed in place of those proposed. It takes the path
// of every decision (decide, via the inbox); a refusal (an edit the tool
// does not allow, naming the field, or a stale args hash) shows the inbox
// again with the form open as it was sent, and the step stays pending.
func (s *Inbox) editForm(w http.ResponseWriter, r *http.Request) {
	sess, p, step, ok := s.inboxForm(w, r)
	if !ok {
		return
	}
	ctx, cancel := s.dbContext(r.Context())
	defer cancel()
	runID := r.PathValue("run_id")
	attempt := &editAttempt{RunID: runID, Step: step, Form: r.PostForm}
	row, err := s.api.Approval(ctx, sess.id, runID, step)
	if err != nil {
		s.editFailed(ctx, w, r, p, attempt, err)
		return
	}
	in := s.decideInput(r, sess.id, step, workflows.DecisionEdit)
	args, err := s.editArgs(row.Tool, row.Args, r.PostForm)
	switch {
	case errors.Is(err, errNotUTF8):
		// Refused once the request is audited, as the API refuses a body
		// that is not UTF-8.
		in.Invalid = refused(http.StatusBadRequest, "invalid_request", "%s", err.Error())
	case err != nil:
		// Refused once the request is audited, as the API refuses a body
		// that does not decode.
		in.Invalid = refused(http.StatusUnprocessableEntity, "edit_refused", "%s", err.Error())
	default:
		in.Args = args
	}
	res, err := s.api.Decide(ctx, in)
	if err != nil {
		s.editFailed(ctx, w, r, p, attempt, err)
		return
	}
	s.redirectWithFlash(w, r, decidedFlash(res.Decision))
}

// editFailed shows the inbox with why an edit was refused, at the top and
// on the step's card, whose form is open again with what was typed (see
// formFailed).
func (s *Inbox) editFailed(ctx context.Context, w http.ResponseWriter, r *http.Request, p page, attempt *editAttempt, err error) {
	p = s.formError(p, "edit", attempt.RunID, attempt.Step, err)
	attempt.Message = p.Error
	p.EditFailed = attempt
	s.formFailed(ctx, w, r, p, err)
}
