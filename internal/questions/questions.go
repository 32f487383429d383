package questions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/oncerun/oncerun/internal/schema"
	"github.com/oncerun/oncerun/internal/untrusted"
)

// Modes of a question, as MCP's elicitation names them.
const (
	// ModeForm asks for values that match a schema.
	ModeForm = "form"
	// ModeURL asks the person to open a page (to sign in, to pay) and
	// then say whether they did.
	ModeURL = "url"
)

// Actions of an answer, as MCP's elicitation names them.
const (
	// ActionAccept answers the question: with content for a form question.
	ActionAccept = "accept"
	// ActionDecline refuses to answer it.
	ActionDecline = "decline"
	// ActionCancel dismisses it without a choice.
	ActionCancel = "cancel"
)

// LiveItem is the id of the one question a live elicitation asks.
const LiveItem = "elicitation"

// Bounds of what a server may ask, and of an answer.
const (
	MaxItems        = 8
	MaxIDBytes      = 64
	MaxMessageBytes = 4 << 10
	MaxSchemaBytes  = 16 << 10
	MaxURLBytes     = 2 << 10
	// MaxStateBytes bounds the request state a server asks to have sent
	// back: it travels in the run's history.
	MaxStateBytes = 64 << 10
	// MaxContentBytes bounds the content of one answer.
	MaxContentBytes = 16 << 10
	// MaxRounds is how many rounds of questions one step may be asked
	// before it fails: a server that asks again after every answer would
	// otherwise hold the step for ever.
	MaxRounds = 10
)

// Item is one question.
type Item struct {
	// ID names the question within its round: the server's key for it,
	// or LiveItem.
	ID   string `json:"id"`
	Mode string `json:"mode"`
	// Message is what the server asks, in its words.
	Message string `json:"message"`
	// Schema, for a form question, is the JSON Schema of the content the
	// answer gives: an object, in MCP's restricted form (flat, with
	// string, number, integer and boolean properties).
	Schema json.RawMessage `json:"schema,omitempty"`
	// URL, for a URL question, is the page the server asks the person to
	// open. It is the server's, not oncerun's, and is shown as text.
	URL string `json:"url,omitempty"`
}

// Asked is one round of questions a server asked during a call, and what
// oncerun needs to answer them.
type Asked struct {
	// Server names the MCP server that asked.
	Server string `json:"server,omitempty"`
	Items  []Item `json:"items"`
	// State is the server's request state, sent back with the answers
	// (the 2026-07-28 protocol's input-required result); empty for a live
	// question.
	State string `json:"state,omitempty"`
	// AnswerBy names who may answer (tokens' names); empty: any approver
	// or operator of the tenant.
	AnswerBy []string `json:"answer_by,omitempty"`
	// Wait is how long a person has to answer; zero: the run's approval
	// deadline.
	Wait time.Duration `json:"wait,omitempty"`
}

// Answer answers one question.
type Answer struct {
	Action string `json:"action"`
	// Content is the answer's values, with ActionAccept on a form question
	// only: a JSON object that matches the question's schema.
	Content json.RawMessage `json:"content,omitempty"`
}

// Answers answers a round: one Answer per question, by its ID.
type Answers map[string]Answer

// Reply is what a call that was asked sends on its next attempt: the
// answers, and the request state the server asked to have back.
type Reply struct {
	Answers Answers `json:"answers"`
	State   string  `json:"state,omitempty"`
}

// Validate reports what keeps a server's round of questions from being put
// to a person, naming the question: no question or too many, an id, a
// message or a URL out of bounds, an unknown mode, a form schema that is
// not an object schema or does not compile, a request state too large.
func (a Asked) Validate() error {
	switch {
	case len(a.Items) == 0:
		return errors.New("the server asked nothing")
	case len(a.Items) > MaxItems:
		return fmt.Errorf("the server asked %d questions at once; at most %d", len(a.Items), MaxItems)
	case len(a.State) > MaxStateBytes:
		return fmt.Errorf("the server's request state is %d bytes; at most %d", len(a.State), MaxStateBytes)
	}
	seen := map[string]bool{}
	for _, it := range a.Items {
		if err := it.validate(); err != nil {
			return fmt.Errorf("question %q: %w", untrusted.Cut(it.ID, MaxIDBytes), err)
		}
		if seen[it.ID] {
			return fmt.Errorf("question %q is asked twice", it.ID)
		}
		seen[it.ID] = true
	}
	return nil
}

func (it Item) validate() error {
	if err := untrusted.Name("id", it.ID, MaxIDBytes); err != nil {
		return err
	}
	if err := untrusted.Text("message", it.Message, MaxMessageBytes); err != nil {
		return err
	}
	switch it.Mode {
	case ModeForm:
		if it.URL != "" {
			return errors.New("a form question has no url")
		}
		_, err := compile(it.Schema)
		return err
	case ModeURL:
		if len(it.Schema) > 0 {
			return errors.New("a url question has no schema")
		}
		if len(it.URL) > MaxURLBytes {
			return fmt.Errorf("url is %d bytes; at most %d", len(it.URL), MaxURLBytes)
		}
		u, err := url.Parse(it.URL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("url %q is not an http or https address", untrusted.Cut(it.URL, 200))
		}
		return nil
	}
	return fmt.Errorf("mode %q is not form or url", untrusted.Cut(it.Mode, 32))
}

// compile compiles a form question's schema: a JSON object schema of at
// most MaxSchemaBytes, which may load nothing (a "$ref" to a file or an
// address is refused).
func compile(raw json.RawMessage) (*jsonschema.Schema, error) {
	if len(raw) == 0 {
		return nil, errors.New("a form question needs a schema")
	}
	if len(raw) > MaxSchemaBytes {
		return nil, fmt.Errorf("schema is %d bytes; at most %d", len(raw), MaxSchemaBytes)
	}
	if err := untrusted.Value("schema", raw, MaxSchemaBytes); err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("schema is not JSON: %w", err)
	}
	if m, ok := doc.(map[string]any); !ok || m["type"] != "object" {
		return nil, errors.New(`schema must describe an object ("type": "object")`)
	}
	// A server's schema loads nothing: no file, no address.
	s, err := schema.Compile("oncerun:question.json", doc)
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	return s, nil
}

// Check reports what keeps ans from answering round a, naming the
// question: a question left unanswered or one the round does not ask, an
// action that is not accept, decline or cancel, content given with another
// action or on a URL question, a form question accepted without content,
// or content that does not match its schema.
func (a Asked) Check(ans Answers) error {
	if len(ans) == 0 {
		return errors.New("no answer given")
	}
	asked := map[string]Item{}
	for _, it := range a.Items {
		asked[it.ID] = it
	}
	for _, id := range slices.Sorted(maps.Keys(ans)) {
		if _, ok := asked[id]; !ok {
			return fmt.Errorf("answers: question %q is not asked (asked: %s)", untrusted.Cut(id, MaxIDBytes), a.ids())
		}
	}
	for _, it := range a.Items {
		an, ok := ans[it.ID]
		if !ok {
			return fmt.Errorf("answers: question %q is not answered", it.ID)
		}
		if err := it.check(an); err != nil {
			return fmt.Errorf("answers.%s: %w", it.ID, err)
		}
	}
	return nil
}

func (it Item) check(an Answer) error {
	switch an.Action {
	case ActionAccept:
	case ActionDecline, ActionCancel:
		if len(an.Content) > 0 {
			return fmt.Errorf("content is given only with action %s", ActionAccept)
		}
		return nil
	default:
		return fmt.Errorf("action %q is not accept, decline or cancel", untrusted.Cut(an.Action, 32))
	}
	if it.Mode == ModeURL {
		if len(an.Content) > 0 {
			return errors.New("a url question is accepted without content")
		}
		return nil
	}
	if len(an.Content) == 0 {
		return errors.New("content is required to accept a form question")
	}
	if err := untrusted.Value("content", an.Content, MaxContentBytes); err != nil {
		return err
	}
	if err := untrusted.JSON("content", an.Content); err != nil {
		return err
	}
	s, err := compile(it.Schema)
	if err != nil {
		return fmt.Errorf("the question's schema: %w", err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(an.Content))
	if err != nil {
		return fmt.Errorf("content is not JSON: %w", err)
	}
	if _, ok := v.(map[string]any); !ok {
		return errors.New("content must be a JSON object")
	}
	if err := s.Validate(v); err != nil {
		return fmt.Errorf("content does not match the question's schema: %s", schema.Message(err))
	}
	return nil
}

func (a Asked) ids() string {
	ids := make([]string, len(a.Items))
	for i, it := range a.Items {
		ids[i] = fmt.Sprintf("%q", it.ID)
	}
	return strings.Join(ids, ", ")
}

// Summary says what the round asks, in one line: each question's id and
// message, cut.
func (a Asked) Summary() string {
	parts := make([]string, 0, len(a.Items))
	for _, it := range a.Items {
		p := fmt.Sprintf("%s: %q", it.ID, untrusted.Cut(it.Message, 200))
		if it.Mode == ModeURL {
			p += " (open a page)"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

// AskedError is a call's answer that its server needs a person's input
// before it completes the call: nothing was completed. The call wraps it
// as not applied (tools.NotApplied); the activity turns it into the step's
// question.
type AskedError struct {
	Asked Asked
}

func (e *AskedError) Error() string {
	return "asked for input before it would complete the call (" + e.Asked.Summary() + ")"
}

// Live asks a person a question the server asked over its live session,
// and waits, within ctx, for the answers; the call waits meanwhile.
type Live func(ctx context.Context, asked Asked) (Answers, error)

type replyKey struct{}

type liveKey struct{}

// WithReply returns ctx carrying the answers a call sends back.
func WithReply(ctx context.Context, r Reply) context.Context {
	return context.WithValue(ctx, replyKey{}, r)
}

// ReplyOf returns the answers ctx carries for the call, if any.
func ReplyOf(ctx context.Context) (Reply, bool) {
	r, ok := ctx.Value(replyKey{}).(Reply)
	return r, ok
}

// WithLive returns ctx carrying how a live question is put to a person.
func WithLive(ctx context.Context, ask Live) context.Context {
	return context.WithValue(ctx, liveKey{}, ask)
}

// LiveOf returns how ctx's call puts a live question to a person; nil
// when nobody can be asked (the CLI, a probe).
func LiveOf(ctx context.Context) Live {
	ask, _ := ctx.Value(liveKey{}).(Live)
	return ask
}
