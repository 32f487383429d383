package inbox

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/oncerun/oncerun/approvals"
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
func (s *Inbox) runsPage(w http.ResponseWriter, r *http.Request) {
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
	list, err := s.api.ListRuns(r.Context(), *p.ID, listPageSize, token)
	var ae *approvals.APIError
	switch {
	case errors.As(err, &ae) && ae.Status == http.StatusBadRequest:
		// Temporal refuses a page token it did not make.
		p.Error, p.Status = "This page link is not one of the inbox's; start again from the first page.", http.StatusBadRequest
		s.render(w, "runs", p)
		return
	case err != nil:
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
func (s *Inbox) decidedPage(w http.ResponseWriter, r *http.Request) {
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
	// One row more than the page tells whether another page follows.
	rows, err := s.api.List(ctx, *p.ID, approvals.ListQuery{View: approvals.ViewDecided, Limit: listPageSize + 1, Offset: n * listPageSize})
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
	p.Decided = rows
	s.render(w, "decided", p)
}

// maxDecidedPage bounds how deep the decided pages go (50,000 steps back):
// older decisions are in the audit table.
const maxDecidedPage = 1000
