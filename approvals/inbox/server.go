package inbox

import (
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// API is what the inbox asks of the approvals service: *approvals.Server's
// methods, through which every decision, answer and operator's request of
// the inbox takes the path the HTTP API's take.
type API interface {
	// Handler serves the API, under /v1.
	Handler() http.Handler
	// DBTimeout is the database budget of one request, and MaxBodyBytes
	// the largest body one may carry: a page and a form of the inbox have
	// the API's.
	DBTimeout() time.Duration
	MaxBodyBytes() int64
	Identify(token string) (approvals.Identity, bool)
	Tool(name string) (tools.Tool, bool)
	Status(ctx context.Context, id approvals.Identity, runID string) (workflows.Status, error)
	List(ctx context.Context, id approvals.Identity, q approvals.ListQuery) ([]approvals.Item, error)
	Withdrawn(ctx context.Context, id approvals.Identity, period time.Duration, limit int) ([]approvals.Item, error)
	Approval(ctx context.Context, id approvals.Identity, runID string, step int64) (approvals.Item, error)
	ListRuns(ctx context.Context, id approvals.Identity, size int, token []byte) (approvals.RunPage, error)
	Limits(ctx context.Context, id approvals.Identity) ([]approvals.Limit, error)
	Decide(ctx context.Context, in approvals.DecideInput) (approvals.DecideResponse, error)
	Resolve(ctx context.Context, in approvals.ResolveInput) (approvals.ResolveResponse, error)
	Answer(ctx context.Context, in approvals.AnswerInput) (approvals.AnswerResponse, error)
	Check(ctx context.Context, in approvals.StepRequest) (approvals.CheckResponse, error)
	Control(ctx context.Context, in approvals.ControlInput) (approvals.Controlled, error)
	// RunEvents and TenantEvents serve a run's events and its tenant's,
	// as GET /v1/runs/{run_id}/events and GET /v1/events do: the inbox's
	// pages follow them (live.go).
	RunEvents(w http.ResponseWriter, r *http.Request, id approvals.Identity)
	TenantEvents(w http.ResponseWriter, r *http.Request, id approvals.Identity)
}

// Config configures an [Inbox].
type Config struct {
	// API is the approvals service. Required.
	API API
	// SecureCookies marks the inbox's cookies Secure, and names them with
	// the __Host- prefix, even when the request did not come over TLS to
	// this process (a proxy in front ends TLS). Cookies of a request that
	// came over TLS are always Secure and prefixed.
	SecureCookies bool
	// Log receives one line per refused form, login and failure. Default:
	// no logging.
	Log *zap.Logger
}

// Inbox is the approvals service's web page: the steps that wait for a
// person, the runs, the decided steps and the limits, with the forms that
// decide, edit, answer and control.
type Inbox struct {
	cfg   Config
	api   API
	log   *zap.Logger
	pages *template.Template
	// flashKey signs the flash cookie: drawn at New, so a message set
	// before a restart, or by another replica, is not shown.
	flashKey []byte
}

//go:embed templates/*.html
var templateFS embed.FS

// retryAfter is the Retry-After, in seconds, of a 503 page.
const retryAfter = "2"

// New checks cfg and builds an inbox.
func New(cfg Config) (*Inbox, error) {
	if cfg.API == nil {
		return nil, errors.New("inbox config: API is required")
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	pages, err := template.New("").Funcs(pageFuncs).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("inbox templates: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("inbox flash key: %w", err)
	}
	return &Inbox{cfg: cfg, api: cfg.API, log: cfg.Log, pages: pages, flashKey: key}, nil
}

// Handler serves the inbox at / and the API under /v1: the approvals
// service as one handler. Forms from another origin are refused, whatever
// their cookies.
func (s *Inbox) Handler() http.Handler {
	pages := http.NewServeMux()
	pages.HandleFunc("GET /{$}", s.inbox)
	pages.HandleFunc("GET /login", s.loginPage)
	pages.HandleFunc("POST /login", s.login)
	pages.HandleFunc("POST /logout", s.logout)
	pages.HandleFunc("GET /runs/{run_id}", s.runPage)
	pages.HandleFunc("GET /limits", s.limitsPage)
	pages.HandleFunc("GET /runs", s.runsPage)
	pages.HandleFunc("GET /decided", s.decidedPage)
	pages.HandleFunc("POST /runs/{run_id}/steps/{step}/decide", s.decideForm)
	pages.HandleFunc("POST /runs/{run_id}/steps/{step}/edit", s.editForm)
	pages.HandleFunc("POST /runs/{run_id}/steps/{step}/resolve", s.resolveForm)
	pages.HandleFunc("POST /runs/{run_id}/steps/{step}/answer", s.answerForm)
	pages.HandleFunc("POST /runs/{run_id}/steps/{step}/check", s.checkForm)
	pages.HandleFunc("POST /runs/{run_id}/cancel", s.controlForm(approvalstore.ActionCancel))
	pages.HandleFunc("POST /runs/{run_id}/pause", s.controlForm(approvalstore.ActionPause))
	pages.HandleFunc("POST /runs/{run_id}/resume", s.controlForm(approvalstore.ActionResume))
	s.handleLive(pages)
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.render(w, "error", page{Title: "Refused", Error: "Forms sent from another site are refused.", Status: http.StatusForbidden})
	}))

	mux := http.NewServeMux()
	mux.Handle("/v1/", s.api.Handler())
	mux.Handle("/", s.recover(cop.Handler(pages)))
	return mux
}

// recover answers a panic with a 500 page and logs it; the server goes on.
func (s *Inbox) recover(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("inbox handler panicked", zap.String("path", r.URL.Path), zap.Any("panic", v))
				http.Error(w, "internal error", http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// dbContext bounds a page's database work by the API's budget of one
// request: a form's decision and the lists shown after it share it.
func (s *Inbox) dbContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.api.DBTimeout())
}

// refused is a refusal of the inbox's own, as the API words one.
func refused(status int, code, format string, args ...any) *approvals.APIError {
	return &approvals.APIError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}
