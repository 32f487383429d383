package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/oncerun/oncerun/internal/questions"
	"github.com/oncerun/oncerun/internal/telemetry"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/tools"
)

// MetaIdempotencyKey is the _meta member of a tools/call request that
// carries the step's idempotency key (tools.Key.String()). A server that
// honours it answers a second call under a key it has seen with the first
// call's result, and does nothing. Over http the key is also sent as the
// Idempotency-Key header of that request.
const MetaIdempotencyKey = "io.oncerun/idempotency-key"

// runner returns the Run of the oncerun tool that calls MCP tool name of s.
// An external tool checks tools.BeforeSend before each send; a read goes
// out at any time. A call is bounded by timeout: an answer stream that
// breaks without a trace leaves the SDK waiting for the answer. The time a
// person takes to answer a question the server asks over its live session
// does not count.
//
// A call whose step was asked questions in an earlier attempt sends their
// answers (questions.ReplyOf); a server that answers with questions of its
// own (an input-required result) gets a [questions.AskedError], not
// applied: nothing was completed, and the step waits for a person.
func (s *server) runner(name string, external bool, timeout time.Duration, task bool) func(ctx context.Context, call tools.Call) (any, error) {
	return func(ctx context.Context, call tools.Call) (any, error) {
		ctx, clock, stop := startClock(ctx, timeout)
		defer stop()
		args := call.Args
		if len(args) == 0 {
			args = json.RawMessage(`{}`)
		}
		var reply *questions.Reply
		if r, ok := questions.ReplyOf(ctx); ok {
			reply = &r
		}
		lc, end := s.beginLive(ctx, name, clock)
		defer end()
		lc.timeout = timeout
		res, err := s.call(ctx, name, args, call.Key.String(), external, reply, lc, task)
		if err == nil && lc.created != nil {
			// The server runs the call as a task: it is followed to its
			// end, each request bounded by the timeout, the whole by the
			// step's attempt.
			clock.pause()
			res, err = s.follow(ctx, name, lc, lc.created)
		}
		if err != nil {
			if cause := context.Cause(ctx); errors.Is(cause, errCallTimeout) {
				err = fmt.Errorf("%w: %w", err, cause)
			}
			return nil, fmt.Errorf("MCP tool %q of %s: %w", name, s.describe(), err)
		}
		return s.answerOf(name, res)
	}
}

// answerOf is what a call of tool answered, as its Run returns it: a
// result; the server's questions for a person (a [questions.AskedError],
// not applied); or a definite failure (an error result).
func (s *server) answerOf(name string, res *mcpsdk.CallToolResult) (any, error) {
	if res.NeedsInput() {
		asked, err := s.asked(name, res)
		switch {
		case errors.Is(err, errBusy):
			return nil, tools.NotApplied(fmt.Errorf("MCP tool %q of %s: %w", name, s.describe(), err))
		case err != nil:
			// The server completed nothing, and would ask the same
			// again: the step fails, saying what it asked.
			return nil, tools.Permanent(tools.NotApplied(fmt.Errorf("MCP tool %q of %s asked for input before it would complete the call (%s): %w",
				name, s.describe(), questionsOf(res), err)))
		}
		return nil, tools.NotApplied(fmt.Errorf("MCP tool %q of %s: %w", name, s.describe(), &questions.AskedError{Asked: asked}))
	}
	if res.IsError {
		// The server ran the call and answered that it failed: a
		// definite outcome, which retrying the same arguments does not
		// change.
		return nil, tools.Permanent(tools.NotApplied(fmt.Errorf("MCP tool %q of %s answered an error: %s",
			name, s.describe(), contentText(res.Content))))
	}
	return result(res)
}

// call sends tools/call under key. When the request did not reach the
// server, or the server answered that the session is gone, the session is
// replaced and the request sent once more: nothing of the first attempt was
// acted on.
func (s *server) call(ctx context.Context, name string, args json.RawMessage, key string, external bool, reply *questions.Reply,
	lc *liveCall, task bool) (*mcpsdk.CallToolResult, error) {
	params := &mcpsdk.CallToolParams{Name: name, Arguments: args}
	if reply != nil {
		rs, err := responses(*reply)
		if err != nil {
			return nil, tools.Permanent(tools.NotApplied(fmt.Errorf("the answers to the server's questions: %w", err)))
		}
		params.InputResponses, params.RequestState = rs, reply.State
	}
	var err error
	for attempt := 1; attempt <= 2; attempt++ {
		var cs *mcpsdk.ClientSession
		if cs, err = s.session(ctx); err != nil {
			return nil, tools.NotApplied(err)
		}
		if external {
			if err := tools.BeforeSend(ctx); err != nil {
				return nil, err
			}
		}
		st := &callState{key: key, live: lc, wantTask: task}
		meta := mcpsdk.Meta{}
		for _, name := range s.cfg.IdempotencyKey.metaNames() {
			meta[name] = key
		}
		// The call's trace context goes with it, in _meta as the MCP
		// discussions on trace context propose (traceparent, tracestate).
		if telemetry.On() {
			telemetry.Propagator().Inject(ctx, metaCarrier(meta))
		}
		p := *params
		p.Meta = meta
		res, callErr := cs.CallTool(withCallState(ctx, st), &p)
		if callErr == nil {
			if ti := st.created.Load(); ti != nil && lc != nil {
				lc.created, lc.session = ti, cs.ID()
				if ir := cs.InitializeResult(); ir != nil {
					lc.protocol = ir.ProtocolVersion
				}
			}
			return res, nil
		}
		var resend bool
		err, resend = classify(callErr, st)
		if !resend || ctx.Err() != nil {
			return nil, err
		}
		s.drop(cs, callErr)
	}
	return nil, err
}

// classify sorts a failed tools/call by what it says of the effect:
//
//   - not sent (the request never reached the server: a refused
//     connection, a session found closed before sending) or refused by the
//     server before running the tool (an HTTP 4xx other than 409 and 422, a
//     JSON-RPC error saying the request or its arguments are invalid, a
//     307 or 308 redirect that was not followed): tools.ErrNotApplied, and
//     permanent where retrying the same request cannot help (400, invalid
//     params, unknown method, a redirect oncerun does not follow).
//   - anything else after the request was sent (a timeout, a reset
//     connection, a response cut short, a 5xx, 409 or 422, a 301, 302 or
//     303 redirect, an internal error): unknown, a plain error that the
//     paired read or a person settles.
//
// Over a followed redirect (a 307 or 308 to the same origin) the status
// and whether it was sent are the last request's: the ones before it were
// answered by a server that did not act on them.
//
// resend says the request was not acted on because of the session, so a
// new session may send it again.
func classify(err error, st *callState) (_ error, resend bool) {
	status := int(st.status.Load())
	var rpcErr *jsonrpc.Error
	switch {
	case !st.sent.Load():
		return tools.NotApplied(fmt.Errorf("not sent: %w", err)), true
	case status == http.StatusNotFound && errors.Is(err, mcpsdk.ErrSessionMissing):
		return tools.NotApplied(fmt.Errorf("the server no longer knows the session: %w", err)), true
	case status == http.StatusConflict || status == http.StatusUnprocessableEntity:
		// What a gateway that honours the Idempotency-Key header answers
		// while the first request with the key runs (409), or for a key it
		// holds with another body (422): neither says nothing happened.
		return fmt.Errorf("outcome unknown (HTTP %d): %w", status, err), false
	case status == http.StatusTemporaryRedirect || status == http.StatusPermanentRedirect:
		// A redirect that was not followed (to another origin, or with no
		// Location): the server asks for the request to be sent elsewhere,
		// which by HTTP's rules means it did not act on it, and will say
		// so again to the same request.
		return tools.Permanent(tools.NotApplied(fmt.Errorf("not run (HTTP %d, a redirect not followed: the url must name where the server is): %w",
			status, err))), false
	case status >= 300 && status < 400:
		// A 301, 302 or 303 to a POST may come after the server acted on
		// it: a 303 is how a server shows the result of a POST it ran.
		return fmt.Errorf("outcome unknown (HTTP %d, a redirect not followed, which a server may answer after acting on the call): %w",
			status, err), false
	case status == http.StatusBadRequest:
		return tools.Permanent(tools.NotApplied(fmt.Errorf("refused (HTTP 400): %w", err))), false
	case status >= 400 && status < 500:
		return tools.NotApplied(fmt.Errorf("refused (HTTP %d): %w", status, err)), false
	case status >= 500:
		return fmt.Errorf("outcome unknown (HTTP %d): %w", status, err), false
	case errors.As(err, &rpcErr) && refusedBeforeRunning(rpcErr.Code):
		return tools.Permanent(tools.NotApplied(fmt.Errorf("refused: %w", err))), false
	case unreadable(err):
		return unreadableAnswer(err), false
	}
	return fmt.Errorf("outcome unknown: sent, and no definite answer came back: %w", err), false
}

// refusedBeforeRunning reports the JSON-RPC errors a server answers before
// running anything (MCP reports an unknown tool or invalid arguments as
// invalid params). An internal error may come from a tool that failed half
// way: it is not among them.
func refusedBeforeRunning(code int64) bool {
	switch code {
	case jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest, jsonrpc.CodeMethodNotFound, jsonrpc.CodeInvalidParams:
		return true
	}
	return false
}

// result is a call's result as the step records it: the structured content
// when the tool gives one (see structured); else the text of its content, read as JSON when
// it is a JSON object or array (many servers answer JSON as text) and as a
// string otherwise; else the content items themselves.
func result(res *mcpsdk.CallToolResult) (any, error) {
	if res.StructuredContent != nil {
		return structured(res)
	}
	if len(res.Content) == 0 {
		return map[string]any{}, nil
	}
	for _, c := range res.Content {
		if _, ok := c.(*mcpsdk.TextContent); !ok {
			return res.Content, nil
		}
	}
	text := contentText(res.Content)
	if t := strings.TrimSpace(text); (strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[")) && json.Valid([]byte(t)) {
		return json.RawMessage(t), nil
	}
	return text, nil
}

// contentText joins the text items of content, and names the others.
func contentText(content []mcpsdk.Content) string {
	parts := make([]string, 0, len(content))
	for _, c := range content {
		if t, ok := c.(*mcpsdk.TextContent); ok {
			parts = append(parts, t.Text)
			continue
		}
		parts = append(parts, fmt.Sprintf("[%T]", c))
	}
	return strings.Join(parts, "\n")
}

// metaCarrier carries trace context in a request's _meta.
type metaCarrier mcpsdk.Meta

func (m metaCarrier) Get(key string) string {
	v, _ := m[key].(string)
	return v
}

func (m metaCarrier) Set(key, value string) { m[key] = value }

func (m metaCarrier) Keys() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// questionsOf describes the input a server asked for in an input-required
// answer, for the step's error.
func questionsOf(res *mcpsdk.CallToolResult) string {
	if len(res.InputRequests) == 0 {
		return "no question: the server is busy"
	}
	var out []string
	for _, id := range slices.Sorted(maps.Keys(res.InputRequests)) {
		switch r := res.InputRequests[id].(type) {
		case *mcpsdk.ElicitParams:
			out = append(out, fmt.Sprintf("%s: %q", id, untrusted.Cut(r.Message, 200)))
		default:
			out = append(out, fmt.Sprintf("%s: a %T", id, r))
		}
	}
	return strings.Join(out, "; ")
}
