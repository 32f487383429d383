package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/oncerun/oncerun/internal/mcp"
)

// The test MCP servers, real SDK servers with an in-memory ledger:
//
//   - honouring: refund records a refund once per idempotency key and
//     answers a repeated key with the first refund;
//   - ignoring: refund records a refund on every call;
//   - odd: tools whose names or schemas oncerun must refuse or rewrite;
//   - unruly: tools whose names collide once normalised (ctl_out and
//     CTL-OUT), one with a 3 MiB description (huge), one whose input
//     schema is past the bound (wide), one whose description holds
//     control characters (noisy), and status, which is none of these;
//   - annotated: tools annotated as the reference servers annotate theirs;
//   - asking: order_shirt asks which size before it would complete (an
//     input-required answer), counting its calls in the ledger;
//   - graph: a knowledge graph as the reference memory server keeps one,
//     whose read (open_nodes) answers what it finds, not whether.
//
// Both refund servers offer find_refund (the paired read: the refunds made
// under the call's key), decline (answers isError) and slow (answers when
// the call is cancelled). Over stdio they also offer crash, which kills the
// process mid-call, and whoami, which answers the process id.
const (
	honouring = "honouring"
	ignoring  = "ignoring"
	odd       = "odd"
	unruly    = "unruly"
	annotated = "annotated"
	graph     = "graph"
	asking    = "asking"
)

type refundIn struct {
	PaymentID   string `json:"payment_id"`
	AmountCents int64  `json:"amount_cents"`
}

type refundRecord struct {
	ID          string `json:"id"`
	PaymentID   string `json:"payment_id"`
	AmountCents int64  `json:"amount_cents"`
	Key         string `json:"key"`
	// MetaNames are the _meta members of the call that made it.
	MetaNames []string `json:"meta_names,omitempty"`
}

type found struct {
	Found  bool          `json:"found"`
	Count  int           `json:"count"`
	Refund *refundRecord `json:"refund,omitempty"`
}

// seen is the key one refund call carried, by each channel, and every
// _meta member the call carried.
type seen struct {
	Meta, Header string
	AllMeta      map[string]any
}

// ledger is a server's record of refunds and of the keys calls carried.
type ledger struct {
	// release ends the calls of slow still running, so that the server
	// can close.
	release chan struct{}
	mu      sync.Mutex
	refunds []refundRecord
	seen    []seen
}

// ids are the ids of the ledger's records, in order.
func (l *ledger) ids() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.refunds {
		out = append(out, r.ID)
	}
	return out
}

func (l *ledger) Seen() []seen {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]seen(nil), l.seen...)
}

// Under returns the refunds made under key.
func (l *ledger) Under(key string) []refundRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byKey(key)
}

// byKey returns the refunds made under key; l.mu must be held.
func (l *ledger) byKey(key string) []refundRecord {
	var out []refundRecord
	for _, r := range l.refunds {
		if r.Key == key {
			out = append(out, r)
		}
	}
	return out
}

// keyOf reads the idempotency key of a call: _meta first (oncerun's name,
// then ACP's), then the header.
func keyOf(req *mcpsdk.CallToolRequest) seen {
	s := seen{AllMeta: map[string]any(req.Params.Meta)}
	s.Meta, _ = req.Params.Meta[mcp.MetaIdempotencyKey].(string)
	if s.Meta == "" {
		// A server of the Agentic Commerce Protocol reads its name.
		s.Meta, _ = req.Params.Meta[mcp.MetaACP].(string)
	}
	if req.Extra != nil && req.Extra.Header != nil {
		s.Header = req.Extra.Header.Get("Idempotency-Key")
	}
	return s
}

func (s seen) key() string {
	if s.Meta != "" {
		return s.Meta
	}
	return s.Header
}

// newServer returns a test MCP server of variant writing to l. PageSize 2
// makes tools/list answer in pages.
func newServer(variant string, l *ledger, stdio bool) *mcpsdk.Server {
	s := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "test-" + variant, Version: "v1"}, &mcpsdk.ServerOptions{PageSize: 2})
	switch variant {
	case odd:
		addOddTools(s)
		return s
	case unruly:
		addUnrulyTools(s)
		return s
	case annotated:
		addAnnotatedTools(s)
		return s
	case graph:
		addGraphTools(s, l)
		return s
	case asking:
		addAskingTool(s, l)
		return s
	}
	// A refund adds to the world and destroys nothing; decline and crash
	// say nothing of themselves, and are destructive by MCP's default.
	additive := &mcpsdk.ToolAnnotations{DestructiveHint: new(false), IdempotentHint: variant == honouring}
	mcpsdk.AddTool(s, &mcpsdk.Tool{Name: "refund", Description: "Refund (part of) a payment.", Annotations: additive},
		func(ctx context.Context, req *mcpsdk.CallToolRequest, in refundIn) (*mcpsdk.CallToolResult, refundRecord, error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			k := keyOf(req)
			l.seen = append(l.seen, k)
			if prev := l.byKey(k.key()); variant == honouring && k.key() != "" && len(prev) > 0 {
				return nil, prev[0], nil
			}
			r := refundRecord{ID: fmt.Sprintf("re_%d", len(l.refunds)+1), PaymentID: in.PaymentID, AmountCents: in.AmountCents, Key: k.key(),
				MetaNames: slices.Sorted(maps.Keys(k.AllMeta))}
			l.refunds = append(l.refunds, r)
			return nil, r, nil
		})
	mcpsdk.AddTool(s, &mcpsdk.Tool{Name: "find_refund", Description: "Find the refund made under the call's key.",
		Annotations: &mcpsdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcpsdk.CallToolRequest, in refundIn) (*mcpsdk.CallToolResult, found, error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			made := l.byKey(keyOf(req).key())
			if len(made) == 0 {
				return nil, found{}, nil
			}
			return nil, found{Found: true, Count: len(made), Refund: &made[0]}, nil
		})
	mcpsdk.AddTool(s, &mcpsdk.Tool{Name: "decline", Description: "Always declines."},
		func(ctx context.Context, req *mcpsdk.CallToolRequest, in refundIn) (*mcpsdk.CallToolResult, any, error) {
			return nil, nil, errors.New("card declined")
		})
	mcpsdk.AddTool(s, &mcpsdk.Tool{Name: "slow", Description: "Answers when the call is cancelled.", Annotations: additive},
		func(ctx context.Context, req *mcpsdk.CallToolRequest, in refundIn) (*mcpsdk.CallToolResult, any, error) {
			select {
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			case <-l.release:
				return nil, nil, errors.New("released")
			}
		})
	if stdio {
		mcpsdk.AddTool(s, &mcpsdk.Tool{Name: "crash", Description: "Exits the process mid-call."},
			func(ctx context.Context, req *mcpsdk.CallToolRequest, in refundIn) (*mcpsdk.CallToolResult, any, error) {
				os.Exit(3)
				return nil, nil, nil
			})
		mcpsdk.AddTool(s, &mcpsdk.Tool{Name: "whoami", Description: "Answers the server's process id."},
			func(ctx context.Context, req *mcpsdk.CallToolRequest, in struct{}) (*mcpsdk.CallToolResult, map[string]int, error) {
				return nil, map[string]int{"pid": os.Getpid()}, nil
			})
	}
	return s
}

type entity struct {
	Name         string   `json:"name"`
	EntityType   string   `json:"entityType"`
	Observations []string `json:"observations"`
}

// addGraphTools adds create_entities (which makes the entities whose names
// are new, keys or not) and open_nodes (the entities of the names asked
// for), keeping the entities in l's refunds, one record each.
func addGraphTools(s *mcpsdk.Server, l *ledger) {
	type created struct {
		Entities []entity `json:"entities"`
	}
	mcpsdk.AddTool(s, &mcpsdk.Tool{Name: "create_entities", Description: "Create entities in the knowledge graph.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: new(false)}},
		func(_ context.Context, _ *mcpsdk.CallToolRequest, in created) (*mcpsdk.CallToolResult, created, error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			var out created
			for _, e := range in.Entities {
				if len(l.byKey(e.Name)) == 0 {
					l.refunds = append(l.refunds, refundRecord{ID: e.Name, Key: e.Name})
					out.Entities = append(out.Entities, e)
				}
			}
			return nil, out, nil
		})
	type names struct {
		Names []string `json:"names"`
	}
	type opened struct {
		Entities  []entity `json:"entities"`
		Relations []any    `json:"relations"`
	}
	mcpsdk.AddTool(s, &mcpsdk.Tool{Name: "open_nodes", Description: "Open nodes of the knowledge graph by name.",
		Annotations: &mcpsdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcpsdk.CallToolRequest, in names) (*mcpsdk.CallToolResult, opened, error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			out := opened{Entities: []entity{}, Relations: []any{}}
			for _, n := range in.Names {
				if len(l.byKey(n)) > 0 {
					out.Entities = append(out.Entities, entity{Name: n, EntityType: "person", Observations: []string{}})
				}
			}
			return nil, out, nil
		})
}

// addAskingTool adds order_shirt, which asks which size before it orders
// a shirt (an input-required answer, with a request state to send back),
// and orders one of the size a person accepted under the call's key; a
// declined question orders nothing and answers an error. Every call is
// counted in the ledger ("asked" or the order).
func addAskingTool(s *mcpsdk.Server, l *ledger) {
	type order struct {
		Ordered string `json:"ordered"`
		State   string `json:"state"`
		Key     string `json:"key"`
	}
	mcpsdk.AddTool(s, &mcpsdk.Tool{Name: "order_shirt", Description: "Order a shirt; asks for the size.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: new(false)}},
		func(_ context.Context, req *mcpsdk.CallToolRequest, _ struct{}) (*mcpsdk.CallToolResult, any, error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			key := keyOf(req).key()
			if r, ok := req.Params.InputResponses["size"].(*mcpsdk.ElicitResult); ok {
				if r.Action != "accept" {
					l.refunds = append(l.refunds, refundRecord{ID: "declined", Key: key})
					return &mcpsdk.CallToolResult{IsError: true, Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "no size, no shirt"}}}, nil, nil
				}
				size, _ := r.Content["size"].(string)
				l.refunds = append(l.refunds, refundRecord{ID: "shirt_" + size, Key: key})
				return nil, order{Ordered: size, State: req.Params.RequestState, Key: key}, nil
			}
			l.refunds = append(l.refunds, refundRecord{ID: "asked", Key: key})
			return &mcpsdk.CallToolResult{RequestState: "sized:" + key, InputRequests: mcpsdk.InputRequestMap{"size": &mcpsdk.ElicitParams{
				Message: "Which size?",
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{
					"size": map[string]any{"type": "string", "enum": []string{"S", "M", "L"}}}, "required": []string{"size"}},
			}}}, nil, nil
		})
}

// addAnnotatedTools adds tools that say what they are, as the reference
// servers do, rightly or not; they answer "ok".
func addAnnotatedTools(s *mcpsdk.Server) {
	none := func(context.Context, *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
		return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "ok"}}}, nil
	}
	object := json.RawMessage(`{"type":"object"}`)
	for name, a := range map[string]*mcpsdk.ToolAnnotations{
		"read_graph":      {ReadOnlyHint: true},
		"echo":            {ReadOnlyHint: true},
		"delete_entities": {DestructiveHint: new(true)},
		"purge":           {ReadOnlyHint: true, DestructiveHint: new(true)}, // says both
		"add_note":        {DestructiveHint: new(false), IdempotentHint: true},
		"forget":          {}, // annotated, with destructiveHint left out
		"wipe":            nil,
		"mystery":         nil,
	} {
		s.AddTool(&mcpsdk.Tool{Name: name, InputSchema: object, Annotations: a}, none)
	}
}

// addOddTools adds tools with names to rewrite or refuse, and schemas the
// registry refuses. MCP servers must declare object schemas, so array_args
// is rewritten on its way out to stand for a server that does not.
func addOddTools(s *mcpsdk.Server) {
	none := func(context.Context, *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
		return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "ok"}}}, nil
	}
	object := json.RawMessage(`{"type":"object"}`)
	for _, name := range []string{"get.Status", "status", "Refund", "refund", strings.Repeat("x", 70), "array_args"} {
		s.AddTool(&mcpsdk.Tool{Name: name, InputSchema: object}, none)
	}
	s.AddTool(&mcpsdk.Tool{Name: "bad_schema", InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","minimum":"zero"}}}`)}, none)
	s.AddReceivingMiddleware(func(next mcpsdk.MethodHandler) mcpsdk.MethodHandler {
		return func(ctx context.Context, method string, req mcpsdk.Request) (mcpsdk.Result, error) {
			res, err := next(ctx, method, req)
			if list, ok := res.(*mcpsdk.ListToolsResult); ok && err == nil {
				for i, t := range list.Tools {
					if t.Name == "array_args" {
						c := *t
						c.InputSchema = json.RawMessage(`{"type":"array"}`)
						list.Tools[i] = &c
					}
				}
			}
			return res, err
		}
	})
}

// noisyDescription is the description of unruly's noisy: a CRLF line end,
// a NUL and a terminal's escape sequence.
const noisyDescription = "Prints the status.\r\nIn colour: \x00\x1b[31mred\x1b[0m"

// addUnrulyTools adds tools a server should not offer, and status, which
// it may; read_status is a read, the rest say nothing of themselves.
func addUnrulyTools(s *mcpsdk.Server) {
	none := func(context.Context, *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
		return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "ok"}}}, nil
	}
	object := json.RawMessage(`{"type":"object"}`)
	for _, t := range []*mcpsdk.Tool{
		{Name: "ctl_out", Description: "Writes to the control output."},
		{Name: "CTL-OUT", Description: "Writes to the CTL output."},
		{Name: "huge", Description: strings.Repeat("x", 3<<20)},
		{Name: "noisy", Description: noisyDescription},
		{Name: "status", Description: "Says how things are."},
		{Name: "read_status", Description: "Reads how things are.", Annotations: &mcpsdk.ToolAnnotations{ReadOnlyHint: true}},
		{Name: "wide", InputSchema: json.RawMessage(`{"type":"object","properties":{"note":{"type":"string","description":"` +
			strings.Repeat("x", mcp.MaxSchemaBytes) + `"}}}`)},
	} {
		if t.InputSchema == nil {
			t.InputSchema = object
		}
		s.AddTool(t, none)
	}
}

// httpServer is a test MCP server over Streamable HTTP.
type httpServer struct {
	URL    string
	Ledger *ledger
	srv    *httptest.Server
	// handler is the SDK's handler; restart replaces it, losing the
	// sessions as a restarted process would.
	handler atomic.Pointer[http.Handler]
	variant string
	// dropAnswer makes the next tools/call run and its connection close
	// before any answer.
	dropAnswer atomic.Bool
	lastAuth   atomic.Value
	release    sync.Once
	// declares makes the server declare SEP-3182's tools.idempotency and
	// read the key from a call's idempotencyKey field, as it passes the
	// field on to the SDK's handler in the Idempotency-Key header (the SDK
	// knows no such field); fields records the field of each call.
	declares bool
	// asksRaw answers each tools/call with a question of the 2026-07-28
	// protocol (an input-required result), whatever the session
	// negotiated.
	asksRaw atomic.Bool
	// asksFor, when set, is the inputRequests asksRaw's question holds.
	asksFor  atomic.Value
	fieldsMu sync.Mutex
	fields   []string
}

// Fields are the idempotencyKey fields the calls carried ("" for none).
func (s *httpServer) Fields() []string {
	s.fieldsMu.Lock()
	defer s.fieldsMu.Unlock()
	return append([]string(nil), s.fields...)
}

// startDeclaring starts a server of variant that declares SEP-3182's
// capability and reads the key from the field only.
func startDeclaring(t *testing.T, variant string) *httpServer {
	t.Helper()
	s := &httpServer{Ledger: &ledger{release: make(chan struct{})}, variant: variant, declares: true}
	s.restart()
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	t.Cleanup(s.releaseSlow)
	s.URL = s.srv.URL
	return s
}

// answerWithAQuestion answers a tools/call with an input-required result,
// reporting whether r was one.
func (s *httpServer) answerWithAQuestion(w http.ResponseWriter, r *http.Request) bool {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal(body, &msg) != nil || msg.Method != "tools/call" {
		return false
	}
	s.Ledger.mu.Lock()
	s.Ledger.refunds = append(s.Ledger.refunds, refundRecord{ID: "asked"})
	s.Ledger.mu.Unlock()
	requests := `{"size":{"method":"elicitation/create","params":{"mode":"form","message":"Which size?",` +
		`"requestedSchema":{"type":"object","properties":{"size":{"type":"string"}}}}}}`
	if v, ok := s.asksFor.Load().(string); ok {
		requests = v
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"resultType":"input_required","requestState":"opaque",`+
		`"inputRequests":%s}}`, msg.ID, requests)
	return true
}

// serveDeclaring serves a request as a server that knows SEP-3182.
func (s *httpServer) serveDeclaring(h http.Handler, w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Key string `json:"idempotencyKey"`
		} `json:"params"`
	}
	_ = json.Unmarshal(body, &msg)
	r.Header.Del("Idempotency-Key")
	if msg.Method == "tools/call" {
		s.fieldsMu.Lock()
		s.fields = append(s.fields, msg.Params.Key)
		s.fieldsMu.Unlock()
		if msg.Params.Key != "" {
			r.Header.Set("Idempotency-Key", msg.Params.Key)
		}
	}
	if msg.Method != "initialize" {
		h.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	var res map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
		http.Error(w, "the initialize answer is not JSON: "+err.Error(), http.StatusInternalServerError)
		return
	}
	caps := res["result"].(map[string]any)["capabilities"].(map[string]any)
	toolCaps, _ := caps["tools"].(map[string]any)
	if toolCaps == nil {
		toolCaps = map[string]any{}
	}
	toolCaps["idempotency"] = map[string]any{}
	caps["tools"] = toolCaps
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.Header().Del("Content-Length")
	w.WriteHeader(rec.Code)
	_ = json.NewEncoder(w).Encode(res)
}

// releaseSlow ends the calls of slow still running.
func (s *httpServer) releaseSlow() { s.release.Do(func() { close(s.Ledger.release) }) }

// LastAuthorization is the Authorization header of the last request.
func (s *httpServer) LastAuthorization() string {
	v, _ := s.lastAuth.Load().(string)
	return v
}

func startHTTP(t *testing.T, variant string) *httpServer {
	t.Helper()
	s := &httpServer{Ledger: &ledger{release: make(chan struct{})}, variant: variant}
	s.restart()
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	t.Cleanup(s.releaseSlow) // runs first
	s.URL = s.srv.URL
	return s
}

func (s *httpServer) restart() {
	srv := newServer(s.variant, s.Ledger, false)
	var h http.Handler = mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return srv },
		&mcpsdk.StreamableHTTPOptions{JSONResponse: s.declares})
	s.handler.Store(&h)
}

// stop makes the server unreachable: connections are refused.
func (s *httpServer) stop() { s.srv.Close() }

func (s *httpServer) serve(w http.ResponseWriter, r *http.Request) {
	h := *s.handler.Load()
	s.lastAuth.Store(r.Header.Get("Authorization"))
	if s.declares {
		s.serveDeclaring(h, w, r)
		return
	}
	if s.asksRaw.Load() && s.answerWithAQuestion(w, r) {
		return
	}
	if r.Method != http.MethodPost || !s.dropAnswer.Load() {
		h.ServeHTTP(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if !bytes.Contains(body, []byte(`"tools/call"`)) || !s.dropAnswer.CompareAndSwap(true, false) {
		h.ServeHTTP(w, r)
		return
	}
	// The call runs to completion; then the connection drops before the
	// answer leaves, like a proxy that resets it.
	h.ServeHTTP(httptest.NewRecorder(), r)
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// serverEnv switches a re-executed test binary into a stdio MCP server of
// the variant it names (see TestMain).
const serverEnv = "ONCERUN_MCP_TEST_SERVER"

// runStdioServer serves variant on standard input and output until the
// input ends.
func runStdioServer(variant string) int {
	if err := newServer(variant, &ledger{}, true).Run(context.Background(), &mcpsdk.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "test MCP server:", err)
		return 1
	}
	return 0
}

// stdioConfig is a server configuration that runs this test binary as a
// stdio MCP server of variant.
func stdioConfig(t *testing.T, name, variant string) mcp.ServerConfig {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return mcp.ServerConfig{Name: name, Transport: mcp.TransportStdio, Command: exe, Env: map[string]string{
		serverEnv: variant,
		// A race-enabled binary otherwise lingers a second at exit.
		"GORACE": "atexit_sleep_ms=0",
	}}
}
