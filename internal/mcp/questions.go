package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/questions"
	"github.com/oncerun/oncerun/internal/untrusted"
)

// questionsFor is the questions policy of the server's tool: the tool's
// own, or the server's.
func (s *server) questionsFor(tool string) Questions {
	if tc, ok := s.cfg.Tools[tool]; ok && tc.Questions != nil {
		return *tc.Questions
	}
	return s.cfg.Questions
}

// asksLive reports whether any of the server's tools takes live
// questions: only then does oncerun declare elicitation to it.
func (s *server) asksLive() bool {
	if s.cfg.Questions.liveWait() > 0 {
		return true
	}
	for _, tc := range s.cfg.Tools {
		if tc.Questions != nil && tc.Questions.liveWait() > 0 {
			return true
		}
	}
	return false
}

// errBusy is a server's input-required answer that asks nothing: the
// server is busy (SEP-2322's load shedding), and the call may be sent
// again later.
var errBusy = errors.New("the server answered that it is busy (an input-required result that asks nothing): the call is sent again later")

// asked turns a server's input-required answer to a call of tool into the
// step's round of questions, for a person. An answer that asks for
// something only a client program could give (a model's completion, the
// client's roots) cannot be put to a person: it is an error naming it.
func (s *server) asked(tool string, res *mcpsdk.CallToolResult) (questions.Asked, error) {
	if len(res.InputRequests) == 0 {
		return questions.Asked{}, errBusy
	}
	q := s.questionsFor(tool)
	a := questions.Asked{Server: s.cfg.Name, State: res.RequestState, AnswerBy: q.AnswerBy, Wait: time.Duration(q.Wait)}
	for _, id := range slices.Sorted(maps.Keys(res.InputRequests)) {
		p, ok := res.InputRequests[id].(*mcpsdk.ElicitParams)
		if !ok {
			return questions.Asked{}, fmt.Errorf("it asked for %s (%q), which oncerun does not give: only a person's answers are", inputKind(res.InputRequests[id]), id)
		}
		it, err := itemOf(id, p)
		if err != nil {
			return questions.Asked{}, err
		}
		a.Items = append(a.Items, it)
	}
	if err := a.Validate(); err != nil {
		return questions.Asked{}, fmt.Errorf("its question cannot be put to a person: %w", err)
	}
	return a, nil
}

// inputKind names what an input request of the server asks for.
func inputKind(r mcpsdk.InputRequest) string {
	switch r.(type) {
	case *mcpsdk.CreateMessageParams, *mcpsdk.CreateMessageWithToolsParams:
		return "a model's completion (sampling)"
	case *mcpsdk.ListRootsParams:
		return "the client's roots"
	}
	return fmt.Sprintf("%T", r)
}

// itemOf is elicitation p, asked under id, as a question.
func itemOf(id string, p *mcpsdk.ElicitParams) (questions.Item, error) {
	it := questions.Item{ID: id, Mode: p.Mode, Message: p.Message, URL: p.URL}
	if it.Mode == "" {
		it.Mode = questions.ModeForm
	}
	if p.RequestedSchema != nil {
		schema, err := json.Marshal(p.RequestedSchema)
		if err != nil {
			return questions.Item{}, fmt.Errorf("question %q: its schema: %w", id, err)
		}
		it.Schema = schema
	}
	return it, nil
}

// responses are the answers of r as the call's inputResponses.
func responses(r questions.Reply) (mcpsdk.InputResponseMap, error) {
	out := make(mcpsdk.InputResponseMap, len(r.Answers))
	for id, a := range r.Answers {
		res, err := elicitResult(a)
		if err != nil {
			return nil, fmt.Errorf("answer %q: %w", id, err)
		}
		out[id] = res
	}
	return out, nil
}

// elicitResult is answer a as MCP's elicitation result. Numbers keep
// their digits.
func elicitResult(a questions.Answer) (*mcpsdk.ElicitResult, error) {
	res := &mcpsdk.ElicitResult{Action: a.Action}
	if len(a.Content) > 0 {
		dec := json.NewDecoder(bytes.NewReader(a.Content))
		dec.UseNumber()
		if err := dec.Decode(&res.Content); err != nil {
			return nil, fmt.Errorf("content: %w", err)
		}
	}
	return res, nil
}

// liveCall is a call in flight that a server may ask a live question of.
type liveCall struct {
	id   string
	tool string
	ask  questions.Live
	// ctx is the call's own context: the step's, heartbeating.
	ctx context.Context
	// clock bounds the call by its timeout, and stops while a person is
	// asked; timeout bounds each request that follows its task.
	clock   *callClock
	timeout time.Duration
	// asks are the ids of the JSON-RPC requests the server sent on the
	// call's own answer stream (over HTTP).
	mu   sync.Mutex
	asks map[string]bool
	// created is the task the server answered the call with, and session
	// and protocol the session it was created in; task is the task the
	// call follows, for the questions the server asks about it.
	created           *taskInfo
	session, protocol string
	task              atomic.Pointer[taskInfo]
	// ended says the task the call follows has ended, or is lost.
	ended atomic.Bool
}

// callMetaKey is the _meta member by which a live question the server
// asked is tied to the call it asked it in, for the handler: set by the
// connection as the request arrives, never taken from the server.
const callMetaKey = "io.oncerun/call"

// beginLive registers a call in flight; end forgets it.
func (s *server) beginLive(ctx context.Context, tool string, clock *callClock) (*liveCall, func()) {
	lc := &liveCall{id: uuid.NewString(), tool: tool, ask: questions.LiveOf(ctx), ctx: ctx, clock: clock, asks: map[string]bool{}}
	s.calls.Store(lc.id, lc)
	return lc, func() { s.calls.Delete(lc.id) }
}

// sawRequest records that the server sent request id on lc's answer
// stream.
func (lc *liveCall) sawRequest(id string) {
	lc.mu.Lock()
	lc.asks[id] = true
	lc.mu.Unlock()
}

func (lc *liveCall) sent(id string) bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.asks[id]
}

// relatedTaskKey is the _meta member by which a server ties a request to
// a task (MCP's io.modelcontextprotocol/related-task).
const relatedTaskKey = "io.modelcontextprotocol/related-task"

// callFor finds the call in flight that the server's request id belongs
// to: the one on whose answer stream it came (over HTTP: the transport
// says so, whatever the request claims); else the one that follows the
// task it names; else the only call in flight (over stdio, where nothing
// else tells).
func (s *server) callFor(id, task string) *liveCall {
	var only, onStream, ofTask *liveCall
	n := 0
	s.calls.Range(func(_, v any) bool {
		lc := v.(*liveCall)
		n++
		only = lc
		if lc.sent(id) {
			onStream = lc
			return false
		}
		if ti := lc.task.Load(); task != "" && ti != nil && ti.TaskID == task && ofTask == nil {
			ofTask = lc
		}
		return true
	})
	switch {
	case onStream != nil:
		return onStream
	case ofTask != nil:
		return ofTask
	case n == 1:
		return only
	}
	return nil
}

// tieToCall sets, on a server's live question, which call in flight it
// belongs to, or takes away whatever the server put there.
func (s *server) tieToCall(req *jsonrpc.Request) *jsonrpc.Request {
	var params map[string]json.RawMessage
	if json.Unmarshal(req.Params, &params) != nil {
		return req
	}
	var meta map[string]any
	if raw, ok := params["_meta"]; ok {
		_ = json.Unmarshal(raw, &meta)
	}
	if meta == nil {
		meta = map[string]any{}
	}
	delete(meta, callMetaKey)
	task := ""
	if rt, ok := meta[relatedTaskKey].(map[string]any); ok {
		task, _ = rt["taskId"].(string)
	}
	if lc := s.callFor(fmt.Sprint(req.ID.Raw()), task); lc != nil {
		meta[callMetaKey] = lc.id
	}
	raw, err := json.Marshal(meta)
	if err != nil {
		return req
	}
	params["_meta"] = raw
	out, err := json.Marshal(params)
	if err != nil {
		return req
	}
	clone := *req
	clone.Params = out
	return &clone
}

// elicit answers a question the server asks over its live session: it is
// put to a person through the call that the server asked it in, whose
// timeout stops meanwhile, and the person's answer goes back to the
// server. A question that cannot be tied to a call, that nobody can be
// asked (the CLI, a probe), or that cannot be put to a person, is
// dismissed: the server is told cancel, as a person's client would when
// its user closes the question, and what it makes of the call is its own.
func (s *server) elicit(ctx context.Context, req *mcpsdk.ElicitRequest) (*mcpsdk.ElicitResult, error) {
	log := s.opts.Log.With(zap.String("server", s.cfg.Name))
	dismiss := func(why string) (*mcpsdk.ElicitResult, error) {
		log.Warn("MCP server's live question dismissed (cancel): "+why, zap.String("message", untrusted.Cut(req.Params.Message, 200)))
		return &mcpsdk.ElicitResult{Action: questions.ActionCancel}, nil
	}
	id, _ := req.Params.Meta[callMetaKey].(string)
	v, ok := s.calls.Load(id)
	if id == "" || !ok {
		return dismiss("oncerun cannot tell which of its calls in flight asked it")
	}
	return s.askThrough(v.(*liveCall), req.Params)
}

// askThrough puts question p, which the server asked in call lc, to a
// person through lc, whose timeout stops meanwhile, and returns the
// answer; a question nobody can be asked, or that cannot be put to a
// person, is dismissed.
func (s *server) askThrough(lc *liveCall, p *mcpsdk.ElicitParams) (*mcpsdk.ElicitResult, error) {
	log := s.opts.Log.With(zap.String("server", s.cfg.Name), zap.String("tool", lc.tool))
	dismiss := func(why string) (*mcpsdk.ElicitResult, error) {
		log.Warn("MCP server's live question dismissed (cancel): "+why, zap.String("message", untrusted.Cut(p.Message, 200)))
		return &mcpsdk.ElicitResult{Action: questions.ActionCancel}, nil
	}
	q := s.questionsFor(lc.tool)
	if lc.ask == nil || q.liveWait() <= 0 {
		return dismiss("nobody can be asked here")
	}
	it, err := itemOf(questions.LiveItem, p)
	if err != nil {
		return dismiss(err.Error())
	}
	asked := questions.Asked{Server: s.cfg.Name, Items: []questions.Item{it}, AnswerBy: q.AnswerBy, Wait: q.liveWait()}
	if err := asked.Validate(); err != nil {
		return dismiss("it cannot be put to a person: " + err.Error())
	}
	lc.clock.pause()
	defer lc.clock.resume()
	log.Info("MCP server asks a person during a call", zap.String("question", asked.Summary()))
	answers, err := lc.ask(lc.ctx, asked)
	if err != nil {
		return nil, fmt.Errorf("the question was not answered: %w", err)
	}
	a, ok := answers[questions.LiveItem]
	if !ok {
		return nil, errors.New("the question was not answered")
	}
	return elicitResult(a)
}

// callClock bounds a call by its timeout, and stops while the server waits
// for a person's answer to a live question.
type callClock struct {
	mu      sync.Mutex
	timer   *time.Timer
	left    time.Duration
	started time.Time
	paused  int
}

// errCallTimeout ends a call that took longer than its timeout, not
// counting the time a person took to answer its questions.
var errCallTimeout = errors.New("the call took longer than its timeout")

// startClock returns ctx ended after timeout of running time, and the
// clock that counts it; stop releases it.
func startClock(ctx context.Context, timeout time.Duration) (context.Context, *callClock, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	c := &callClock{left: timeout, started: time.Now()}
	c.timer = time.AfterFunc(timeout, func() { cancel(fmt.Errorf("%w (%s): %w", errCallTimeout, timeout, context.DeadlineExceeded)) })
	return ctx, c, func() { c.timer.Stop(); cancel(nil) }
}

func (c *callClock) pause() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused++; c.paused == 1 && c.timer.Stop() {
		c.left -= time.Since(c.started)
	}
}

func (c *callClock) resume() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused--; c.paused == 0 {
		c.started = time.Now()
		c.timer.Reset(max(c.left, 0))
	}
}
