package approvalstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
	"github.com/stretchr/testify/require"
)

// GiftDesk is a provider's paired read whose answer a test sets.
type GiftDesk struct {
	mu sync.Mutex
	// Found is whether the provider holds the gift; Err, when set, is the
	// read's failure.
	Found bool
	Err   error
	reads []string
}

func (d *GiftDesk) read(_ context.Context, call tools.Call) (any, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reads = append(d.reads, call.Key.String())
	if d.Err != nil {
		return nil, d.Err
	}
	if !d.Found {
		return map[string]any{"found": false}, nil
	}
	return map[string]any{"found": true, "gift": map[string]any{"id": "gift_7", "amount_cents": 2500, "currency": "EUR"}}, nil
}

// GiftArgs are the arguments of the gift steps.
const GiftArgs = `{"order_id":"1001","amount_cents":2500,"currency":"EUR"}`

// GiftTools is a registry with the shop's tools, send_gift, an external
// tool settled by find_gift (desk), and post_card, one without a paired
// read.
func GiftTools(t *testing.T, desk *GiftDesk) *tools.Registry {
	t.Helper()
	schema := json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"},"amount_cents":{"type":"integer","minimum":0},"currency":{"type":"string"}},"required":["order_id"],"additionalProperties":false}`)
	noop := func(context.Context, tools.Call) (any, error) { return nil, errors.New("not called") }
	send := tools.Tool{Name: "send_gift", Class: tools.ClassExternal, Schema: schema, PairedRead: "find_gift", Run: noop,
		Amounts: []tools.Amount{{Field: "amount_cents", Currency: "currency"}}}
	find := tools.Tool{Name: "find_gift", Class: tools.ClassRead, Schema: schema, Run: desk.read}
	card := tools.Tool{Name: "post_card", Class: tools.ClassExternal, Schema: schema, KeyLifetime: time.Hour, Run: noop}
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, append(shop.Tools(shop.Config{}), send, find, card)...)
	require.NoError(t, err)
	return reg
}

// RecordGiftSteps records run r1's step 2 (send_gift) and run r2's step 2
// (post_card) as waiting to be resolved.
func (e *World) RecordGiftSteps() {
	t := e.T
	t.Helper()
	for _, u := range []struct {
		run, tool string
	}{{"r1", "send_gift"}, {"r2", "post_card"}} {
		key := fmt.Sprintf("v1/acme/%s/2/%s", u.run, u.tool)
		require.NoError(t, approvalstore.RecordUnresolved(context.Background(), e.Pool, approvalstore.Resolution{
			Tenant: "acme", RunID: u.run, Step: 2, Round: 1, Tool: u.tool, Key: key, Args: json.RawMessage(GiftArgs),
			ArgsHash: strings.Repeat("d", 64), Goal: "a gift for order 1001", FirstSentAt: e.Now.Add(-10 * time.Minute),
			Known:       "read tcp 10.0.0.7:443: i/o timeout after the request was sent; the paired read answered 503",
			RequestedAt: e.Now.Add(-time.Minute), Deadline: e.Now.Add(time.Hour)}))
		e.Temporal.SetStatus(workflows.Status{Tenant: "acme", RunID: u.run, Planner: "script", State: workflows.RunNeedsResolution,
			Goal: "a gift for order 1001", StartedAt: e.Now.Add(-time.Hour), UpdatedAt: e.Now,
			Steps: []workflows.Step{{Step: 2, Tool: u.tool, Class: tools.ClassExternal, Key: key, Args: json.RawMessage(GiftArgs),
				ArgsHash: strings.Repeat("d", 64), State: workflows.StepNeedsResolution, PlannedAt: e.Now,
				Resolution: &workflows.StepResolution{Round: 1, Known: "timeout", FirstSentAt: e.Now, RequestedAt: e.Now}}}})
	}
}

// Answers counts the accepted answers of record of run's step 2.
func (e *World) Answers(run string) int {
	e.T.Helper()
	var n int
	require.NoError(e.T, e.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM resolution_decisions WHERE run_id = $1 AND step = 2 AND outcome = 'accepted'`, run).Scan(&n))
	return n
}

// Reads returns the keys the desk was asked under.
func (d *GiftDesk) Reads() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.reads...)
}

// Set sets what the desk's read answers from now on.
func (d *GiftDesk) Set(found bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.Found, d.Err = found, err
}
