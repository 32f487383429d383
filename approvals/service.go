package approvals

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/internal/spend"
	"github.com/oncerun/oncerun/tools"
)

// Controlled is what became of an operator's request: the run's status
// after it, whether it repeated one the run had taken, how many pending
// approvals a cancel withdrew.
type Controlled = runs.Controlled

// RunPage is one page of a tenant's runs, and the token of the next
// (empty on the last).
type RunPage = runs.RunPage

// maxRunPage bounds the size of a page of ListRuns.
const maxRunPage = 1000

// DBTimeout is the database budget of one request (Config.DBTimeout).
func (s *Server) DBTimeout() time.Duration { return s.cfg.DBTimeout }

// MaxBodyBytes bounds the body of one request (Config.MaxBodyBytes).
func (s *Server) MaxBodyBytes() int64 { return s.cfg.MaxBodyBytes }

// Identify returns the identity of an API token, if it is valid.
func (s *Server) Identify(token string) (Identity, bool) {
	return s.cfg.Tokens.Lookup(token)
}

// Tool returns the tool the service knows by name, if it knows one
// (Config.Tools).
func (s *Server) Tool(name string) (tools.Tool, bool) {
	if s.cfg.Tools == nil {
		return tools.Tool{}, false
	}
	return s.cfg.Tools.Lookup(name)
}

// ListQuery says which of a tenant's steps to list.
type ListQuery struct {
	View View
	// Limit bounds the list, from 1 to MaxListLimit.
	Limit int
	// Offset skips the first decided steps, for the pages of ViewDecided;
	// other views take none.
	Offset int
}

// List lists the approvals of the identity's tenant in one view: pending
// and needing resolution oldest first, decided newest first.
func (s *Server) List(ctx context.Context, id Identity, q ListQuery) ([]Item, error) {
	if q.Limit < 1 || q.Limit > MaxListLimit {
		return nil, errorf(http.StatusBadRequest, "invalid_request", "limit %d is not a number from 1 to %d", q.Limit, MaxListLimit)
	}
	if q.Offset < 0 || (q.Offset > 0 && q.View != ViewDecided) {
		return nil, errorf(http.StatusBadRequest, "invalid_request", "offset %d: only the decided view is paged by offset", q.Offset)
	}
	return s.list(ctx, id.Tenant, q)
}

// Withdrawn lists the approvals of the identity's tenant withdrawn within
// the last period because their run was cancelled, newest first.
func (s *Server) Withdrawn(ctx context.Context, id Identity, period time.Duration, limit int) ([]Item, error) {
	ctx, cancel := s.dbContext(ctx)
	defer cancel()
	return s.withdrawn(ctx, id.Tenant, s.cfg.Now().Add(-period), limit)
}

// Approval returns step of run runID of the identity's tenant as the
// approvals lists show it, pending or decided: an *APIError 404 when the
// step never asked for approval.
func (s *Server) Approval(ctx context.Context, id Identity, runID string, step int64) (Item, error) {
	ctx, cancel := s.dbContext(ctx)
	defer cancel()
	row, err := approvalstore.Lookup(ctx, s.cfg.Pool, id.Tenant, runID, step)
	if err != nil {
		return Item{}, refusal(err, id, "reading")
	}
	it := itemOf(row, s.cfg.Now())
	if t, ok := s.Tool(it.Tool); ok {
		it.Amounts = DeclaredAmounts(t, it.Args)
	}
	return it, nil
}

// ListRuns returns a page of the identity's tenant's runs from Temporal's
// visibility, open runs first, then the most recently closed; token is the
// page's, as the page before it gave it (nil for the first). A token that
// Temporal did not make is an *APIError 400; a Temporal that does not
// answer, 503.
func (s *Server) ListRuns(ctx context.Context, id Identity, size int, token []byte) (RunPage, error) {
	if size < 1 || size > maxRunPage {
		return RunPage{}, errorf(http.StatusBadRequest, "invalid_request", "page size %d is not a number from 1 to %d", size, maxRunPage)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	page, err := s.cfg.Runs.List(ctx, id.Tenant, size, token)
	var invalid *serviceerror.InvalidArgument
	switch {
	case errors.As(err, &invalid) && len(token) > 0:
		return RunPage{}, errorf(http.StatusBadRequest, "invalid_page", "the page token is not one Temporal made")
	case err != nil:
		s.log.Warn("list runs: Temporal's list failed", zap.String("tenant", id.Tenant), zap.Error(err))
		return RunPage{}, errorf(http.StatusServiceUnavailable, "unavailable", "the runs could not be listed: Temporal did not answer")
	}
	return page, nil
}

// Limits lists the caps of the identity's tenant with their usage.
func (s *Server) Limits(ctx context.Context, id Identity) ([]Limit, error) {
	ctx, cancel := s.dbContext(ctx)
	defer cancel()
	us, err := spend.ListCaps(ctx, s.cfg.Pool, id.Tenant)
	if err != nil {
		return nil, err
	}
	out := make([]Limit, 0, len(us))
	for _, u := range us {
		out = append(out, limitOf(u))
	}
	return out, nil
}
