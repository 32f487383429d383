package planner

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/oncerun/oncerun/internal/telemetry"
	"github.com/oncerun/oncerun/internal/untrusted"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Defaults for [OpenAIConfig].
const (
	DefaultOpenAIBaseURL = "https://api.openai.com/v1"
	DefaultOpenAITimeout = 60 * time.Second
)

const (
	// maxResponseBytes bounds how much of a response body is read.
	maxResponseBytes = 4 << 20
	// maxExcerptBytes bounds how much of an error body goes into an error.
	maxExcerptBytes = 200
)

// OpenAIConfig configures an [OpenAI] planner. It reads no environment
// variables; main does.
type OpenAIConfig struct {
	// BaseURL is the API's root, to which "/chat/completions" is appended; it
	// must be an absolute http or https URL. Default: [DefaultOpenAIBaseURL].
	// For Ollama use "http://localhost:11434/v1".
	BaseURL string
	// APIKey is sent as a bearer token. It may be empty for endpoints without
	// authentication, such as Ollama or vLLM; then no Authorization header is
	// sent. Default: empty.
	APIKey string
	// Model names the model to ask, such as "gpt-4o-mini". Required.
	Model string
	// HTTPClient sends the requests. Default: a client whose Timeout is
	// Timeout.
	HTTPClient *http.Client
	// Timeout bounds each request of the default HTTPClient; it is ignored
	// when HTTPClient is set. Default: [DefaultOpenAITimeout] (60 seconds).
	Timeout time.Duration
	// Sequential turns parallel tool calls off: the request says
	// parallel_tool_calls false, and when the model still proposes several
	// calls in a turn the run makes them in order, asking again after the
	// first that is not done. Default: false, the model's calls of a turn
	// run at once, as its contract makes them independent.
	Sequential bool
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c OpenAIConfig) WithDefaults() OpenAIConfig {
	c.BaseURL = cmp.Or(c.BaseURL, DefaultOpenAIBaseURL)
	c.Timeout = cmp.Or(c.Timeout, DefaultOpenAITimeout)
	if c.HTTPClient == nil {
		// Traced while OTEL_* configure tracing.
		c.HTTPClient = &http.Client{Timeout: c.Timeout, Transport: telemetry.Transport(nil)}
	}
	return c
}

func (c OpenAIConfig) validate() error {
	if c.Model == "" {
		return errors.New("OpenAIConfig.Model is required")
	}
	if c.Timeout < 0 {
		return fmt.Errorf("OpenAIConfig.Timeout is %s; it must be positive", c.Timeout)
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil {
		return fmt.Errorf("OpenAIConfig.BaseURL %s is not a URL", untrusted.Redact(c.BaseURL))
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("OpenAIConfig.BaseURL %q is not an absolute http or https URL", untrusted.Redact(c.BaseURL))
	}
	return nil
}

// OpenAI is the planner that asks an OpenAI-compatible chat-completions
// endpoint with tool calling. It is safe for concurrent use.
type OpenAI struct {
	cfg      OpenAIConfig
	endpoint string
}

// NewOpenAI returns an OpenAI planner, or an error naming the field of cfg
// that is missing or invalid.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("planner.NewOpenAI: %w", err)
	}
	endpoint := strings.TrimSuffix(cfg.BaseURL, "/") + "/chat/completions"
	return &OpenAI{cfg: cfg, endpoint: endpoint}, nil
}

// Next asks the model for the run's next calls. Transport failures, 408, 429
// and 5xx answers are ordinary errors, to be retried; other refusals wrap
// [ErrPermanent]. A tool call whose arguments are not valid JSON is returned
// with Call.Malformed set, not as an error.
func (p *OpenAI) Next(ctx context.Context, req Request) (prop Proposal, err error) {
	// The model call's span, in the GenAI semantic conventions' terms.
	model := cmp.Or(req.Model, p.cfg.Model)
	ctx, span := telemetry.Tracer().Start(ctx, "chat "+model, trace.WithSpanKind(trace.SpanKindClient))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "the model call failed")
		}
		span.End()
	}()
	if span.IsRecording() {
		span.SetAttributes(attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.provider.name", "openai"),
			attribute.String("gen_ai.request.model", model))
	}
	chat, err := p.chatRequest(req)
	if err != nil {
		return Proposal{}, err
	}
	body, err := json.Marshal(chat)
	if err != nil {
		// Only a tool schema that is not valid JSON gets here; no retry helps.
		return Proposal{}, fmt.Errorf("openai: encode request: %w: %w", err, ErrPermanent)
	}
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, p.endpoint, bytes.NewReader(body))
	if err != nil {
		return Proposal{}, fmt.Errorf("openai: build request: %w", err)
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set("Accept", "application/json")
	if chat.Stream {
		httpReq.Header.Set("Accept", "text/event-stream, application/json")
	}
	if p.cfg.APIKey != "" {
		httpReq.Header.Set("Authorization", "Bearer "+p.cfg.APIKey)
	}

	resp, err := p.cfg.HTTPClient.Do(httpReq)
	if err != nil {
		return Proposal{}, fmt.Errorf("openai: post chat completions: %w", err)
	}
	defer resp.Body.Close()
	var raw []byte
	if streamed(resp) {
		// An endpoint that cannot stream answers whole, as below.
		raw, err = readStream(resp.Body, req.OnText)
	} else {
		raw, err = io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	}
	if err != nil {
		return Proposal{}, fmt.Errorf("openai: read response: %w", err)
	}
	switch code := resp.StatusCode; {
	case code == http.StatusBadRequest && chat.Stream:
		// An endpoint that refuses to stream (or stream_options) answers
		// the same request whole.
		req.OnText = nil
		return p.Next(ctx, req)
	case code >= 200 && code < 300:
	case code >= 500, code == http.StatusTooManyRequests, code == http.StatusRequestTimeout:
		return Proposal{}, fmt.Errorf("openai: status %d: %s", code, excerpt(raw))
	default:
		return Proposal{}, fmt.Errorf("openai: status %d: %s: %w", code, excerpt(raw), ErrPermanent)
	}
	if len(raw) > maxResponseBytes {
		return Proposal{}, fmt.Errorf("openai: response body exceeds %d bytes", maxResponseBytes)
	}
	if span.IsRecording() {
		recordUsage(span, raw)
	}
	prop, err = parseResponse(raw)
	prop.Parallel = !p.cfg.Sequential && len(prop.Calls) > 1
	return prop, err
}

// The chat-completions wire format, as far as this planner uses it.
type (
	chatRequest struct {
		Model      string        `json:"model"`
		Messages   []chatMessage `json:"messages"`
		Tools      []chatTool    `json:"tools,omitempty"`
		ToolChoice string        `json:"tool_choice,omitempty"`
		// ParallelToolCalls is sent only as false: endpoints that do not
		// know it (Ollama, vLLM) take its absence as their default.
		ParallelToolCalls *bool `json:"parallel_tool_calls,omitempty"`
		// Stream asks for the answer as it is written (see readStream).
		Stream        bool           `json:"stream,omitempty"`
		StreamOptions *streamOptions `json:"stream_options,omitempty"`
	}
	streamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	}
	chatMessage struct {
		Role       string         `json:"role"`
		Content    string         `json:"content,omitempty"`
		ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
		ToolCallID string         `json:"tool_call_id,omitempty"`
	}
	chatTool struct {
		Type     string       `json:"type"`
		Function chatFunction `json:"function"`
	}
	chatFunction struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	}
	chatToolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	chatResponse struct {
		Choices []struct {
			Message struct {
				Content   *string        `json:"content"`
				ToolCalls []chatToolCall `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	// toolReport is what a tool message tells the model about one call.
	toolReport struct {
		Outcome Outcome         `json:"outcome"`
		Note    string          `json:"note,omitempty"`
		Edit    *Edit           `json:"edited_by_a_person,omitempty"`
		Result  json.RawMessage `json:"result,omitempty"`
		Error   string          `json:"error,omitempty"`
	}
)

// chatRequest describes req to the model: the run's goal, then each earlier
// call as an assistant tool call answered by a tool message.
func (p *OpenAI) chatRequest(req Request) (chatRequest, error) {
	system := fmt.Sprintf("You are an agent working for tenant %q on run %q. "+
		"Reach the user's goal by calling the tools you are given. "+
		"Call tools only with arguments that match their JSON Schemas. "+
		"When the goal is reached, or cannot be reached, reply with a plain message "+
		"and no tool calls, saying what was done.", req.Tenant, req.RunID)
	msgs := make([]chatMessage, 0, 2+2*len(req.History))
	msgs = append(msgs,
		chatMessage{Role: "system", Content: system},
		chatMessage{Role: "user", Content: req.Goal})
	ids := map[string]bool{}
	for i := 0; i < len(req.History); {
		obs := req.History[i]
		if obs.Outcome == OutcomeMessage {
			msgs = append(msgs, chatMessage{Role: "user", Content: obs.Message})
			i++
			continue
		}
		// One assistant message carries the calls of one turn, each
		// answered by a tool message, in the order proposed. An
		// observation of an earlier release (turn 0) is a turn of its own.
		end := i + 1
		for obs.Turn > 0 && end < len(req.History) && req.History[end].Turn == obs.Turn &&
			req.History[end].Outcome != OutcomeMessage {
			end++
		}
		turn := chatMessage{Role: "assistant"}
		var reports []chatMessage
		for j := i; j < end; j++ {
			o := req.History[j]
			id := o.ID
			if id == "" || ids[id] {
				id = "call_" + strconv.Itoa(j+1)
			}
			ids[id] = true
			call := chatToolCall{ID: id, Type: "function"}
			call.Function.Name = o.Tool
			call.Function.Arguments = cmp.Or(o.Malformed, string(o.Args), "{}")
			report, err := json.Marshal(toolReport{Outcome: o.Outcome, Note: reportNote(o), Edit: o.Edit,
				Result: o.Result, Error: o.Error})
			if err != nil {
				return chatRequest{}, fmt.Errorf("openai: encode observation %d: %w: %w", j+1, err, ErrPermanent)
			}
			turn.ToolCalls = append(turn.ToolCalls, call)
			reports = append(reports, chatMessage{Role: "tool", ToolCallID: id, Content: string(report)})
		}
		msgs = append(msgs, turn)
		msgs = append(msgs, reports...)
		i = end
	}

	tools := make([]chatTool, len(req.Tools))
	for i, t := range req.Tools {
		tools[i] = chatTool{Type: "function", Function: chatFunction{
			Name: t.Name, Description: t.Description, Parameters: t.Schema,
		}}
	}
	out := chatRequest{Model: cmp.Or(req.Model, p.cfg.Model), Messages: msgs, Tools: tools}
	if len(tools) > 0 {
		// Endpoints refuse tool_choice without tools.
		out.ToolChoice = "auto"
		if p.cfg.Sequential {
			off := false
			out.ParallelToolCalls = &off
		}
	}
	if req.OnText != nil {
		out.Stream, out.StreamOptions = true, &streamOptions{IncludeUsage: true}
	}
	return out, nil
}

// reportNote says in words what the model must not miss about a call: a
// person changed it before it ran, or it repeated an earlier step and did
// not run again.
func reportNote(obs Observation) string {
	switch {
	case obs.Edit != nil:
		return "A person changed this call before approving it; it ran with the arguments in edited_by_a_person.ran_with, not with yours."
	case obs.Outcome == OutcomeDuplicate:
		return fmt.Sprintf("This call repeats step %d, which already made this effect; it was not executed again. The result is step %d's.",
			obs.DuplicateOf, obs.DuplicateOf)
	}
	return ""
}

func parseResponse(raw []byte) (Proposal, error) {
	var resp chatResponse
	if err := json.Unmarshal(raw, &resp); err != nil {
		return Proposal{}, fmt.Errorf("openai: decode response %s: %w", excerpt(raw), err)
	}
	if len(resp.Choices) == 0 {
		return Proposal{}, fmt.Errorf("openai: response has no choices: %s", excerpt(raw))
	}
	msg := resp.Choices[0].Message
	if len(msg.ToolCalls) == 0 && resp.Choices[0].FinishReason == "length" {
		// Cut off mid-answer: not a final word, and maybe not the next time.
		return Proposal{}, fmt.Errorf("openai: answer cut off at the token limit (finish_reason length): %s", excerpt(raw))
	}
	if len(msg.ToolCalls) == 0 {
		var content string
		if msg.Content != nil {
			content = *msg.Content
		}
		return Proposal{Done: true, Message: content}, nil
	}
	calls := make([]Call, len(msg.ToolCalls))
	for i, tc := range msg.ToolCalls {
		args := strings.TrimSpace(tc.Function.Arguments)
		switch {
		case args == "":
			calls[i] = Call{Tool: tc.Function.Name, Args: json.RawMessage("{}")}
		case json.Valid([]byte(args)):
			calls[i] = Call{Tool: tc.Function.Name, Args: json.RawMessage(args)}
		default:
			calls[i] = Call{Tool: tc.Function.Name, Malformed: tc.Function.Arguments}
		}
		calls[i].ID = tc.ID
	}
	return Proposal{Calls: calls}, nil
}

// excerpt returns the start of body for an error message, cut to at most
// maxExcerptBytes on a rune boundary.
func excerpt(body []byte) string {
	s := strings.TrimSpace(string(body))
	if len(s) <= maxExcerptBytes {
		return strconv.Quote(s)
	}
	cut := maxExcerptBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut] + "…")
}

// recordUsage sets the model's own account of a chat response on span:
// the model that answered and the tokens it counted.
func recordUsage(span trace.Span, raw []byte) {
	var r struct {
		Model string `json:"model"`
		Usage *struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if json.Unmarshal(raw, &r) != nil {
		return
	}
	if r.Model != "" {
		span.SetAttributes(attribute.String("gen_ai.response.model", r.Model))
	}
	if r.Usage != nil {
		span.SetAttributes(attribute.Int64("gen_ai.usage.input_tokens", r.Usage.PromptTokens),
			attribute.Int64("gen_ai.usage.output_tokens", r.Usage.CompletionTokens))
	}
	var reasons []string
	for _, c := range r.Choices {
		reasons = append(reasons, c.FinishReason)
	}
	if len(reasons) > 0 {
		span.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", reasons))
	}
}
