package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Where a tools/call carries the step's key ([KeyConvention.Field]).
const (
	// FieldAuto sends SEP-3182's idempotencyKey field when the server
	// declares the tools.idempotency capability. The default.
	FieldAuto = "auto"
	// FieldAlways sends it whatever the server declares.
	FieldAlways = "always"
	// FieldNever never sends it.
	FieldNever = "never"
)

// Names of the idempotency key in a tools/call request's _meta that
// protocols use: oncerun's own, the Agentic Commerce Protocol's and the
// Universal Commerce Protocol's.
const (
	MetaACP = "idempotency_key"
	MetaUCP = "idempotency-key"
)

// KeyConvention says where a server's tools/call requests carry the
// step's key ([ServerConfig.IdempotencyKey]). Servers follow different
// conventions; one that looks for the key where it is not sent makes a
// second effect on a resend.
type KeyConvention struct {
	// Meta are the _meta names the key is sent under. Default
	// [MetaIdempotencyKey] alone; [MetaACP] and [MetaUCP] are the commerce
	// protocols' spellings.
	Meta []string `json:"meta,omitempty"`
	// Header sends the key as the request's Idempotency-Key header (http
	// servers; A2A's convention). Default true over http.
	Header *bool `json:"header,omitempty"`
	// Field is FieldAuto (the default), FieldAlways or FieldNever: whether
	// the key goes in SEP-3182's idempotencyKey field of tools/call.
	Field string `json:"field,omitempty"`
}

// metaNames are the _meta names the key goes under.
func (k KeyConvention) metaNames() []string {
	if k.Meta == nil {
		return []string{MetaIdempotencyKey}
	}
	return k.Meta
}

// header reports whether the key goes in the Idempotency-Key header.
func (k KeyConvention) header() bool { return k.Header == nil || *k.Header }

func (k KeyConvention) problems(transport string) []string {
	var out []string
	if k.Meta != nil && len(k.Meta) == 0 {
		out = append(out, "idempotency_key.meta: empty; leave it out for the default ("+MetaIdempotencyKey+")")
	}
	for i, m := range k.Meta {
		if m == "" {
			out = append(out, fmt.Sprintf("idempotency_key.meta[%d]: empty name", i))
		}
		if slices.Index(k.Meta, m) != i {
			out = append(out, fmt.Sprintf("idempotency_key.meta[%d]: %q twice", i, m))
		}
	}
	if k.Header != nil && *k.Header && transport == TransportStdio {
		out = append(out, "idempotency_key.header: a stdio server has no HTTP headers")
	}
	switch k.Field {
	case "", FieldAuto, FieldAlways, FieldNever:
	default:
		out = append(out, fmt.Sprintf("idempotency_key.field %q: want %s, %s or %s", k.Field, FieldAuto, FieldAlways, FieldNever))
	}
	return out
}

// fieldName is SEP-3182's field of tools/call that carries the key.
const fieldName = "idempotencyKey"

// keyTransport puts the key in SEP-3182's field of each tools/call request
// when the server's convention asks for it, and reads from the server's
// answer to initialize whether it declares tools.idempotency.
type keyTransport struct {
	inner mcpsdk.Transport
	srv   *server
}

func (t *keyTransport) Connect(ctx context.Context) (mcpsdk.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	kc := &keyConn{Connection: c, srv: t.srv}
	t.srv.conn.Store(kc)
	return kc, nil
}

type keyConn struct {
	mcpsdk.Connection
	srv *server
	// initialize is the id of this connection's last handshake request
	// (initialize, or server/discover of the 2026-07-28 protocol).
	initialize atomic.Value
	// lists are the ids of the tools/list requests in flight; tasks the
	// ids of the tools/call requests sent as tasks, with their calls.
	lists sync.Map
	tasks sync.Map
	// waiting are the requests oncerun sent itself on the connection, by
	// id, each waiting for its answer (see call).
	waiting sync.Map
	ids     atomic.Int64
}

func (c *keyConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok {
		id := fmt.Sprint(req.ID.Raw())
		switch req.Method {
		case "initialize", "server/discover":
			// Either handshake answers with the server's capabilities.
			c.initialize.Store(id)
		case "tools/list":
			c.lists.Store(id, true)
		case "tools/call":
			msg = c.callRequest(ctx, req, id)
		}
	}
	return c.Connection.Write(ctx, msg)
}

// callRequest is a tools/call request as it goes out: with SEP-3182's
// field when the server's convention asks for it, and the task member when
// the call runs as a task.
func (c *keyConn) callRequest(ctx context.Context, req *jsonrpc.Request, id string) jsonrpc.Message {
	st := callStateOf(ctx)
	if st == nil {
		return req
	}
	params := req.Params
	if c.srv.sendField() && st.key != "" {
		if p, err := withField(params, st.key); err == nil {
			params = p
		}
	}
	if st.wantTask {
		if p, err := withTask(params); err == nil {
			params = p
			c.tasks.Store(id, st)
		}
	}
	clone := *req
	clone.Params = params
	return &clone
}

func (c *keyConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if err != nil {
			return msg, err
		}
		switch m := msg.(type) {
		case *jsonrpc.Request:
			if m.Method == "elicitation/create" {
				// A live question: tie it to the call it was asked in, for
				// elicit.
				return c.srv.tieToCall(m), nil
			}
		case *jsonrpc.Response:
			if c.answered(m) {
				// The answer to a request oncerun sent itself: the SDK
				// knows nothing of it.
				continue
			}
			c.read(m)
		}
		return msg, nil
	}
}

// read takes what oncerun needs from an answer before the SDK reads it:
// the handshake's capabilities, the tools' task support, a call's task.
func (c *keyConn) read(resp *jsonrpc.Response) {
	if resp.Result == nil {
		return
	}
	id := fmt.Sprint(resp.ID.Raw())
	// Only the handshake's answer is read: the id is cleared once it came,
	// so that the calls' answers pass untouched.
	if init, _ := c.initialize.Load().(string); init != "" && init == id {
		c.initialize.Store("")
		// Once declared, the field is sent for good: the tools built then
		// promise once on it, and a server that stops declaring the
		// capability ignores a member it does not know.
		if declaresIdempotency(resp.Result) {
			c.srv.declared.Store(true)
		}
		if declaresTaskCalls(resp.Result) {
			c.srv.declaresTasks.Store(true)
		}
	}
	if _, ok := c.lists.LoadAndDelete(id); ok {
		c.srv.readToolList(resp.Result)
	}
	if v, ok := c.tasks.LoadAndDelete(id); ok {
		if ti := createdTask(resp.Result); ti != nil {
			v.(*callState).created.Store(ti)
		}
	}
}

// ownIDPrefix begins the ids of the requests oncerun sends itself; the
// SDK numbers its own.
const ownIDPrefix = "oncerun-"

// call sends a request oncerun makes itself (a task's tasks/get) on the
// connection, and waits for its answer, which Read takes for it.
func (c *keyConn) call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	id := ownIDPrefix + strconv.FormatInt(c.ids.Add(1), 10)
	rid, err := jsonrpc.MakeID(id)
	if err != nil {
		return nil, err
	}
	answer := make(chan *jsonrpc.Response, 1)
	c.waiting.Store(id, answer)
	defer c.waiting.Delete(id)
	if err := c.Connection.Write(ctx, &jsonrpc.Request{ID: rid, Method: method, Params: params}); err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	select {
	case r := <-answer:
		if r.Error != nil {
			return nil, r.Error
		}
		return r.Result, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", method, context.Cause(ctx))
	}
}

// answered hands the answer to a request of call to its waiter, once,
// and reports whether it answers one of oncerun's own requests: a late
// answer, whose waiter has gone, or a second answer to the same id, is
// dropped, never passed to the SDK nor left blocking the connection.
func (c *keyConn) answered(resp *jsonrpc.Response) bool {
	id := fmt.Sprint(resp.ID.Raw())
	if v, ok := c.waiting.LoadAndDelete(id); ok {
		select {
		case v.(chan *jsonrpc.Response) <- resp:
		default:
		}
		return true
	}
	return strings.HasPrefix(id, ownIDPrefix)
}

// withField adds the key as the idempotencyKey member of a request's
// params.
func withField(params json.RawMessage, key string) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(params, &m); err != nil {
		return nil, err
	}
	k, err := json.Marshal(key)
	if err != nil {
		return nil, err
	}
	m[fieldName] = k
	return json.Marshal(m)
}

// declaresIdempotency reports whether an initialize or server/discover
// result declares the tools.idempotency capability (SEP-3182).
func declaresIdempotency(result json.RawMessage) bool {
	var r struct {
		Capabilities struct {
			Tools map[string]json.RawMessage `json:"tools"`
		} `json:"capabilities"`
	}
	if json.Unmarshal(result, &r) != nil {
		return false
	}
	v, ok := r.Capabilities.Tools["idempotency"]
	return ok && string(v) != "null" && string(v) != "false"
}

// sendField reports whether tools/call requests carry SEP-3182's field.
func (s *server) sendField() bool {
	switch s.cfg.IdempotencyKey.Field {
	case FieldAlways:
		return true
	case FieldNever:
		return false
	}
	return s.declared.Load()
}

// probe calls tool twice under one fresh key with the probe's arguments,
// then once under another: a server that honours the key answers the
// second call as the first. An answer unlike the first is a second effect,
// and the claim false. When the third answers as the first too, the
// answers cannot tell a server that honours keys from one that answers
// every call alike, and the claim stays unverified.
func probe(ctx context.Context, srv *server, tool string, p *Probe, opts Options) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*opts.ConnectTimeout)
	defer cancel()
	args, err := json.Marshal(p.Args)
	if err != nil {
		return false, fmt.Errorf("%s: tool %q: probe args: %w", srv.describe(), tool, err)
	}
	first := "oncerun-probe/" + srv.cfg.Name + "/" + tool + "/" + uuid.NewString()
	keys := []string{first, first, "oncerun-probe/" + srv.cfg.Name + "/" + tool + "/" + uuid.NewString()}
	answers := make([]json.RawMessage, len(keys))
	for i, key := range keys {
		res, err := srv.call(ctx, tool, args, key, true, nil, nil, false)
		switch {
		case err != nil:
		case res.NeedsInput():
			err = fmt.Errorf("it asked for input (%s)", questionsOf(res))
		case res.IsError:
			err = fmt.Errorf("it answered an error: %s", contentText(res.Content))
		}
		if err != nil {
			return false, fmt.Errorf("%s: tool %q: the probe of its idempotent: true claim, call %d of %d: %w", srv.describe(), tool, i+1, len(keys), err)
		}
		v, err := result(res)
		if err != nil {
			return false, fmt.Errorf("%s: tool %q: the probe's answer: %w", srv.describe(), tool, err)
		}
		if answers[i], err = json.Marshal(v); err != nil {
			return false, err
		}
		if i == 1 && !sameJSON(answers[0], answers[1]) {
			return false, fmt.Errorf("%s: tool %q is configured idempotent: true, but the probe at start called it twice under one key "+
				"and the second answer differs from the first (%s, then %s): the server made a second effect, so it does not honour the key "+
				"where oncerun sends it (see idempotency_key); drop idempotent: true, or give a paired read",
				srv.describe(), tool, cut(string(answers[0]), 120), cut(string(answers[1]), 120))
		}
	}
	return !sameJSON(answers[0], answers[2]), nil
}

// sameJSON reports whether two JSON documents hold the same value.
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}
