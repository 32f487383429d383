package activities_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/metrics"
	"github.com/oncerun/oncerun/internal/shop"
)

func TestRunToolRead(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()

	out, err := f.acts.RunTool(ctx, input(t, 1, shop.ToolLookupOrder, `{"order_id":"1003"}`))
	require.NoError(t, err)

	var order map[string]any
	require.NoError(t, json.Unmarshal(out.Result, &order))
	assert.Equal(t, true, order["found"])
	assert.Equal(t, "Alan Turing", order["customer"])
	assert.Equal(t, "lost_in_transit", order["status"])
	assert.Equal(t, "v1/acme/r1/1/lookup_order", out.Key)
	assert.False(t, out.Replayed)
	assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM idempotency_keys"), "a read writes no key")

	again, err := f.acts.RunTool(ctx, input(t, 1, shop.ToolLookupOrder, `{"order_id":"1003"}`))
	require.NoError(t, err)
	assert.False(t, again.Replayed, "a read runs every time")
	assert.Equal(t, 2, f.calls(shop.ToolLookupOrder, metrics.OutcomeExecuted))
}

func TestRunToolNaturalReplays(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	in := input(t, 1, shop.ToolIssueCredit, damaged)

	first, err := f.acts.RunTool(ctx, in)
	require.NoError(t, err)
	second, err := f.acts.RunTool(ctx, in)
	require.NoError(t, err)

	assert.False(t, first.Replayed)
	assert.True(t, second.Replayed)
	assert.Equal(t, string(first.Result), string(second.Result), "a replay returns the first result's bytes")
	assert.Equal(t, first.Key, second.Key)
	var credit struct {
		Created        bool   `json:"created"`
		AmountCents    int64  `json:"amount_cents"`
		IdempotencyKey string `json:"idempotency_key"`
	}
	require.NoError(t, json.Unmarshal(second.Result, &credit))
	assert.Equal(t, true, credit.Created, "the replay is the call that created the credit")
	assert.Equal(t, int64(2500), credit.AmountCents)
	assert.Equal(t, "v1/acme/r1/1/issue_credit", credit.IdempotencyKey)

	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM credits"))
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM idempotency_keys WHERE key = $1 AND state = 'completed'", first.Key))
	assert.Equal(t, 1, f.calls(shop.ToolIssueCredit, metrics.OutcomeExecuted))
	assert.Equal(t, 1, f.calls(shop.ToolIssueCredit, metrics.OutcomeReplayed))
}

func TestRunToolNaturalKeyAcrossSteps(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()

	_, err := f.acts.RunTool(ctx, input(t, 1, shop.ToolIssueCredit, damaged))
	require.NoError(t, err)
	// Another step proposing the same credit executes, but the credits
	// table's natural key returns the existing row.
	out, err := f.acts.RunTool(ctx, input(t, 2, shop.ToolIssueCredit, damaged))
	require.NoError(t, err)

	assert.False(t, out.Replayed)
	assert.JSONEq(t, `false`, string(field(t, out.Result, "created")))
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM credits"))
	assert.Equal(t, 2, f.calls(shop.ToolIssueCredit, metrics.OutcomeExecuted))
}

func TestRunToolKeyedCommitsNoteWithKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	in := input(t, 3, shop.ToolAddOrderNote, `{"order_id":"1002","text":"customer called"}`)

	first, err := f.acts.RunTool(ctx, in)
	require.NoError(t, err)
	second, err := f.acts.RunTool(ctx, in)
	require.NoError(t, err)

	assert.True(t, second.Replayed)
	assert.Equal(t, string(first.Result), string(second.Result))
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM order_notes"), "a replay adds no second note")
	// The note and its key were written by one transaction.
	assert.Equal(t, 1, f.count(t, `
SELECT count(*) FROM order_notes n JOIN idempotency_keys k ON k.key = n.idempotency_key
WHERE n.body = 'customer called' AND k.key = 'v1/acme/r1/3/add_order_note'
  AND k.state = 'completed' AND n.xmin = k.xmin`))
	assert.Equal(t, 1, f.calls(shop.ToolAddOrderNote, metrics.OutcomeExecuted))
	assert.Equal(t, 1, f.calls(shop.ToolAddOrderNote, metrics.OutcomeReplayed))
}

func TestRunToolConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	f := setup(t)
	in := input(t, 5, shop.ToolAddOrderNote, `{"order_id":"1001","text":"box was crushed"}`)
	const n = 6

	outs := make([]activities.ToolOutput, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { outs[i], errs[i] = f.acts.RunTool(context.Background(), in) })
	}
	wg.Wait()

	executed := 0
	for i := range n {
		require.NoError(t, errs[i])
		assert.Equal(t, string(outs[0].Result), string(outs[i].Result))
		if !outs[i].Replayed {
			executed++
		}
	}
	assert.Equal(t, 1, executed)
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM order_notes"))
}

// field returns the member name of the JSON object doc.
func field(t *testing.T, doc json.RawMessage, name string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(doc, &m))
	return m[name]
}
