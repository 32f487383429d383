package payments

import (
	"cmp"
	"crypto/subtle"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// headerIdempotencyKey is the request header that names a refund request.
const headerIdempotencyKey = "Idempotency-Key"

// Server is a sandbox payment provider: its ledger, queued faults and the
// idempotency keys being processed. Serve it with Handler or Start.
type Server struct {
	cfg Config

	mu       sync.Mutex // guards ledger, faults and inFlight
	ledger   *ledger
	faults   faultQueue
	inFlight map[string]struct{}

	stopping chan struct{} // closed by stop; ends delays early
	stopOnce sync.Once
}

// New loads the ledger from cfg.DataDir (creating the directory if it is
// missing) and stores cfg.Payments.
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	l, err := openLedger(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if len(cfg.Payments) > 0 {
		if _, err := l.addPayments(cfg.Payments); err != nil {
			return nil, fmt.Errorf("seed payments: %w", err)
		}
	}
	return &Server{
		cfg: cfg, ledger: l, inFlight: map[string]struct{}{},
		stopping: make(chan struct{}),
	}, nil
}

// SeedPayment stores p, with its currency in lower case. Storing a payment
// again with the same values is a no-op; with different values it fails
// with ErrPaymentConflict.
func (s *Server) SeedPayment(p Payment) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.ledger.addPayments([]Payment{p})
	return err
}

// Payments returns the stored payments ordered by id.
func (s *Server) Payments() []Payment {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ledger.paymentList()
}

// Refunds returns every refund ever applied, ordered by creation time then
// id.
func (s *Server) Refunds() []Refund {
	s.mu.Lock()
	out := slices.Clone(s.ledger.refunds)
	s.mu.Unlock()
	sortRefunds(out)
	return out
}

// SetFault queues mode for the next count requests it applies to (POST
// /v1/refunds, or GET /v1/refunds for FaultReadUnavailable). Count 0 clears
// the mode. An unknown mode or a negative count fails with ErrUnknownFault.
func (s *Server) SetFault(mode string, count int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.faults.set(mode, count)
	return err
}

// Faults returns the queued faults in the order they were first set.
func (s *Server) Faults() []Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults.list()
}

// Handler returns the HTTP API. Every request must carry the API key as a
// bearer token.
func (s *Server) Handler() http.Handler {
	routes := s.routes()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		if err := s.serve(rec, r, routes); err != nil {
			writeError(rec, err)
		}
		fields := append([]zap.Field{
			zap.String("method", r.Method),
			zap.String("path", r.URL.Path),
			zap.Int("status", rec.status),
			zap.Bool("dropped", rec.dropped),
			zap.Duration("duration", time.Since(start)),
		}, rec.fields...)
		s.cfg.Log.Info("sandbox payments request", fields...)
	})
}

// route is a method and path the API answers.
type route struct{ method, path string }

// handlerFunc answers one route; a returned error is written as the answer.
type handlerFunc func(*recorder, *http.Request) error

// routes maps each route to its handler.
func (s *Server) routes() map[route]handlerFunc {
	return map[route]handlerFunc{
		{http.MethodPost, "/v1/refunds"}:          s.createRefund,
		{http.MethodGet, "/v1/refunds"}:           s.listRefunds,
		{http.MethodPost, "/v1/sandbox/payments"}: s.seedPayments,
		{http.MethodGet, "/v1/sandbox/payments"}:  s.listPayments,
		{http.MethodPost, "/v1/sandbox/faults"}:   s.setFault,
		{http.MethodGet, "/v1/sandbox/faults"}:    s.listFaults,
	}
}

// serve authenticates r and routes it.
func (s *Server) serve(w *recorder, r *http.Request, handlers map[route]handlerFunc) error {
	if err := s.authenticate(r); err != nil {
		return err
	}
	if h, ok := handlers[route{r.Method, r.URL.Path}]; ok {
		return h(w, r)
	}
	for rt := range handlers {
		if rt.path == r.URL.Path {
			return failf(http.StatusMethodNotAllowed, TypeInvalidRequest, "", "",
				"%s is not allowed on %s", r.Method, r.URL.Path)
		}
	}
	return failf(http.StatusNotFound, TypeInvalidRequest, "", "",
		"unrecognized request URL (%s: %s)", r.Method, r.URL.Path)
}

// authenticate checks the Authorization header against the API key.
func (s *Server) authenticate(r *http.Request) error {
	h := r.Header.Get("Authorization")
	if h == "" {
		return failf(http.StatusUnauthorized, TypeAuthentication, "", "",
			"no API key provided; send Authorization: Bearer <key>")
	}
	token, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(token), []byte(s.cfg.APIKey)) != 1 {
		return failf(http.StatusUnauthorized, TypeAuthentication, "", "", "invalid API key")
	}
	return nil
}

// stop ends every delay in progress; the delayed requests answer 503.
func (s *Server) stop() {
	s.stopOnce.Do(func() { close(s.stopping) })
}

// sortRefunds orders refunds by creation time, then id.
func sortRefunds(rs []Refund) {
	slices.SortFunc(rs, func(a, b Refund) int {
		return cmp.Or(cmp.Compare(a.Created, b.Created), cmp.Compare(a.ID, b.ID))
	})
}

// recorder remembers the status answered, whether the connection was
// dropped, and the fields a handler adds to the request's log line.
type recorder struct {
	http.ResponseWriter
	status  int
	dropped bool
	fields  []zap.Field
}

// WriteHeader records status.
func (w *recorder) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

// Write records a 200 if no status was written.
func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// annotate adds fields to the request's log line.
func (w *recorder) annotate(fields ...zap.Field) { w.fields = append(w.fields, fields...) }
