package approvals

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"

	"github.com/oncerun/oncerun/internal/approvalstest"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/workflows"
)

// announced are the operations the document describes that Handler may
// not serve yet: their tests skip while the route answers as one the API
// does not have.
var announced = []string{"GET /v1/runs", "GET /v1/runs/{run_id}/events", "GET /v1/events"}

// loadOpenAPI loads the served document and checks it is a valid OpenAPI
// 3.1 document.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPIDocument)
	require.NoError(t, err)
	require.True(t, doc.IsOpenAPI31OrLater(), "the document is OpenAPI %s", doc.OpenAPI)
	require.NoError(t, doc.Validate(context.Background()))
	return doc
}

// TestOpenAPIDocumentIsValid: the document is OpenAPI 3.1, valid, and
// every schema it names is defined.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	assert.Equal(t, "3.1.0", doc.OpenAPI)
	require.NotNil(t, doc.Components.SecuritySchemes["bearer"])
	assert.Equal(t, "bearer", doc.Components.SecuritySchemes["bearer"].Value.Scheme)
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			assert.NotEmpty(t, op.OperationID, "%s %s has an operationId", method, path)
			if path == "/v1/openapi.json" {
				continue
			}
			assert.NotNil(t, op.Responses.Value("401"), "%s %s documents 401", method, path)
		}
	}
}

// servedRoutes reads the routes server.go's Handler registers: its
// api(pattern, method, …) and resource(pattern, {method: …}) calls and
// the mux's own patterns under /v1, as "METHOD /path".
func servedRoutes(t *testing.T) []string {
	t.Helper()
	file, err := parser.ParseFile(gotoken.NewFileSet(), "server.go", nil, 0)
	require.NoError(t, err)
	str := func(e ast.Expr) string {
		lit, ok := e.(*ast.BasicLit)
		require.True(t, ok && lit.Kind == gotoken.STRING, "a route's pattern is a string literal")
		s, err := strconv.Unquote(lit.Value)
		require.NoError(t, err)
		return s
	}
	method := func(e ast.Expr) string {
		sel, ok := e.(*ast.SelectorExpr)
		require.True(t, ok, "a route's method is http.MethodX")
		return strings.ToUpper(strings.TrimPrefix(sel.Sel.Name, "Method"))
	}
	var routes []string
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		if len(call.Args) == 0 {
			return true
		}
		if _, ok := call.Args[0].(*ast.BasicLit); !ok {
			return true // the helpers' own bodies, and resource's 405 of any method
		}
		switch fn := call.Fun.(type) {
		case *ast.Ident:
			switch fn.Name {
			case "api":
				routes = append(routes, method(call.Args[1])+" "+str(call.Args[0]))
			case "resource":
				lit, ok := call.Args[1].(*ast.CompositeLit)
				require.True(t, ok, "resource's methods are a map literal")
				for _, el := range lit.Elts {
					routes = append(routes, method(el.(*ast.KeyValueExpr).Key)+" "+str(call.Args[0]))
				}
			}
		case *ast.SelectorExpr:
			if x, ok := fn.X.(*ast.Ident); ok && x.Name == "mux" && (fn.Sel.Name == "Handle" || fn.Sel.Name == "HandleFunc") {
				if m, p, ok := strings.Cut(str(call.Args[0]), " "); ok && strings.HasPrefix(p, "/v1/") {
					routes = append(routes, m+" "+p)
				}
			}
		}
		return true
	})
	slices.Sort(routes)
	return routes
}

// documented lists the document's operations as "METHOD /path".
func documented(doc *openapi3.T) []string {
	var ops []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, method+" "+path)
		}
	}
	slices.Sort(ops)
	return ops
}

// notServed reports whether an answer is the API's to a route it does not
// have: the catch-all 404, or a 405 of a path that takes other methods.
func notServed(method string, status int, header http.Header, body []byte) bool {
	var eb ErrorBody
	_ = json.Unmarshal(body, &eb)
	switch status {
	case http.StatusNotFound:
		return strings.HasPrefix(eb.Error.Message, "no API endpoint")
	case http.StatusMethodNotAllowed:
		return !slices.Contains(strings.Split(header.Get("Allow"), ", "), method)
	}
	return false
}

// TestOpenAPIDescribesEveryRoute: every route Handler serves has its
// operation in the document, and every operation of the document is
// served, but for those announced and not served yet.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	ops := documented(doc)
	served := servedRoutes(t)
	require.GreaterOrEqual(t, len(served), 18, "server.go's routes were read: %v", served)
	require.Contains(t, served, "POST /v1/runs")
	for _, r := range served {
		assert.Contains(t, ops, r, "the document describes %s", r)
	}

	// A request without a token shows whether a route is served, however
	// Handler registers it.
	h := (&Server{cfg: Config{}.WithDefaults(), log: zap.NewNop()}).Handler()
	for _, op := range ops {
		t.Run(op, func(t *testing.T) {
			method, path, _ := strings.Cut(op, " ")
			if slices.Contains(served, op) {
				return
			}
			path = strings.NewReplacer("{run_id}", "r1", "{step}", "1", "{name}", "credits").Replace(path)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
			if notServed(method, rec.Code, rec.Header(), rec.Body.Bytes()) {
				require.Contains(t, announced, op, "the document describes %s, which Handler does not serve", op)
				t.Skipf("%s is not served yet (%d)", op, rec.Code)
			}
		})
	}
}

// conformance drives the API of a world of its own over HTTP and checks
// every answer against the document.
type conformance struct {
	*apiEnv
	doc    *openapi3.T
	router routers.Router
}

func setupConformance(t *testing.T, adjust ...func(*Config)) *conformance {
	t.Helper()
	doc := loadOpenAPI(t)
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
	return &conformance{apiEnv: setupAPI(t, adjust...), doc: doc, router: router}
}

// request is one request of a conformance test and the status it must get.
type request struct {
	who, method, path, body string
	header                  map[string]string
	want                    int
}

// send sends rq (with rq.who's token, unless who is empty or "bad"),
// requires its status, and checks the answer against the document; it
// returns the body.
func (c *conformance) send(t *testing.T, rq request) []byte {
	t.Helper()
	resp, body := c.roundTrip(t, rq)
	require.Equal(t, rq.want, resp.StatusCode, "%s %s: %s", rq.method, rq.path, body)
	c.check(t, resp, body)
	return body
}

func (c *conformance) roundTrip(t *testing.T, rq request) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(rq.method, c.URL+rq.path, strings.NewReader(rq.body))
	require.NoError(t, err)
	switch rq.who {
	case "":
	case "bad":
		req.Header.Set("Authorization", "Bearer oncerun_not-a-token")
	default:
		req.Header.Set("Authorization", "Bearer "+c.Tokens[rq.who])
	}
	if rq.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range rq.header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

// check validates an answer against the document: the operation's
// response of its status, its content type, headers and body. An answer
// to a route the document does not have (a 405, the catch-all 404) must
// be the document's error body.
func (c *conformance) check(t *testing.T, resp *http.Response, body []byte, opts ...func(*openapi3filter.Options)) {
	t.Helper()
	req := resp.Request
	route, params, err := c.router.FindRoute(req)
	if errors.Is(err, routers.ErrPathNotFound) || errors.Is(err, routers.ErrMethodNotAllowed) {
		require.Contains(t, []int{http.StatusNotFound, http.StatusMethodNotAllowed}, resp.StatusCode,
			"%s %s is not in the document", req.Method, req.URL.Path)
		assert.Equal(t, "application/json; charset=utf-8", resp.Header.Get("Content-Type"))
		var v any
		require.NoError(t, json.Unmarshal(body, &v))
		require.NoError(t, c.doc.ValidateSchemaJSON(c.doc.Components.Schemas["ErrorBody"].Value, v, openapi3.EnableJSONSchema2020()),
			"%s %s: %s", req.Method, req.URL.Path, body)
		return
	}
	require.NoError(t, err, "%s %s", req.Method, req.URL.Path)
	o := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}
	for _, f := range opts {
		f(o)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: o},
		Status:                 resp.StatusCode, Header: resp.Header, Options: o,
	}
	in.SetBodyBytes(body)
	require.NoError(t, openapi3filter.ValidateResponse(context.Background(), in),
		"%s %s answered %d: %s", req.Method, req.URL.Path, resp.StatusCode, body)
}

// sendAll sends each request in turn.
func (c *conformance) sendAll(t *testing.T, rqs []request) {
	t.Helper()
	for _, rq := range rqs {
		c.send(t, rq)
	}
}

// TestOpenAPIConformanceOfErrors: refusals common to every endpoint (no
// token, a bad one, another origin, a body that is not JSON or too large,
// a method or path the API does not have) are answered as the document
// says.
func TestOpenAPIConformanceOfErrors(t *testing.T) {
	t.Parallel()
	c := setupConformance(t)
	c.Running("r1", false)
	c.sendAll(t, []request{
		{who: "", method: http.MethodGet, path: "/v1/approvals", want: http.StatusUnauthorized},
		{who: "bad", method: http.MethodGet, path: "/v1/runs/r1", want: http.StatusUnauthorized},
		{who: "", method: http.MethodPost, path: "/v1/runs/r1/steps/2/approve", body: `{}`, want: http.StatusUnauthorized},
		{who: "bad", method: http.MethodDelete, path: "/v1/limits/credits", want: http.StatusUnauthorized},
		{who: "ops", method: http.MethodPost, path: "/v1/runs/r1/pause", body: `{}`,
			header: map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, want: http.StatusForbidden},
		{who: "ops", method: http.MethodPost, path: "/v1/runs", body: `run_id=r2`,
			header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, want: http.StatusUnsupportedMediaType},
		{who: "ops", method: http.MethodPost, path: "/v1/runs", body: `{"goal": "` + strings.Repeat("x", DefaultMaxBodyBytes) + `"}`,
			want: http.StatusRequestEntityTooLarge},
		{who: "ops", method: http.MethodPut, path: "/v1/limits/credits", body: `{"tools": [`, want: http.StatusBadRequest},
		{who: "ops", method: http.MethodDelete, path: "/v1/approvals", want: http.StatusMethodNotAllowed},
		{who: "ops", method: http.MethodGet, path: "/v1/runs/r1/steps/2/approve", want: http.StatusMethodNotAllowed},
		{who: "ops", method: http.MethodGet, path: "/v1/nothing", want: http.StatusNotFound},
	})
}

// TestOpenAPIConformanceOfTheDocument: GET /v1/openapi.json answers the
// document without a token.
func TestOpenAPIConformanceOfTheDocument(t *testing.T) {
	t.Parallel()
	c := setupConformance(t)
	body := c.send(t, request{method: http.MethodGet, path: "/v1/openapi.json", want: http.StatusOK})
	assert.JSONEq(t, string(OpenAPIDocument), string(body))
}

// startingTemporal is the approvals tests' Temporal that also starts
// runs: a run id started before answers "already started", and is
// described with the input hash it was started with.
type startingTemporal struct {
	*approvalstest.Temporal
	mu      sync.Mutex
	started map[string]*commonpb.Payload
}

// startedRun is a run the fake started.
type startedRun struct {
	client.WorkflowRun
	id string
}

func (r startedRun) GetRunID() string { return "temporal-" + r.id }

func (f *startingTemporal) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.started[o.ID]; ok {
		return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("already started", "", "temporal-"+o.ID)
	}
	raw, err := json.Marshal(o.Memo["oncerun_input_hash"])
	if err != nil {
		return nil, err
	}
	f.started[o.ID] = &commonpb.Payload{Metadata: map[string][]byte{"encoding": []byte("json/plain")}, Data: raw}
	return startedRun{id: o.ID}, nil
}

func (f *startingTemporal) DescribeWorkflowExecution(ctx context.Context, id, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	f.mu.Lock()
	hash, ok := f.started[id]
	f.mu.Unlock()
	if !ok {
		return f.Temporal.DescribeWorkflowExecution(ctx, id, runID)
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: "temporal-" + id},
		Memo:      &commonpb.Memo{Fields: map[string]*commonpb.Payload{"oncerun_input_hash": hash}},
	}}, nil
}

// TestOpenAPIConformanceOfRuns: starting a run (new, again, in conflict,
// refused) and reading its status.
func TestOpenAPIConformanceOfRuns(t *testing.T) {
	t.Parallel()
	c := setupConformance(t, func(cfg *Config) {
		cfg.Runs = &runs.Client{Temporal: &startingTemporal{Temporal: cfg.Runs.Temporal.(*approvalstest.Temporal),
			started: map[string]*commonpb.Payload{}}, Pool: cfg.Pool}
	})
	plan := `{"run_id": "r9", "plan": [{"tool": "lookup_order", "args": {"order_id": "1001"}}], "limits": {"approval_deadline": "72h"}}`
	c.sendAll(t, []request{
		{who: "ops", method: http.MethodPost, path: "/v1/runs", body: plan, want: http.StatusCreated},
		{who: "ops", method: http.MethodPost, path: "/v1/runs", body: plan, want: http.StatusOK},
		{who: "ops", method: http.MethodPost, path: "/v1/runs", body: `{"run_id": "r9", "goal": "another"}`, want: http.StatusUnprocessableEntity},
		{who: "ops", method: http.MethodPost, path: "/v1/runs", body: `{"goal": "refund"}`,
			header: map[string]string{"Idempotency-Key": "r10"}, want: http.StatusCreated},
		{who: "ops", method: http.MethodPost, path: "/v1/runs", body: `{"goal": "refund"}`, want: http.StatusBadRequest},
		{who: "ops", method: http.MethodPost, path: "/v1/runs", body: `{"run_id": "r11", "plan": [{"tool": "no_such_tool"}]}`,
			want: http.StatusBadRequest},
		{who: "ops", method: http.MethodPost, path: "/v1/runs", body: `{"run_id": "r11", "goal": "x", "budget": 1}`, want: http.StatusBadRequest},
		{who: "vic", method: http.MethodPost, path: "/v1/runs", body: plan, want: http.StatusForbidden},
	})

	c.Pending("r1", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "", approvalstest.LookupStep(c.Now))
	c.sendAll(t, []request{
		{who: "vic", method: http.MethodGet, path: "/v1/runs/r1", want: http.StatusOK},
		{who: "vic", method: http.MethodGet, path: "/v1/runs/nope", want: http.StatusNotFound},
		{who: "omar", method: http.MethodGet, path: "/v1/runs/r1", want: http.StatusNotFound},
		{who: "vic", method: http.MethodGet, path: "/v1/runs/" + strings.Repeat("r", 300), want: http.StatusNotFound},
	})
	c.Temporal.SetDown(true)
	c.send(t, request{who: "vic", method: http.MethodGet, path: "/v1/runs/r1", want: http.StatusServiceUnavailable})
}

// TestOpenAPIConformanceOfDecisions: the approvals lists, and approving,
// rejecting and editing steps.
func TestOpenAPIConformanceOfDecisions(t *testing.T) {
	t.Parallel()
	c := setupConformance(t)
	hash := c.Pending("r1", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "", approvalstest.LookupStep(c.Now))
	hash3 := c.Pending("r3", 1, "issue_credit", approvalstest.CreditArgs, time.Hour, "reject")
	widget := c.Pending("r2", 1, "tune_widget", `{"name": "a", "count": 1}`, time.Hour, "")
	c.Asked("r5", 3, false)
	c.Unresolved("r4", 2)
	approve := `{"args_hash": "` + hash + `", "comment": "fine"}`
	c.sendAll(t, []request{
		{who: "vic", method: http.MethodGet, path: "/v1/approvals", want: http.StatusOK},
		{who: "vic", method: http.MethodGet, path: "/v1/approvals?state=needs_resolution&limit=10", want: http.StatusOK},
		{who: "vic", method: http.MethodGet, path: "/v1/approvals?limit=0", want: http.StatusBadRequest},
		{who: "vic", method: http.MethodGet, path: "/v1/approvals?state=open", want: http.StatusBadRequest},
		{who: "vic", method: http.MethodGet, path: "/v1/approvals?sort=deadline", want: http.StatusBadRequest},

		{who: "vic", method: http.MethodPost, path: "/v1/runs/r1/steps/2/approve", body: approve, want: http.StatusForbidden},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r1/steps/two/approve", body: approve, want: http.StatusBadRequest},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r1/steps/2/approve", body: `{"args_hash": 7}`, want: http.StatusBadRequest},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r1/steps/9/approve", body: approve, want: http.StatusNotFound},
		{who: "omar", method: http.MethodPost, path: "/v1/runs/r1/steps/2/approve", body: approve, want: http.StatusNotFound},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r1/steps/2/approve", body: `{"args_hash": "` + strings.Repeat("0", 64) + `"}`,
			want: http.StatusConflict},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r1/steps/2/approve", body: approve, want: http.StatusAccepted},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r1/steps/2/approve", body: approve, want: http.StatusOK},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r1/steps/2/reject", body: approve, want: http.StatusConflict},
		{who: "ops", method: http.MethodPost, path: "/v1/runs/r3/steps/1/reject", body: `{"args_hash": "` + hash3 + `"}`, want: http.StatusAccepted},

		{who: "dana", method: http.MethodPost, path: "/v1/runs/r2/steps/1/edit", body: `{"args_hash": "` + widget + `", "args": {"name": "a", "count": 11}}`,
			want: http.StatusUnprocessableEntity},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r2/steps/1/edit", body: `{"args_hash": "` + widget + `", "args": {"name": "b", "count": 2}}`,
			want: http.StatusAccepted},
		{who: "vic", method: http.MethodGet, path: "/v1/approvals?state=decided", want: http.StatusOK},
		{who: "vic", method: http.MethodGet, path: "/v1/runs/r5", want: http.StatusOK},
	})
}

// TestOpenAPIConformanceOfAnswers: answering a step's questions.
func TestOpenAPIConformanceOfAnswers(t *testing.T) {
	t.Parallel()
	c := setupConformance(t)
	c.Asked("r5", 3, false)
	c.Asked("r6", 1, false, "ops")
	accept := `{"action": "accept", "content": {"size": "M"}, "note": "as ordered"}`
	c.sendAll(t, []request{
		{who: "vic", method: http.MethodPost, path: "/v1/runs/r5/steps/3/answer", body: accept, want: http.StatusForbidden},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r6/steps/1/answer", body: accept, want: http.StatusForbidden},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r5/steps/3/answer", body: `{"action": "accept", "content": {"size": "XL"}}`,
			want: http.StatusBadRequest},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r5/steps/4/answer", body: accept, want: http.StatusNotFound},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r5/steps/3/answer", body: accept, want: http.StatusAccepted},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r5/steps/3/answer", body: accept, want: http.StatusOK},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r5/steps/3/answer", body: `{"answers": {"size": {"action": "decline"}}}`,
			want: http.StatusConflict},
	})
}

// TestOpenAPIConformanceOfResolutions: resolving a step whose outcome is
// unknown, and asking the provider again.
func TestOpenAPIConformanceOfResolutions(t *testing.T) {
	t.Parallel()
	desk := &approvalstest.GiftDesk{}
	c := setupConformance(t, func(cfg *Config) { cfg.Tools = approvalstest.GiftTools(t, desk) })
	c.RecordGiftSteps()
	c.sendAll(t, []request{
		{who: "vic", method: http.MethodGet, path: "/v1/approvals?state=needs_resolution", want: http.StatusOK},
		{who: "vic", method: http.MethodGet, path: "/v1/runs/r1", want: http.StatusOK},
		{who: "vic", method: http.MethodPost, path: "/v1/runs/r1/steps/2/check", want: http.StatusForbidden},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r1/steps/0/check", want: http.StatusBadRequest},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r1/steps/5/check", want: http.StatusNotFound},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r2/steps/2/check", want: http.StatusConflict},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r1/steps/2/check", want: http.StatusOK},
	})
	desk.Set(false, errors.New("connection reset by peer"))
	c.send(t, request{who: "dana", method: http.MethodPost, path: "/v1/runs/r1/steps/2/check", want: http.StatusBadGateway})
	desk.Set(true, nil)
	c.send(t, request{who: "dana", method: http.MethodPost, path: "/v1/runs/r1/steps/2/check", want: http.StatusOK})

	resolve := `{"outcome": "not_applied", "note": "the provider has no trace of it"}`
	c.sendAll(t, []request{
		{who: "vic", method: http.MethodPost, path: "/v1/runs/r2/steps/2/resolve", body: resolve, want: http.StatusForbidden},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r2/steps/2/resolve", body: `{"outcome": "maybe"}`, want: http.StatusBadRequest},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r2/steps/3/resolve", body: resolve, want: http.StatusNotFound},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r2/steps/2/resolve", body: resolve, want: http.StatusAccepted},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r2/steps/2/resolve", body: resolve, want: http.StatusOK},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r2/steps/2/resolve", body: `{"outcome": "applied", "result": {"id": "card_1"}}`,
			want: http.StatusConflict},
		{who: "vic", method: http.MethodGet, path: "/v1/approvals?state=needs_resolution", want: http.StatusOK},
	})
}

// TestOpenAPIConformanceOfControls: an operator's cancel, pause, resume
// and messages.
func TestOpenAPIConformanceOfControls(t *testing.T) {
	t.Parallel()
	c := setupConformance(t)
	c.Running("r1", false, approvalstest.LookupStep(c.Now))
	c.Running("r2", true)
	c.Pending("r3", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "", approvalstest.LookupStep(c.Now))
	c.Running("r4", false)
	message := `{"message_id": "m1", "text": "the customer called back"}`
	c.sendAll(t, []request{
		{who: "ops", method: http.MethodPost, path: "/v1/runs/r1/pause", body: `{"reason": "checking the stock"}`, want: http.StatusOK},
		{who: "ops", method: http.MethodPost, path: "/v1/runs/r1/resume", want: http.StatusOK},
		{who: "dana", method: http.MethodPost, path: "/v1/runs/r1/pause", want: http.StatusForbidden},
		{who: "ops", method: http.MethodPost, path: "/v1/runs/r1/pause", body: `{"why": "x"}`, want: http.StatusBadRequest},
		{who: "ops", method: http.MethodPost, path: "/v1/runs/nope/pause", want: http.StatusNotFound},
		{who: "omar", method: http.MethodPost, path: "/v1/runs/r1/pause", want: http.StatusNotFound},
		{who: "ops", method: http.MethodPost, path: "/v1/runs/r1/messages", body: message, want: http.StatusOK},
		{who: "ops", method: http.MethodPost, path: "/v1/runs/r1/messages", body: message, want: http.StatusOK},
		{who: "ops", method: http.MethodPost, path: "/v1/runs/r1/messages", body: `{"message_id": "m2"}`, want: http.StatusBadRequest},
		{who: "vic", method: http.MethodPost, path: "/v1/runs/r1/messages", body: message, want: http.StatusForbidden},
		{who: "ops", method: http.MethodPost, path: "/v1/runs/r2/messages", body: message, want: http.StatusConflict},
		{who: "ops", method: http.MethodPost, path: "/v1/runs/r3/cancel", want: http.StatusBadRequest},
		{who: "ops", method: http.MethodPost, path: "/v1/runs/r3/cancel", body: `{"reason": "wrong customer"}`, want: http.StatusOK},
		{who: "ops", method: http.MethodPost, path: "/v1/runs/r3/pause", want: http.StatusConflict},
		{who: "vic", method: http.MethodGet, path: "/v1/runs/r3", want: http.StatusOK},
		{who: "vic", method: http.MethodGet, path: "/v1/runs/r1", want: http.StatusOK},
		{who: "vic", method: http.MethodGet, path: "/v1/approvals?state=decided", want: http.StatusOK},
	})
	c.Temporal.End("r4", workflows.RunCompleted)
	c.send(t, request{who: "ops", method: http.MethodPost, path: "/v1/runs/r4/pause", want: http.StatusConflict})
	c.Temporal.SetDown(true)
	c.send(t, request{who: "ops", method: http.MethodPost, path: "/v1/runs/r1/pause", want: http.StatusServiceUnavailable})
}

// TestOpenAPIConformanceOfLimits: listing, reading, setting and deleting
// spend limits.
func TestOpenAPIConformanceOfLimits(t *testing.T) {
	t.Parallel()
	c := setupConformance(t)
	c.sendAll(t, []request{
		{who: "vic", method: http.MethodGet, path: "/v1/limits", want: http.StatusOK},
		{who: "ops", method: http.MethodPut, path: "/v1/limits/credits", body: approvalstest.CreditsCap, want: http.StatusOK},
		{who: "dana", method: http.MethodPut, path: "/v1/limits/credits", body: approvalstest.CreditsCap, want: http.StatusForbidden},
		{who: "ops", method: http.MethodPut, path: "/v1/limits/credits", body: `{"tools": ["no_such_tool"], "currency": "EUR", "amount": 1}`,
			want: http.StatusBadRequest},
	})
	c.SpendOn(1, 25900, false)
	c.SpendOn(2, 1000, true)
	c.sendAll(t, []request{
		{who: "vic", method: http.MethodGet, path: "/v1/limits", want: http.StatusOK},
		{who: "vic", method: http.MethodGet, path: "/v1/limits/credits", want: http.StatusOK},
		{who: "vic", method: http.MethodGet, path: "/v1/limits/other", want: http.StatusNotFound},
		{who: "omar", method: http.MethodGet, path: "/v1/limits/credits", want: http.StatusNotFound},
		{who: "dana", method: http.MethodDelete, path: "/v1/limits/credits", want: http.StatusForbidden},
		{who: "ops", method: http.MethodDelete, path: "/v1/limits/credits", want: http.StatusNoContent},
		{who: "ops", method: http.MethodDelete, path: "/v1/limits/credits", want: http.StatusNotFound},
	})
}

// served sends rq and skips the test while the API does not serve its
// route; otherwise it requires the status and checks the answer.
func (c *conformance) served(t *testing.T, rq request) []byte {
	t.Helper()
	resp, body := c.roundTrip(t, rq)
	if notServed(rq.method, resp.StatusCode, resp.Header, body) {
		t.Skipf("%s %s is not served yet (%d %s)", rq.method, rq.path, resp.StatusCode, bytes.TrimSpace(body))
	}
	require.Equal(t, rq.want, resp.StatusCode, "%s %s: %s", rq.method, rq.path, body)
	c.check(t, resp, body)
	return body
}

// TestOpenAPIConformanceOfRunList: GET /v1/runs.
func TestOpenAPIConformanceOfRunList(t *testing.T) {
	t.Parallel()
	c := setupConformance(t)
	c.Running("r1", false, approvalstest.LookupStep(c.Now))
	c.Pending("r2", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "", approvalstest.LookupStep(c.Now))
	c.Running("r3", true)
	c.Temporal.End("r3", workflows.RunCompleted)
	body := c.served(t, request{who: "vic", method: http.MethodGet, path: "/v1/runs?limit=2", want: http.StatusOK})
	var page struct {
		NextAfter string `json:"next_after"`
	}
	require.NoError(t, json.Unmarshal(body, &page))
	if page.NextAfter != "" {
		c.send(t, request{who: "vic", method: http.MethodGet, path: "/v1/runs?limit=2&after=" + page.NextAfter, want: http.StatusOK})
	}
	c.sendAll(t, []request{
		{who: "vic", method: http.MethodGet, path: "/v1/runs", want: http.StatusOK},
		{who: "vic", method: http.MethodGet, path: "/v1/runs?state=completed", want: http.StatusOK},
		{who: "vic", method: http.MethodGet, path: "/v1/runs?limit=0", want: http.StatusBadRequest},
		{who: "vic", method: http.MethodGet, path: "/v1/runs?limit=1001", want: http.StatusBadRequest},
		{who: "vic", method: http.MethodGet, path: "/v1/runs?state=sleeping", want: http.StatusBadRequest},
		{who: "vic", method: http.MethodGet, path: "/v1/runs?after=not-a-page", want: http.StatusBadRequest},
		{who: "", method: http.MethodGet, path: "/v1/runs", want: http.StatusUnauthorized},
	})
}

// streamed reads the answer to rq as Server-Sent Events for up to a
// second: it checks the status and headers against the document and each
// event's data against schema, and returns the events' ids.
func (c *conformance) streamed(t *testing.T, rq request, schema string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, rq.method, c.URL+rq.path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+c.Tokens[rq.who])
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, rq.want, resp.StatusCode)
	c.check(t, resp, nil, func(o *openapi3filter.Options) { o.ExcludeResponseBody = true })
	var ids []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id:"):
			ids = append(ids, strings.TrimSpace(strings.TrimPrefix(line, "id:")))
		case strings.HasPrefix(line, "data:") && schema != "":
			var v any
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data:")), &v), line)
			require.NoError(t, c.doc.ValidateSchemaJSON(c.doc.Components.Schemas[schema].Value, v), line)
		}
	}
	return ids
}

// TestOpenAPIConformanceOfRunEvents: GET /v1/runs/{run_id}/events, as
// pages and as a stream.
func TestOpenAPIConformanceOfRunEvents(t *testing.T) {
	t.Parallel()
	c := setupConformance(t)
	c.Pending("r1", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "", approvalstest.LookupStep(c.Now))
	c.served(t, request{who: "vic", method: http.MethodGet, path: "/v1/runs/r1/events", want: http.StatusOK})
	c.sendAll(t, []request{
		{who: "vic", method: http.MethodGet, path: "/v1/runs/r1/events?after=1&limit=10", want: http.StatusOK},
		{who: "vic", method: http.MethodGet, path: "/v1/runs/r1/events?limit=0", want: http.StatusBadRequest},
		{who: "vic", method: http.MethodGet, path: "/v1/runs/r1/events?limit=1001", want: http.StatusBadRequest},
		{who: "vic", method: http.MethodGet, path: "/v1/runs/r1/events?after=first", want: http.StatusBadRequest},
		{who: "vic", method: http.MethodGet, path: "/v1/runs/nope/events", want: http.StatusNotFound},
		{who: "omar", method: http.MethodGet, path: "/v1/runs/r1/events", want: http.StatusNotFound},
		{who: "", method: http.MethodGet, path: "/v1/runs/r1/events", want: http.StatusUnauthorized},
	})
	c.streamed(t, request{who: "vic", method: http.MethodGet, path: "/v1/runs/r1/events", want: http.StatusOK}, "Event")
	c.streamed(t, request{who: "vic", method: http.MethodGet, path: "/v1/runs/r1/events?protocol=ag-ui", want: http.StatusOK}, "")
}

// TestOpenAPIConformanceOfTenantEvents: GET /v1/events, as pages and as a
// stream.
func TestOpenAPIConformanceOfTenantEvents(t *testing.T) {
	t.Parallel()
	c := setupConformance(t)
	c.Pending("r1", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "", approvalstest.LookupStep(c.Now))
	body := c.served(t, request{who: "vic", method: http.MethodGet, path: "/v1/events", want: http.StatusOK})
	var page struct {
		NextAfter string `json:"next_after"`
	}
	require.NoError(t, json.Unmarshal(body, &page))
	c.sendAll(t, []request{
		{who: "vic", method: http.MethodGet, path: "/v1/events?after=" + page.NextAfter + "&limit=10", want: http.StatusOK},
		{who: "dana", method: http.MethodGet, path: "/v1/events?waiting_for=me&tool=issue_credit&run_state=waiting", want: http.StatusOK},
		{who: "vic", method: http.MethodGet, path: "/v1/events?limit=0", want: http.StatusBadRequest},
		{who: "vic", method: http.MethodGet, path: "/v1/events?after=%00not-a-cursor", want: http.StatusBadRequest},
		{who: "", method: http.MethodGet, path: "/v1/events", want: http.StatusUnauthorized},
	})
	c.streamed(t, request{who: "vic", method: http.MethodGet, path: "/v1/events", want: http.StatusOK}, "TenantEvent")
}

// TestOpenAPIConformanceChecksBodies: the check fails an answer the
// document does not allow, so that the tests above can fail.
func TestOpenAPIConformanceChecksBodies(t *testing.T) {
	t.Parallel()
	c := &conformance{doc: loadOpenAPI(t)}
	var err error
	c.router, err = gorillamux.NewRouter(c.doc)
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodGet, "/v1/limits/credits", nil)
	route, params, err := c.router.FindRoute(req)
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		status int
		body   string
	}{
		"a field of the wrong type": {http.StatusOK, `{"name": "credits", "tools": [], "currency": "EUR", "amount": "2000", "period": "utc_day",
			"other_currencies": "park", "updated_by": "ops", "updated_at": "2026-01-01T00:00:00Z", "since": "2026-01-01T00:00:00Z",
			"spent": 0, "held": 0, "ratio": 0}`},
		"a required field missing":    {http.StatusOK, `{"name": "credits"}`},
		"an error body of its own":    {http.StatusNotFound, `{"error": "not found"}`},
		"a status it does not give":   {http.StatusConflict, `{"error": {"code": "x", "message": "y"}}`},
		"an error with a stray field": {http.StatusNotFound, `{"error": {"code": "x", "message": "y", "hint": "z"}}`},
	} {
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
			Status:                 tc.status, Header: http.Header{"Content-Type": {"application/json; charset=utf-8"}},
			Options: &openapi3filter.Options{IncludeResponseStatus: true},
		}
		in.SetBodyBytes([]byte(tc.body))
		assert.Error(t, openapi3filter.ValidateResponse(context.Background(), in), name)
	}
}
