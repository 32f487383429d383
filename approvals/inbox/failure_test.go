package inbox

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockTables holds tables in ACCESS EXCLUSIVE mode until the test ends:
// every query on them waits, as on a database that stalls.
func (e *inboxEnv) lockTables(tables string) {
	e.T.Helper()
	tx, err := e.Pool.Begin(context.Background())
	require.NoError(e.T, err)
	e.T.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(context.Background(), "LOCK TABLE "+tables+" IN ACCESS EXCLUSIVE MODE")
	require.NoError(e.T, err)
}

// TestInboxFormsAnswerWithinOneDatabaseBudget: when the database stalls, a
// decision, an edit or an answer posted from the inbox is the 503 page
// once the request's one budget (DBTimeout) is spent: the inbox is not read
// again, which would wait a second budget.
func TestInboxFormsAnswerWithinOneDatabaseBudget(t *testing.T) {
	t.Parallel()
	const budget = 3 * time.Second
	tests := []struct {
		name string
		path string
		form url.Values
	}{
		{"decide", "/runs/r1/steps/2/decide", url.Values{"decision": {"approve"}}},
		{"edit", "/runs/r1/steps/2/edit", url.Values{"arg.amount_cents": {"100.00"}}},
		{"resolve", "/runs/r2/steps/2/resolve", url.Values{"outcome": {"applied"}, "round": {"1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := setupInbox(t, func(c *approvals.Config) { c.DBTimeout = budget })
			hash := e.Pending("r1", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "")
			e.Unresolved("r2", 2)
			b := e.signIn("dana")
			tt.form.Set("csrf", b.csrf)
			tt.form.Set("args_hash", hash)
			e.lockTables("approvals, resolutions")

			start := time.Now()
			status, h, page := b.post(tt.path, tt.form)
			took := time.Since(start)
			assert.Equal(t, http.StatusServiceUnavailable, status, page)
			assert.Equal(t, "2", h.Get("Retry-After"))
			assert.Contains(t, page, "The database did not answer in time")
			assert.NotContains(t, page, "Nothing is waiting for a decision", "lists that were not read are not shown")
			assert.Less(t, took, budget+2*time.Second, "one budget, not two")
		})
	}
}

// TestInboxShowsWhenTheResolutionsCannotBeRead: a failed read of the steps
// whose outcome is unknown is the 503 page, not an inbox without its
// "Needs resolution" list.
func TestInboxShowsWhenTheResolutionsCannotBeRead(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	e.Pending("r1", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "")
	e.Unresolved("r2", 2)
	b := e.signIn("dana")
	_, err := e.Pool.Exec(context.Background(), "ALTER TABLE resolutions RENAME TO resolutions_gone")
	require.NoError(t, err)

	status, page := b.get("/")
	assert.Equal(t, http.StatusServiceUnavailable, status, page)
	assert.Contains(t, page, "The steps that need resolution could not be read; try again shortly.")
	assert.NotContains(t, page, "Nothing is waiting for a decision")
}
