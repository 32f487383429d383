package inbox

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/approvalstest"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// TestRunsPageListsTheTenantsRunsInPages: /runs lists the signed-in
// tenant's runs only, each linking to its page, with a link to the next
// page while there is one; a forged page token is a 400 page.
func TestRunsPageListsTheTenantsRunsInPages(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	for i := range listPageSize + 2 {
		e.Running(fmt.Sprintf("r%03d", i), true)
	}
	e.Temporal.SetStatus(workflows.Status{Tenant: "globex", RunID: "g1", State: workflows.RunRunning, StartedAt: e.Now})
	e.Temporal.End("r000", workflows.RunCompleted)
	vic := e.signIn("vic")

	page := mustGet(t, vic, "/runs")
	rows := regexp.MustCompile(`<tr data-run="([^"]+)">`).FindAllStringSubmatch(page, -1)
	require.Len(t, rows, listPageSize, page)
	assert.NotContains(t, page, `data-run="g1"`, "another tenant's run is not listed")
	assert.Contains(t, page, `<a href="/runs/r001">r001</a>`)
	assert.Contains(t, page, `<span class="badge state completed">completed</span>`, "r000 has ended")
	next := regexp.MustCompile(`<a href="([^"]+)" rel="next">Older</a>`).FindStringSubmatch(page)
	require.NotNil(t, next, page)

	page = mustGet(t, vic, html.UnescapeString(next[1]))
	rows = regexp.MustCompile(`<tr data-run="([^"]+)">`).FindAllStringSubmatch(page, -1)
	assert.Equal(t, [][]string{{`<tr data-run="r050">`, "r050"}, {`<tr data-run="r051">`, "r051"}}, rows)
	assert.Contains(t, page, "Page 2")
	assert.NotContains(t, page, `rel="next"`, "the last page links to none")

	status, page := vic.get("/runs?page=not*base64")
	assert.Equal(t, http.StatusBadRequest, status, page)
	status, page = vic.get("/runs?n=1&page=" + base64.RawURLEncoding.EncodeToString([]byte("forged")))
	assert.Equal(t, http.StatusBadRequest, status, "a token Temporal did not make: %s", page)
	assert.Contains(t, page, "This page link is not one of the inbox")
	assert.Contains(t, e.Temporal.Queries()[0], "WorkflowId STARTS_WITH 'oncerun/acme/'")
	assert.Contains(t, e.Temporal.Queries()[0], "ExecutionStatus != 'ContinuedAsNew'")
}

// TestDecidedPageListsDecisionsNewestFirstInPages: /decided lists the
// decided steps, newest first, with who decided and the amount as money,
// listPageSize to a page.
func TestDecidedPageListsDecisionsNewestFirstInPages(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	ctx := context.Background()
	p, err := e.Reg.Prepare(tools.ProposedCall{Tool: "issue_credit", Args: json.RawMessage(approvalstest.CreditArgs)})
	require.NoError(t, err)
	for i := range listPageSize + 1 {
		run := fmt.Sprintf("d%03d", i)
		require.NoError(t, approvalstore.RecordPending(ctx, e.Pool, approvalstore.Request{
			Tenant: "acme", RunID: run, Step: 2, Tool: "issue_credit", Args: p.Args, ArgsHash: p.ArgsHash,
			Goal: "refund", Reason: "amount_cents above 10000", RequestedBy: "ops",
			RequestedAt: e.Now.Add(-2 * time.Hour), Deadline: e.Now.Add(time.Hour),
		}))
		decided := e.Now.Add(-time.Hour + time.Duration(i)*time.Second)
		_, err := approvalstore.RecordOutcome(ctx, e.Pool, approvalstore.Approval{Request: approvalstore.Request{
			Tenant: "acme", RunID: run, Step: 2, Round: 1,
		}, State: approvalstore.StateApproved, DecidedBy: "dana", DecidedAt: &decided, Comment: "photos " + run})
		require.NoError(t, err)
	}
	e.Pending("p1", 2, "issue_credit", approvalstest.CreditArgs, time.Hour, "")
	b := e.signIn("vic")

	page := mustGet(t, b, "/decided")
	rows := regexp.MustCompile(`<tr data-run="([^"]+)" data-step="2">`).FindAllStringSubmatch(page, -1)
	require.Len(t, rows, listPageSize, page)
	assert.Equal(t, "d050", rows[0][1], "newest first")
	assert.NotContains(t, page, `data-run="p1"`, "a pending step is not decided")
	assert.Contains(t, page, `<td class="money">259.00 EUR</td>`)
	assert.Contains(t, page, "photos d050")
	assert.Contains(t, page, `<a href="/decided?n=1" rel="next">Older</a>`)

	page = mustGet(t, b, "/decided?n=1")
	rows = regexp.MustCompile(`<tr data-run="([^"]+)" data-step="2">`).FindAllStringSubmatch(page, -1)
	require.Len(t, rows, 1, page)
	assert.Equal(t, "d000", rows[0][1], "the oldest is on the last page")
	assert.NotContains(t, page, `rel="next"`)

	status, _ := b.get("/decided?n=-1")
	assert.Equal(t, http.StatusBadRequest, status)
}
