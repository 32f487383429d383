package payments

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"go.uber.org/zap"
)

// listParams are the query parameters GET /v1/refunds accepts.
var listParams = []string{"payment_id", "idempotency_key", "created_gte"}

// refundFilter selects refunds; empty fields match everything.
type refundFilter struct {
	paymentID      string
	idempotencyKey string
	createdGTE     *int64
}

func (f refundFilter) match(r Refund) bool {
	return (f.paymentID == "" || r.PaymentID == f.paymentID) &&
		(f.idempotencyKey == "" || r.IdempotencyKey == f.idempotencyKey) &&
		(f.createdGTE == nil || r.Created >= *f.createdGTE)
}

// listRefunds answers GET /v1/refunds with {"data":[...]}, ordered by
// creation time then id.
func (s *Server) listRefunds(w *recorder, r *http.Request) error {
	filter, err := parseFilter(r.URL.RawQuery)
	if err != nil {
		return err
	}
	f, faulty, err := s.pickFault(r, true)
	if err != nil {
		return err
	}
	if faulty {
		w.annotate(zap.String("fault", f.mode))
		return failf(http.StatusServiceUnavailable, TypeAPI, CodeUnavailable, "",
			"refunds cannot be read right now; retry later")
	}
	s.mu.Lock()
	out := []Refund{}
	for _, rf := range s.ledger.refunds {
		if filter.match(rf) {
			out = append(out, rf)
		}
	}
	s.mu.Unlock()
	sortRefunds(out)
	writeJSON(w, http.StatusOK, map[string][]Refund{"data": out})
	return nil
}

// parseFilter reads the query string of GET /v1/refunds; unknown or
// repeated parameters are 400s.
func parseFilter(rawQuery string) (refundFilter, error) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return refundFilter{}, malformed("query string is malformed: %s", err)
	}
	for name, vals := range q {
		if !slices.Contains(listParams, name) {
			return refundFilter{}, unknownParam(name, "unknown query parameter %q; known are %v", name, listParams)
		}
		if len(vals) > 1 {
			return refundFilter{}, badRequest(name, "query parameter %q is given %d times; give it once", name, len(vals))
		}
	}
	f := refundFilter{paymentID: q.Get("payment_id"), idempotencyKey: q.Get("idempotency_key")}
	if q.Has("created_gte") {
		n, err := strconv.ParseInt(q.Get("created_gte"), 10, 64)
		if err != nil {
			return refundFilter{}, badRequest("created_gte", "created_gte must be unix seconds, got %q", q.Get("created_gte"))
		}
		f.createdGTE = &n
	}
	return f, nil
}
