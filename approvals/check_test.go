package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// giftDesk is a provider's paired read whose answer a test sets.
type giftDesk struct {
	mu    sync.Mutex
	found bool
	err   error
	reads []string // the keys it was asked under
}

func (d *giftDesk) read(_ context.Context, call tools.Call) (any, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reads = append(d.reads, call.Key.String())
	if d.err != nil {
		return nil, d.err
	}
	if !d.found {
		return map[string]any{"found": false}, nil
	}
	return map[string]any{"found": true, "gift": map[string]any{"id": "gift_7", "amount_cents": 2500, "currency": "EUR"}}, nil
}

const giftArgs = `{"order_id":"1001","amount_cents":2500,"currency":"EUR"}`

// setupCheck serves an inbox whose registry has send_gift, an external
// tool settled by find_gift (desk), and post_card, one without a paired
// read; run r1's step 2 (send_gift) and run r2's step 2 (post_card) wait
// to be resolved.
func setupCheck(t *testing.T, desk *giftDesk) *inboxEnv {
	t.Helper()
	schema := json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"},"amount_cents":{"type":"integer","minimum":0},"currency":{"type":"string"}},"required":["order_id"],"additionalProperties":false}`)
	noop := func(context.Context, tools.Call) (any, error) { return nil, errors.New("not called") }
	send := tools.Tool{Name: "send_gift", Class: tools.ClassExternal, Schema: schema, PairedRead: "find_gift", Run: noop,
		Amounts: []tools.Amount{{Field: "amount_cents", Currency: "currency"}}}
	find := tools.Tool{Name: "find_gift", Class: tools.ClassRead, Schema: schema, Run: desk.read}
	card := tools.Tool{Name: "post_card", Class: tools.ClassExternal, Schema: schema, KeyLifetime: time.Hour, Run: noop}
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, append(shop.Tools(shop.Config{}), send, find, card)...)
	require.NoError(t, err)
	e := setupInbox(t, func(c *Config) { c.Tools = reg })
	e.reg = reg
	for _, u := range []struct {
		run, tool string
	}{{"r1", "send_gift"}, {"r2", "post_card"}} {
		key := fmt.Sprintf("v1/acme/%s/2/%s", u.run, u.tool)
		require.NoError(t, approvalstore.RecordUnresolved(context.Background(), e.pool, approvalstore.Resolution{
			Tenant: "acme", RunID: u.run, Step: 2, Round: 1, Tool: u.tool, Key: key, Args: json.RawMessage(giftArgs),
			ArgsHash: strings.Repeat("d", 64), Goal: "a gift for order 1001", FirstSentAt: e.now.Add(-10 * time.Minute),
			Known:       "read tcp 10.0.0.7:443: i/o timeout after the request was sent; the paired read answered 503",
			RequestedAt: e.now.Add(-time.Minute), Deadline: e.now.Add(time.Hour)}))
		e.temporal.setStatus(workflows.Status{Tenant: "acme", RunID: u.run, Planner: "script", State: workflows.RunNeedsResolution,
			Goal: "a gift for order 1001", StartedAt: e.now.Add(-time.Hour), UpdatedAt: e.now,
			Steps: []workflows.Step{{Step: 2, Tool: u.tool, Class: tools.ClassExternal, Key: key, Args: json.RawMessage(giftArgs),
				ArgsHash: strings.Repeat("d", 64), State: workflows.StepNeedsResolution, PlannedAt: e.now,
				Resolution: &workflows.StepResolution{Round: 1, Known: "timeout", FirstSentAt: e.now, RequestedAt: e.now}}}})
	}
	return e
}

// answers counts the accepted answers of record of run's step 2.
func (e *inboxEnv) answers(run string) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM resolution_decisions WHERE run_id = $1 AND step = 2 AND outcome = 'accepted'`, run).Scan(&n))
	return n
}

// TestCheckWithTheProviderAgain: POST …/check runs the step's paired read
// now, under its key. Found, the step is answered applied with the
// provider's record, once, by the person who asked; not found, nothing is
// answered; a read that fails is 502 and answers nothing; a viewer, a
// tool without a paired read and a step that waits for nothing are
// refused.
func TestCheckWithTheProviderAgain(t *testing.T) {
	t.Parallel()
	desk := &giftDesk{}
	e := setupCheck(t, desk)

	status, _, body := e.call("dana", http.MethodPost, "/v1/runs/r1/steps/2/check", "")
	require.Equal(t, http.StatusOK, status, body)
	var res CheckResponse
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	assert.False(t, res.Found)
	assert.Nil(t, res.Resolution)
	assert.Zero(t, e.answers("r1"), "not found answers nothing: that is the person's call")

	desk.mu.Lock()
	desk.err = errors.New("provider answered 503")
	desk.mu.Unlock()
	status, _, body = e.call("dana", http.MethodPost, "/v1/runs/r1/steps/2/check", "")
	assert.Equal(t, http.StatusBadGateway, status, body)
	assert.Contains(t, body, `"provider_unavailable"`)
	assert.Contains(t, body, "provider answered 503")

	desk.mu.Lock()
	desk.err, desk.found = nil, true
	desk.mu.Unlock()
	status, _, body = e.call("dana", http.MethodPost, "/v1/runs/r1/steps/2/check", "")
	require.Equal(t, http.StatusOK, status, body)
	res = CheckResponse{}
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	require.True(t, res.Found)
	require.NotNil(t, res.Resolution)
	assert.Equal(t, workflows.OutcomeApplied, res.Resolution.Outcome)
	assert.Equal(t, "dana", res.Resolution.Resolver)
	assert.JSONEq(t, string(res.Record), string(res.Resolution.Result), "the provider's record is the result")
	assert.Contains(t, strings.Join(strings.Fields(string(res.Record)), ""), `"amount_cents":2500`)
	assert.Equal(t, 1, e.answers("r1"))
	desk.mu.Lock()
	assert.Equal(t, []string{"v1/acme/r1/2/send_gift", "v1/acme/r1/2/send_gift", "v1/acme/r1/2/send_gift"}, desk.reads, "asked under the step's key")
	desk.mu.Unlock()

	status, _, body = e.call("vic", http.MethodPost, "/v1/runs/r1/steps/2/check", "")
	assert.Equal(t, http.StatusForbidden, status, body)
	status, _, body = e.call("dana", http.MethodPost, "/v1/runs/r2/steps/2/check", "")
	assert.Equal(t, http.StatusConflict, status, body)
	assert.Contains(t, body, "post_card has no paired read")
	status, _, body = e.call("dana", http.MethodPost, "/v1/runs/r9/steps/2/check", "")
	assert.Equal(t, http.StatusNotFound, status, body)
	status, _, body = e.call("omar", http.MethodPost, "/v1/runs/r1/steps/2/check", "")
	assert.Equal(t, http.StatusNotFound, status, "another tenant's step is not seen: %s", body)
}

// TestNeedsResolutionCardLeadsWithOneSentence: the card of a step whose
// outcome is unknown says what happened in one sentence, with the amount
// as money; what was sent and the error chain are behind <details>; the
// "Check with the provider again" button asks the provider, and its
// answer comes back as the page's message.
func TestNeedsResolutionCardLeadsWithOneSentence(t *testing.T) {
	t.Parallel()
	desk := &giftDesk{found: true}
	e := setupCheck(t, desk)
	dana := e.signIn("dana")

	page := mustGet(t, dana, "/")
	card := regexp.MustCompile(`(?s)<article [^>]*data-run="r1" data-step="2" data-kind="outcome_unknown">.*?</article>`).FindString(page)
	require.NotEmpty(t, card, page)
	lead := regexp.MustCompile(`(?s)<p class="lead">(.*?)</p>`).FindStringSubmatch(card)
	require.NotNil(t, lead, card)
	assert.Contains(t, lead[1], "send_gift of 25.00 EUR was sent")
	assert.Contains(t, lead[1], "nobody could tell whether the provider applied it")
	assert.NotContains(t, lead[1], "i/o timeout", "the error chain is not the lead")
	details := regexp.MustCompile(`(?s)<details class="full"><summary>What we sent and what we know</summary>.*?</details>`).FindString(card)
	require.NotEmpty(t, details, card)
	assert.Contains(t, details, "i/o timeout after the request was sent")
	assert.Equal(t, 1, strings.Count(card, "i/o timeout"), "what we know is said once")
	assert.Contains(t, card, `<form method="post" action="/runs/r1/steps/2/check">`)
	assert.Contains(t, card, `Check with the provider again</button>`)
	other := regexp.MustCompile(`(?s)<article [^>]*data-run="r2" data-step="2" data-kind="outcome_unknown">.*?</article>`).FindString(page)
	require.NotEmpty(t, other, page)
	assert.NotContains(t, other, "Check with the provider again", "a tool without a paired read has nothing to ask")
	assert.NotContains(t, mustGet(t, e.signIn("vic"), "/"), "Check with the provider again", "a viewer may not resolve")

	status, _, _ := dana.post("/runs/r1/steps/2/check", url.Values{})
	assert.Equal(t, http.StatusForbidden, status, "without the session's CSRF token")
	assert.Zero(t, e.answers("r1"))
	status, hdr, _ := dana.post("/runs/r1/steps/2/check", url.Values{"csrf": {dana.csrf}})
	require.Equal(t, http.StatusSeeOther, status)
	assert.Equal(t, "/", hdr.Get("Location"))
	assert.Contains(t, mustGet(t, dana, "/"), "The provider holds step 2 of run r1: it is answered applied, with the provider&#39;s record.")
	assert.Equal(t, 1, e.answers("r1"))
}
