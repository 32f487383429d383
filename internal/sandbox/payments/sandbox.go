package payments

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
)

// seedPayments answers POST /v1/sandbox/payments: the body is one payment
// object or an array of them, stored all or none; the answer lists what is
// stored as {"data":[...]}.
func (s *Server) seedPayments(w *recorder, r *http.Request) error {
	var raw json.RawMessage
	if err := decodeBody(r, &raw); err != nil {
		return err
	}
	var ps []Payment
	if trimmed := bytes.TrimSpace(raw); len(trimmed) > 0 && trimmed[0] == '[' {
		if err := decodeStrict(raw, &ps); err != nil {
			return err
		}
	} else {
		var p Payment
		if err := decodeStrict(raw, &p); err != nil {
			return err
		}
		ps = []Payment{p}
	}
	if len(ps) == 0 {
		return malformed("no payments given; send a payment object or a non-empty array")
	}
	s.mu.Lock()
	stored, err := s.ledger.addPayments(ps)
	s.mu.Unlock()
	switch {
	case errors.Is(err, ErrPaymentConflict):
		return failf(http.StatusConflict, TypeInvalidRequest, CodeResourceAlreadyExists, "id", "%s", err)
	case errors.Is(err, ErrInvalidPayment):
		return malformed("%s", err)
	case err != nil:
		return err
	}
	writeJSON(w, http.StatusOK, map[string][]Payment{"data": stored})
	return nil
}

// listPayments answers GET /v1/sandbox/payments.
func (s *Server) listPayments(w *recorder, _ *http.Request) error {
	writeJSON(w, http.StatusOK, map[string][]Payment{"data": s.Payments()})
	return nil
}

// faultBody is the JSON body of POST /v1/sandbox/faults.
type faultBody struct {
	Mode  *string `json:"mode"`
	Count *int    `json:"count"`
}

// setFault answers POST /v1/sandbox/faults with the faults queued after
// the change.
func (s *Server) setFault(w *recorder, r *http.Request) error {
	var b faultBody
	if err := decodeBody(r, &b); err != nil {
		return err
	}
	if b.Mode == nil {
		return missingParam("mode", "mode is required")
	}
	if b.Count == nil {
		return missingParam("count", "count is required: how many requests the fault hits, 0 to clear it")
	}
	if *b.Count < 0 {
		return badRequest("count", "count must not be negative, got %d", *b.Count)
	}
	if err := s.SetFault(*b.Mode, *b.Count); err != nil {
		return badRequest("mode", "%s", err)
	}
	return s.listFaults(w, r)
}

// listFaults answers GET /v1/sandbox/faults with {"data":[...]}.
func (s *Server) listFaults(w *recorder, _ *http.Request) error {
	writeJSON(w, http.StatusOK, map[string][]Fault{"data": s.Faults()})
	return nil
}
