package approvals

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"go.temporal.io/api/serviceerror"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/approvalstore"
)

// listPageSize is how many rows the inbox's /runs and /decided pages show.
const listPageSize = 50

// pager links a list page to the next one; Next is "" on the last.
type pager struct {
	Number int
	Next   string
}

// runsPage lists the tenant's runs from Temporal's visibility, open runs
// first and then the most recently closed, listPageSize at a time; ?page
// is the opaque token of a page after the first.
func (s *Server) runsPage(w http.ResponseWriter, r *http.Request) {
	p, ok := s.signedIn(w, r, "Runs")
	if !ok {
		return
	}
	token, err := base64.RawURLEncoding.DecodeString(r.URL.Query().Get("page"))
	n, _ := strconv.Atoi(r.URL.Query().Get("n"))
	if err != nil || n < 0 {
		p.Error, p.Status = "This page link is not one of the inbox's; start again from the first page.", http.StatusBadRequest
		s.render(w, "runs", p)
		return
	}
	ctx, cancel := s.dbContext(r.Context())
	defer cancel()
	list, err := s.cfg.Runs.List(ctx, p.ID.Tenant, listPageSize, token)
	var invalid *serviceerror.InvalidArgument
	switch {
	case errors.As(err, &invalid) && len(token) > 0:
		// Temporal refuses a page token it did not make.
		p.Error, p.Status = "This page link is not one of the inbox's; start again from the first page.", http.StatusBadRequest
		s.render(w, "runs", p)
		return
	case err != nil:
		s.log.Warn("inbox runs: Temporal's list failed", zap.String("tenant", p.ID.Tenant), zap.Error(err))
		p.Error, p.Status = "The runs could not be listed: Temporal did not answer; try again shortly.", http.StatusServiceUnavailable
		s.render(w, "runs", p)
		return
	}
	p.Listed, p.RunList = true, list.Runs
	p.Pager = pager{Number: n + 1}
	if len(list.Next) > 0 {
		p.Pager.Next = "/runs?" + url.Values{"page": {base64.RawURLEncoding.EncodeToString(list.Next)}, "n": {strconv.Itoa(n + 1)}}.Encode()
	}
	s.render(w, "runs", p)
}

// decidedPage lists the tenant's decided steps, newest first,
// listPageSize at a time; ?n numbers the page from 0.
func (s *Server) decidedPage(w http.ResponseWriter, r *http.Request) {
	p, ok := s.signedIn(w, r, "Decided")
	if !ok {
		return
	}
	n, err := strconv.Atoi(r.URL.Query().Get("n"))
	if r.URL.Query().Get("n") == "" {
		n, err = 0, nil
	}
	if err != nil || n < 0 || n > maxDecidedPage {
		p.Error, p.Status = "This page link is not one of the inbox's; start again from the first page.", http.StatusBadRequest
		s.render(w, "decided", p)
		return
	}
	ctx, cancel := s.dbContext(r.Context())
	defer cancel()
	now := s.cfg.Now()
	// One row more than the page tells whether another page follows.
	rows, err := approvalstore.ListDecided(ctx, s.cfg.Pool, approvalstore.Page{Tenant: p.ID.Tenant, Now: now,
		Cutoff: now.Add(-s.cfg.ResolveGrace), Limit: listPageSize + 1, Offset: n * listPageSize})
	if err != nil {
		s.listFailed(w, p, "decided steps", err)
		return
	}
	p.Listed = true
	p.Pager = pager{Number: n + 1}
	if len(rows) > listPageSize {
		rows = rows[:listPageSize]
		p.Pager.Next = "/decided?n=" + strconv.Itoa(n+1)
	}
	for _, row := range rows {
		it := itemOf(row, now)
		if t, ok := s.tool(it.Tool); ok {
			it.Amounts = DeclaredAmounts(t, it.Args)
		}
		p.Decided = append(p.Decided, it)
	}
	s.render(w, "decided", p)
}

// maxDecidedPage bounds how deep the decided pages go (50,000 steps back):
// older decisions are in the audit table.
const maxDecidedPage = 1000
