package approvals

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/untrusted"
)

// RunSummary is one run as GET /v1/runs lists it.
type RunSummary struct {
	RunID       string `json:"run_id"`
	ParentRunID string `json:"parent_run_id,omitempty"`
	// State is running, waiting (running, with a step waiting for a
	// person), paused, completed, failed or cancelled.
	State        string    `json:"state"`
	Goal         string    `json:"goal"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	WaitingSteps int       `json:"waiting_steps"`
}

// RunList is the body of GET /v1/runs.
type RunList struct {
	Runs []RunSummary `json:"runs"`
	// NextAfter is the cursor of the next page; none after the last.
	NextAfter string `json:"next_after,omitempty"`
}

// RunListQuery says which of a tenant's runs to list.
type RunListQuery struct {
	// Limit bounds the page, from 1 to maxRunPage.
	Limit int
	// After is the NextAfter of the page before; empty for the first.
	After string
	// State keeps the runs in this state; empty keeps all.
	State string
}

// listedStates are the states GET /v1/runs lists runs by.
var listedStates = []string{"running", "waiting", "paused", "completed", "failed", "cancelled"}

// Runs lists the identity's tenant's runs, children included, newest
// first, by keyset: a page costs the same wherever it is.
func (s *Server) Runs(ctx context.Context, id Identity, q RunListQuery) (RunList, error) {
	if q.Limit < 1 || q.Limit > maxRunPage {
		return RunList{}, errorf(http.StatusBadRequest, "invalid_request", "limit %d is not a number from 1 to %d", q.Limit, maxRunPage)
	}
	if q.State != "" && !slices.Contains(listedStates, q.State) {
		return RunList{}, errorf(http.StatusBadRequest, "invalid_request", "state %q is not one of %s",
			untrusted.Cut(q.State, 40), strings.Join(listedStates, ", "))
	}
	before, beforeRun, err := parseRunCursor(q.After)
	if err != nil {
		return RunList{}, errorf(http.StatusBadRequest, "invalid_request", "after %q is not a cursor this list gave", untrusted.Cut(q.After, 80))
	}
	ctx, cancel := s.dbContext(ctx)
	defer cancel()
	rows, err := s.cfg.Pool.Query(ctx, `
SELECT r.run_id, coalesce(r.parent_run_id, ''), r.state, r.goal, r.created_at, r.updated_at, w.n
FROM run_index r
CROSS JOIN LATERAL (SELECT `+approvalstore.WaitingStepsSQL+` AS n) w
WHERE r.tenant = $1
  AND ($2::timestamptz IS NULL OR (r.created_at, r.run_id) < ($2, $3))
  AND ($4 = '' OR ($4 = 'waiting' AND r.state = 'running' AND w.n > 0)
               OR ($4 = 'running' AND r.state = 'running' AND w.n = 0)
               OR ($4 NOT IN ('waiting', 'running') AND r.state = $4))
ORDER BY r.created_at DESC, r.run_id DESC
LIMIT $5`, id.Tenant, before, beforeRun, q.State, q.Limit+1)
	if err != nil {
		return RunList{}, fmt.Errorf("list the runs of tenant %s: %w", id.Tenant, err)
	}
	defer rows.Close()
	out := RunList{Runs: []RunSummary{}}
	for rows.Next() {
		var r RunSummary
		if err := rows.Scan(&r.RunID, &r.ParentRunID, &r.State, &r.Goal, &r.CreatedAt, &r.UpdatedAt, &r.WaitingSteps); err != nil {
			return RunList{}, fmt.Errorf("list the runs of tenant %s: %w", id.Tenant, err)
		}
		if r.State == "running" && r.WaitingSteps > 0 {
			r.State = "waiting"
		}
		out.Runs = append(out.Runs, r)
	}
	if err := rows.Err(); err != nil {
		return RunList{}, fmt.Errorf("list the runs of tenant %s: %w", id.Tenant, err)
	}
	if len(out.Runs) > q.Limit {
		out.Runs = out.Runs[:q.Limit]
		last := out.Runs[q.Limit-1]
		out.NextAfter = runCursor(last.CreatedAt, last.RunID)
	}
	return out, nil
}

// runCursor is the cursor after a run created at with id run.
func runCursor(at time.Time, run string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.UnixMicro(), 10) + " " + run))
}

// parseRunCursor reads a cursor of runCursor; an empty one is the start.
func parseRunCursor(c string) (*time.Time, string, error) {
	if c == "" {
		return nil, "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, "", err
	}
	us, run, ok := strings.Cut(string(b), " ")
	n, err := strconv.ParseInt(us, 10, 64)
	if !ok || err != nil || run == "" {
		return nil, "", fmt.Errorf("not a cursor")
	}
	at := time.UnixMicro(n)
	return &at, run, nil
}

func (s *Server) listRunsAPI(w http.ResponseWriter, r *http.Request, id Identity) {
	q := r.URL.Query()
	for name := range q {
		if name != "limit" && name != "after" && name != "state" {
			s.fail(w, r, errorf(http.StatusBadRequest, "invalid_request", "unknown query parameter %q (known: limit, after, state)", untrusted.Cut(name, 40)))
			return
		}
	}
	lq := RunListQuery{Limit: 50, After: q.Get("after"), State: q.Get("state")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			s.fail(w, r, errorf(http.StatusBadRequest, "invalid_request", "limit %q is not a number from 1 to %d", untrusted.Cut(v, 20), maxRunPage))
			return
		}
		lq.Limit = n
	}
	list, err := s.Runs(r.Context(), id, lq)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}
