package approvals

import (
	"errors"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/spend"
	"github.com/oncerun/oncerun/internal/untrusted"
)

// Limit is a spend cap of the token's tenant as the API shows it: what
// its tools may spend in one currency per period, and where it stands in
// its current window.
type Limit struct {
	Name string `json:"name"`
	// Tools are the tools whose calls count against the cap.
	Tools []string `json:"tools"`
	// Currency is an ISO 4217 code; Amount the cap in its minor units.
	Currency string `json:"currency"`
	Amount   int64  `json:"amount"`
	// Period is "utc_day" (the UTC calendar day) or "rolling_24h".
	Period string `json:"period"`
	// OtherCurrencies is what a call of one of Tools in a currency no cap
	// of that tool names does: "park" waits for an approver, "allow" runs.
	OtherCurrencies string    `json:"other_currencies"`
	UpdatedBy       string    `json:"updated_by"`
	UpdatedAt       time.Time `json:"updated_at"`
	// Since is the start of the current window.
	Since time.Time `json:"since"`
	// Spent is what calls applied within the window; Held what external
	// calls whose outcome is not known yet reserve. Both count.
	Spent int64 `json:"spent"`
	Held  int64 `json:"held"`
	// Ratio is (Spent+Held)/Amount: 1 is the cap reached.
	Ratio float64 `json:"ratio"`
}

// LimitList is the body of GET /v1/limits: the tenant's caps, by name.
type LimitList struct {
	Limits []Limit `json:"limits"`
}

// LimitRequest is the body of PUT /v1/limits/{name}, which creates the cap
// or replaces it whole.
type LimitRequest struct {
	// Tools are registered tools that declare an amount with a currency
	// field. Required.
	Tools []string `json:"tools"`
	// Currency is an ISO 4217 code, such as EUR. Required.
	Currency string `json:"currency"`
	// Amount is the cap in the currency's minor units (200000 is 2,000.00
	// EUR), above 0. Required.
	Amount int64 `json:"amount"`
	// Period is "utc_day" (default) or "rolling_24h".
	Period string `json:"period,omitempty"`
	// OtherCurrencies is "park" (default) or "allow": see Limit.
	OtherCurrencies string `json:"other_currencies,omitempty"`
}

// limitOf is a cap and its usage as the API shows them.
func limitOf(u spend.Usage) Limit {
	return Limit{Name: u.Name, Tools: u.Tools, Currency: u.Currency, Amount: u.Amount, Period: u.Period,
		OtherCurrencies: u.OtherCurrencies,
		UpdatedBy:       u.UpdatedBy, UpdatedAt: u.UpdatedAt, Since: u.Since, Spent: u.Spent, Held: u.Held, Ratio: u.Ratio}
}

// limits lists the tenant's caps with their usage. The tenant is the
// token's, as everywhere.
func (s *Server) limits(w http.ResponseWriter, r *http.Request, id Identity) {
	limits, err := s.Limits(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, LimitList{Limits: limits})
}

// limit answers GET /v1/limits/{name}: 404 when the tenant has no cap of
// that name, whoever else has one.
func (s *Server) limit(w http.ResponseWriter, r *http.Request, id Identity) {
	u, err := s.getLimit(r, id, r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, limitOf(u))
}

func (s *Server) getLimit(r *http.Request, id Identity, name string) (spend.Usage, error) {
	if !spend.ValidName(name) {
		return spend.Usage{}, noLimit(name)
	}
	ctx, cancel := s.dbContext(r.Context())
	defer cancel()
	u, err := spend.GetCap(ctx, s.cfg.Pool, id.Tenant, name)
	if errors.Is(err, spend.ErrNotFound) {
		return u, noLimit(name)
	}
	return u, err
}

func noLimit(name string) *APIError {
	return errorf(http.StatusNotFound, "not_found", "no limit %q", untrusted.Cut(name, 64))
}

// setLimit answers PUT /v1/limits/{name}: an operator creates the cap or
// replaces it, checked against the service's tools (spend.CheckCap), and
// gets it back with its usage. A refusal names the field.
func (s *Server) setLimit(w http.ResponseWriter, r *http.Request, id Identity) {
	if !id.Role.CanStart() {
		s.fail(w, r, errorf(http.StatusForbidden, "forbidden", "%s is %s; setting limits takes an operator token", id.Name, withArticle(id.Role)))
		return
	}
	var req LimitRequest
	if bad := s.decodeBody(w, r, &req); bad != nil {
		s.fail(w, r, bad)
		return
	}
	if s.cfg.Tools == nil {
		s.fail(w, r, errorf(http.StatusInternalServerError, "internal", "this service has no tool registry (Config.Tools) to check limits against"))
		return
	}
	c := spend.Cap{Tenant: id.Tenant, Name: r.PathValue("name"), Tools: req.Tools, Currency: req.Currency, Amount: req.Amount, Period: req.Period,
		OtherCurrencies: req.OtherCurrencies}
	if err := spend.CheckCap(s.cfg.Tools, &c); err != nil {
		s.fail(w, r, errorf(http.StatusBadRequest, "invalid_request", "%s", err))
		return
	}
	ctx, cancel := s.dbContext(r.Context())
	defer cancel()
	if err := spend.SetCap(ctx, s.cfg.Pool, &c, id.Name); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("limit set", zap.String("tenant", id.Tenant), zap.String("limit", c.Name), zap.Strings("tools", c.Tools),
		zap.String("currency", c.Currency), zap.Int64("amount", c.Amount), zap.String("period", c.Period),
		zap.String("by", id.Name), zap.String("remote_addr", RemoteAddr(r)))
	u, err := spend.GetCap(ctx, s.cfg.Pool, id.Tenant, c.Name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, limitOf(u))
}

// deleteLimit answers DELETE /v1/limits/{name}: 204 once an operator
// removed the cap, 404 when the tenant has none of that name.
func (s *Server) deleteLimit(w http.ResponseWriter, r *http.Request, id Identity) {
	if !id.Role.CanStart() {
		s.fail(w, r, errorf(http.StatusForbidden, "forbidden", "%s is %s; deleting limits takes an operator token", id.Name, withArticle(id.Role)))
		return
	}
	name := r.PathValue("name")
	if !spend.ValidName(name) {
		s.fail(w, r, noLimit(name))
		return
	}
	ctx, cancel := s.dbContext(r.Context())
	defer cancel()
	err := spend.DeleteCap(ctx, s.cfg.Pool, id.Tenant, name)
	switch {
	case errors.Is(err, spend.ErrNotFound):
		s.fail(w, r, noLimit(name))
		return
	case err != nil:
		s.fail(w, r, err)
		return
	}
	s.log.Info("limit deleted", zap.String("tenant", id.Tenant), zap.String("limit", name), zap.String("by", id.Name),
		zap.String("remote_addr", RemoteAddr(r)))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}
