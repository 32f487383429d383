package payments

import (
	"net/http"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
)

// maxKeyLength is the longest Idempotency-Key accepted, in characters.
const maxKeyLength = 255

// refundBody is the JSON body of POST /v1/refunds.
type refundBody struct {
	PaymentID *string `json:"payment_id"`
	Amount    *int64  `json:"amount"`
	Currency  *string `json:"currency"`
}

// createRefund answers POST /v1/refunds.
func (s *Server) createRefund(w *recorder, r *http.Request) error {
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	w.annotate(zap.String("idempotency_key", key))
	req, err := decodeRefund(r)
	if err != nil {
		return err
	}
	req.Traceparent = r.Header.Get("traceparent")
	f, faulty, err := s.pickFault(r, false)
	if err != nil {
		return err
	}
	if faulty {
		w.annotate(zap.String("fault", f.mode))
		if f.kind == FaultErrorBeforeApply {
			return injected(f)
		}
	}
	if !s.claim(key) {
		return failf(http.StatusConflict, TypeIdempotency, CodeRequestInProgress, headerIdempotencyKey,
			"another request with Idempotency-Key %q is still being processed; retry later", key)
	}
	refund, replayed, err := s.apply(key, req, f)
	switch {
	case faulty && f.kind == FaultDropAfterApply:
		w.dropped = true
		return dropConnection(w)
	case faulty && f.kind == FaultErrorAfterApply:
		return injected(f)
	case err != nil:
		return err
	}
	w.annotate(zap.String("refund_id", refund.ID), zap.Bool("replayed", replayed))
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, http.StatusOK, refund)
	return nil
}

// apply holds the request for a delay fault, then applies it and releases
// key. The caller must have claimed key.
func (s *Server) apply(key string, req refundRequest, f fault) (Refund, bool, error) {
	defer s.release(key)
	if f.delay > 0 {
		t := time.NewTimer(f.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.stopping:
			return Refund{}, false, failf(http.StatusServiceUnavailable, TypeAPI, CodeUnavailable, "",
				"the sandbox is shutting down; nothing was applied")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ledger.applyRefund(key, req, s.cfg.Now(), s.cfg.KeyRetention)
}

// claim marks key as in progress; false if it already is.
func (s *Server) claim(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, busy := s.inFlight[key]; busy {
		return false
	}
	s.inFlight[key] = struct{}{}
	return true
}

// release ends key's processing.
func (s *Server) release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.inFlight, key)
}

// idempotencyKey reads the required Idempotency-Key header.
func idempotencyKey(r *http.Request) (string, error) {
	key := r.Header.Get(headerIdempotencyKey)
	if key == "" {
		return "", missingParam(headerIdempotencyKey,
			"the Idempotency-Key header is required: send 1 to %d characters naming this refund", maxKeyLength)
	}
	if n := utf8.RuneCountInString(key); n > maxKeyLength {
		return "", badRequest(headerIdempotencyKey,
			"the Idempotency-Key header must be at most %d characters, got %d", maxKeyLength, n)
	}
	return key, nil
}

// decodeRefund reads and checks the body of a refund request.
func decodeRefund(r *http.Request) (refundRequest, error) {
	var b refundBody
	if err := decodeBody(r, &b); err != nil {
		return refundRequest{}, err
	}
	switch {
	case b.PaymentID == nil || *b.PaymentID == "":
		return refundRequest{}, missingParam("payment_id", "payment_id is required")
	case b.Amount == nil:
		return refundRequest{}, missingParam("amount", "amount is required: an integer number of minor units")
	case *b.Amount <= 0:
		return refundRequest{}, badRequest("amount", "amount must be a positive integer, got %d", *b.Amount)
	case b.Currency == nil:
		return refundRequest{}, missingParam("currency", "currency is required: a three-letter ISO code")
	}
	cur, ok := normaliseCurrency(*b.Currency)
	if !ok {
		return refundRequest{}, badRequest("currency", "currency must be three letters, got %q", *b.Currency)
	}
	return refundRequest{PaymentID: *b.PaymentID, Amount: *b.Amount, Currency: cur}, nil
}

// pickFault returns the fault for this request: the Sandbox-Fault header's
// if it is set (nothing queued is consumed then), else one count of the
// oldest queued fault of the request's kind.
func (s *Server) pickFault(r *http.Request, read bool) (fault, bool, error) {
	if h := r.Header.Get(HeaderFault); h != "" {
		f, err := parseFault(h)
		if err != nil {
			return fault{}, false, badRequest(HeaderFault, "%s header: %s", HeaderFault, err)
		}
		if f.read() != read {
			return fault{}, false, badRequest(HeaderFault, "%s header: fault %s does not apply to %s %s",
				HeaderFault, f.mode, r.Method, r.URL.Path)
		}
		return f, true, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.faults.take(read)
	return f, ok, nil
}

// injected is the 500 answer of an injected fault.
func injected(f fault) error {
	return failf(http.StatusInternalServerError, TypeAPI, "", "",
		"injected fault %s: the request may or may not have been applied", f.mode)
}

// dropConnection closes the request's connection without an answer.
func dropConnection(w http.ResponseWriter) error {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Connections that cannot be taken over (HTTP/2) are reset instead.
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close() // the client sees the connection end either way
	return nil
}
