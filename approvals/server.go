package approvals

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/events"
	"github.com/oncerun/oncerun/internal/httpserver"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/internal/telemetry"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// Defaults of [Config].
const (
	DefaultAddr         = "127.0.0.1:8088"
	DefaultMaxBodyBytes = 64 << 10
	DefaultResolveGrace = time.Minute
	DefaultQueryTimeout = 10 * time.Second
	DefaultDBTimeout    = 5 * time.Second
	// MaxCommentBytes bounds a decision's comment.
	MaxCommentBytes = workflows.MaxCommentBytes
	// retryAfter is the Retry-After, in seconds, of a 503.
	retryAfter = "2"
)

// Config configures a [Server].
type Config struct {
	// Runs starts runs, reads their status and signals decisions. Required.
	Runs *Runs
	// Pool holds the approvals tables (internal/approvalstore). Required.
	Pool *pgxpool.Pool
	// Tokens authenticates requests. Required.
	Tokens TokenSource
	// Tools, when set, checks the calls of a plan before a run starts, so
	// that a bad plan is a 400 rather than a run that fails; shows the
	// amounts tools declare as money; and runs a tool's paired read when a
	// person asks the provider again (POST …/check).
	Tools *tools.Registry
	// Log receives one line per refused or failed request and per decision.
	// Default: no logging.
	Log *zap.Logger
	// MaxBodyBytes bounds a request body. Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// ResolveGrace is how long a recorded decision may wait for its run to
	// apply it, and a passed deadline for the run to record the expiry,
	// before the step is listed as needing resolution. Default
	// DefaultResolveGrace.
	ResolveGrace time.Duration
	// QueryTimeout bounds each question to Temporal (a run's status, a
	// signal). Default DefaultQueryTimeout.
	QueryTimeout time.Duration
	// DBTimeout bounds the database work of one request, waiting for a
	// pooled connection included; a request whose database does not answer
	// in time is answered 503 with a Retry-After header. Default
	// DefaultDBTimeout (APPROVALS_DB_TIMEOUT).
	DBTimeout time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, DefaultMaxBodyBytes)
	c.ResolveGrace = cmp.Or(c.ResolveGrace, DefaultResolveGrace)
	c.QueryTimeout = cmp.Or(c.QueryTimeout, DefaultQueryTimeout)
	c.DBTimeout = cmp.Or(c.DBTimeout, DefaultDBTimeout)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Runs == nil:
		return errors.New("approvals config: Runs is required")
	case c.Pool == nil:
		return errors.New("approvals config: Pool is required")
	case c.Tokens == nil:
		return errors.New("approvals config: Tokens is required")
	case c.MaxBodyBytes < 0:
		return errors.New("approvals config: MaxBodyBytes must not be negative")
	case c.QueryTimeout < 0:
		return errors.New("approvals config: QueryTimeout must not be negative")
	case c.DBTimeout < 0:
		return errors.New("approvals config: DBTimeout must not be negative")
	case c.ResolveGrace < 0:
		return errors.New("approvals config: ResolveGrace must not be negative")
	}
	return nil
}

// Server is the approvals service. Its methods are the API in Go: the
// HTTP handlers of /v1 and the inbox (package approvals/inbox) take every
// decision, answer and operator's request through them.
type Server struct {
	cfg Config
	log *zap.Logger
	// hub wakes the event streams (see eventHub).
	hubOnce sync.Once
	hub     *events.Hub
	// reads shares a read of a run's log among its followers.
	reads singleflight.Group
}

// New checks cfg and builds a server.
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// The signal of a recorded decision has QueryTimeout too.
	rc := *cfg.Runs
	rc.SignalTimeout = cfg.QueryTimeout
	// Edits are checked against the tools the server knows.
	if rc.Tools == nil {
		rc.Tools = cfg.Tools
	}
	cfg.Runs = &rc
	return &Server{cfg: cfg, log: cfg.Log}, nil
}

// Handler serves the API under /v1, and 404 elsewhere (package
// approvals/inbox serves the inbox in front of it). Writes from another
// origin are refused, whatever their credentials.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	// resource serves pattern with a handler per method.
	resource := func(pattern string, byMethod map[string]func(http.ResponseWriter, *http.Request, Identity)) {
		methods := slices.Sorted(maps.Keys(byMethod))
		for _, m := range methods {
			mux.Handle(m+" "+pattern, s.authenticated(byMethod[m]))
		}
		// The same path with any other method: a JSON 405.
		allow := strings.Join(methods, ", ")
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed",
				fmt.Sprintf("%s %s: use %s", r.Method, pattern, allow))
		})
	}
	api := func(pattern string, method string, h func(http.ResponseWriter, *http.Request, Identity)) {
		resource(pattern, map[string]func(http.ResponseWriter, *http.Request, Identity){method: h})
	}
	resource("/v1/runs", map[string]func(http.ResponseWriter, *http.Request, Identity){
		http.MethodPost: s.startRun, http.MethodGet: s.listRunsAPI,
	})
	api("/v1/runs/{run_id}/events", http.MethodGet, s.RunEvents)
	api("/v1/events", http.MethodGet, s.TenantEvents)
	api("/v1/runs/{run_id}", http.MethodGet, s.runStatus)
	api("/v1/approvals", http.MethodGet, s.listApprovals)
	api("/v1/runs/{run_id}/steps/{step}/approve", http.MethodPost, s.decideAPI("approve"))
	api("/v1/runs/{run_id}/steps/{step}/reject", http.MethodPost, s.decideAPI("reject"))
	api("/v1/runs/{run_id}/steps/{step}/edit", http.MethodPost, s.editAPI)
	api("/v1/runs/{run_id}/steps/{step}/resolve", http.MethodPost, s.resolveAPI)
	api("/v1/runs/{run_id}/steps/{step}/answer", http.MethodPost, s.answerAPI)
	api("/v1/runs/{run_id}/steps/{step}/check", http.MethodPost, s.checkAPI)
	api("/v1/runs/{run_id}/cancel", http.MethodPost, s.controlAPI(approvalstore.ActionCancel))
	api("/v1/runs/{run_id}/pause", http.MethodPost, s.controlAPI(approvalstore.ActionPause))
	api("/v1/runs/{run_id}/resume", http.MethodPost, s.controlAPI(approvalstore.ActionResume))
	api("/v1/runs/{run_id}/messages", http.MethodPost, s.messageAPI)
	api("/v1/limits", http.MethodGet, s.limits)
	resource("/v1/limits/{name}", map[string]func(http.ResponseWriter, *http.Request, Identity){
		http.MethodGet: s.limit, http.MethodPut: s.setLimit, http.MethodDelete: s.deleteLimit,
	})
	mux.HandleFunc("GET /v1/openapi.json", s.openAPIDocument)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no API endpoint %s", r.URL.Path))
	})

	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, "cross_origin", "cross-origin requests that change state are refused")
	}))
	return s.recover(cop.Handler(mux))
}

// recover answers a panic with a JSON 500 and logs it; the server goes on.
func (s *Server) recover(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("approvals handler panicked", zap.String("path", r.URL.Path), zap.Any("panic", v))
				writeError(w, http.StatusInternalServerError, "internal", "internal error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// authenticated runs h with the identity of the request's bearer token, or
// answers 401.
func (s *Server) authenticated(h func(http.ResponseWriter, *http.Request, Identity)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := bearer(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="oncerun"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", "an Authorization: Bearer <token> header is required")
			return
		}
		id, ok := s.cfg.Tokens.Lookup(tok)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="oncerun", error="invalid_token"`)
			s.log.Warn("approvals request with an unknown token", zap.String("path", r.URL.Path),
				zap.String("remote_addr", RemoteAddr(r)))
			writeError(w, http.StatusUnauthorized, "unauthorized", "the bearer token is not valid")
			return
		}
		telemetry.LinkCaller(r.Context())
		h(w, r, id)
	})
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// RemoteAddr is the address the request came from: the connection's peer,
// without the port. Forwarded headers are not trusted.
func RemoteAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// APIError is a refusal of the API, as its HTTP answer carries it: the
// status, a stable code and a message for people. The Server's methods
// return one for every refusal; the Client returns one, wrapped, for every
// error answer.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string { return e.Message }

func errorf(status int, code, format string, args ...any) *APIError {
	return &APIError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// refusal is the API's answer to an error of the path every decision and
// answer takes (doing is "deciding" or "resolving", for a forbidden one's
// message): the transport's own refusal as it was; a refusal of
// approvalstore's by its sentinel; a recorded decision whose signal failed
// as 409 run_closed when the run can never apply it, 503 otherwise. Other
// errors are returned as they are (see fail).
func refusal(err error, id Identity, doing string) error {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae
	}
	var ue *runs.UndeliveredError
	if errors.As(err, &ue) {
		if errors.Is(ue.Err, runs.ErrNotFound) {
			return errorf(http.StatusConflict, "run_closed", "%s", ue.Error())
		}
		return errorf(http.StatusServiceUnavailable, "unavailable", "%s", ue.Error())
	}
	var re *approvalstore.RefusedError
	if !errors.As(err, &re) {
		return err
	}
	switch re.Err {
	case approvalstore.ErrNotFound, approvalstore.ErrNotPending:
		return errorf(http.StatusNotFound, "not_found", "%s", re.Message)
	case approvalstore.ErrForbidden:
		return errorf(http.StatusForbidden, "forbidden", "%s is a %s; %s takes an approver or operator token", id.Name, id.Role, doing)
	case approvalstore.ErrInvalid:
		return errorf(http.StatusBadRequest, "invalid_request", "%s", re.Message)
	case approvalstore.ErrEditInvalid:
		return errorf(http.StatusUnprocessableEntity, "edit_refused", "%s", re.Message)
	case approvalstore.ErrConflict:
		return errorf(http.StatusConflict, "decision_conflict", "%s", re.Message)
	case approvalstore.ErrWithdrawn:
		return errorf(http.StatusConflict, "approval_withdrawn", "%s", re.Message)
	case approvalstore.ErrArgsHashMismatch:
		return errorf(http.StatusConflict, "args_hash_mismatch", "%s", re.Message)
	case approvalstore.ErrResolvedOtherwise:
		return errorf(http.StatusConflict, "resolved_otherwise", "%s", re.Message)
	case approvalstore.ErrRoundChanged:
		return errorf(http.StatusConflict, "round_changed", "%s", re.Message)
	}
	return err
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail says what went wrong: a stable code and a message for people.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, ErrorBody{Error: ErrorDetail{Code: code, Message: message}})
}

// fail answers err: an *APIError as it says; a database that did not answer
// in time, or could not be reached, as a 503 with a Retry-After header;
// anything else as a 500 that is logged and not shown.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ae *APIError
	if !errors.As(err, &ae) && Unavailable(err) {
		ae = errorf(http.StatusServiceUnavailable, "unavailable",
			"the database could not be reached or did not answer within %s; try again", s.cfg.DBTimeout)
		s.log.Warn("approvals request: database unavailable", zap.String("method", r.Method), zap.String("path", r.URL.Path),
			zap.Error(err))
	}
	if ae != nil {
		if ae.Status >= 500 {
			s.log.Error("approvals request failed", zap.String("method", r.Method), zap.String("path", r.URL.Path),
				zap.Int("status", ae.Status), zap.String("error", ae.Message))
		}
		if ae.Status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", retryAfter)
		}
		writeError(w, ae.Status, ae.Code, ae.Message)
		return
	}
	s.log.Error("approvals request failed", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))
	writeError(w, http.StatusInternalServerError, "internal", "internal error; the server log has the details")
}

// Unavailable reports an error of a database that did not answer within
// the request's deadline or could not be reached: the request may succeed
// when it is sent again.
func Unavailable(err error) bool {
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) ||
		errors.As(err, &connErr) || errors.As(err, &netErr)
}

// dbContext bounds a request's database work by Config.DBTimeout.
func (s *Server) dbContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.DBTimeout)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// decodeBody reads a JSON request body into v: at most MaxBytes bytes, one
// object, decoded strictly (see untrusted.Decode: field names exactly as
// documented, none twice, none unknown). An empty body is an empty object.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any) *APIError {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return errorf(http.StatusUnsupportedMediaType, "unsupported_media_type",
				"the request body must be application/json, not %q", ct)
		}
	}
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	raw, err := io.ReadAll(body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return errorf(http.StatusRequestEntityTooLarge, "body_too_large",
				"the request body is larger than %d bytes", tooBig.Limit)
		}
		return errorf(http.StatusBadRequest, "invalid_request", "read the request body: %s", err)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	if err := untrusted.Decode(raw, v); err != nil {
		return errorf(http.StatusBadRequest, "invalid_request", "the request body is not valid: %s", err)
	}
	return nil
}

// ListenAndServe serves h on addr until ctx ends, then shuts down, giving
// requests in flight up to 10 seconds. The server has the limits of every
// server of oncerun (internal/httpserver: header, request, response and
// idle deadlines, a bound on headers, a cap on open connections). ready,
// when not nil, is called with the bound address once the listener is
// open.
func ListenAndServe(ctx context.Context, addr string, h http.Handler, log *zap.Logger, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("approvals server: listen on %s (APPROVALS_ADDR): %w", addr, err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	// Event streams last as long as their clients: they end when the
	// service shuts down, while other requests finish (see streamsEnd).
	streams := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), shutdownKey{}, ctx)))
	})
	srv := httpserver.New(streams, httpserver.Config{ErrorLog: zap.NewStdLog(log)})
	if ready != nil {
		ready(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("approvals server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("approvals server: shut down: %w", err)
	}
	return nil
}
