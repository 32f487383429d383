package shop_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
)

type shopFixture struct {
	pool *pgxpool.Pool
	reg  *tools.Registry
}

func setup(t *testing.T) shopFixture {
	t.Helper()
	return shopFixture{pool: pgtest.NewPool(t, 4), reg: shopRegistry(t, shop.Config{})}
}

// call prepares step step of run r1 of tenant calling tool with args, as
// RunTool would, without its DB or Tx.
func (f shopFixture) call(t *testing.T, tenant string, step int64, tool, args string) (tools.Tool, tools.Call) {
	t.Helper()
	p, err := f.reg.Prepare(planner.Call{Tool: tool, Args: json.RawMessage(args)})
	require.NoError(t, err)
	k, err := keys.New(tenant, "r1", step, tool)
	require.NoError(t, err)
	return p.Tool, tools.Call{Key: k, Args: p.Args, ArgsHash: p.ArgsHash}
}

// read runs a read tool on the pool and decodes its result into v.
func (f shopFixture) read(t *testing.T, tenant, tool, args string, v any) {
	t.Helper()
	tl, c := f.call(t, tenant, 1, tool, args)
	c.DB = f.pool
	decode(t, tl, c, v)
}

// write runs a transactional tool in a transaction of its own, committed,
// and decodes its result into v.
func (f shopFixture) write(t *testing.T, step int64, tool, args string, v any) {
	t.Helper()
	tl, c := f.call(t, "acme", step, tool, args)
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		c.Tx = tx
		decode(t, tl, c, v)
		return nil
	}))
}

func decode(t *testing.T, tl tools.Tool, c tools.Call, v any) {
	t.Helper()
	res, err := tl.Run(context.Background(), c)
	require.NoError(t, err)
	b, err := json.Marshal(res)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, v), string(b))
}

func (f shopFixture) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

func TestLookupOrder(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tests := []struct {
		name, tenant, order string
		want                map[string]any
	}{
		{"found", "acme", "1001", map[string]any{
			"found": true, "tenant": "acme", "order_id": "1001", "customer": "Ada Byron", "customer_email": "ada@example.com", "payment_id": "pay_1001",
			"status": "delivered_damaged", "total_cents": 25900.0, "currency": "EUR", "placed_at": "2026-11-20T10:00:00Z",
		}},
		{"unknown order", "acme", "9999", map[string]any{"found": false, "order_id": "9999"}},
		{"other tenant's order", "globex", "1001", map[string]any{"found": false, "order_id": "1001"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got map[string]any
			f.read(t, tt.tenant, shop.ToolLookupOrder, `{"order_id":"`+tt.order+`"}`, &got)
			assert.Equal(t, tt.want, got)
		})
	}
}

type creditResult struct {
	Found          bool   `json:"found"`
	Created        bool   `json:"created"`
	ID             int64  `json:"id"`
	Tenant         string `json:"tenant"`
	OrderID        string `json:"order_id"`
	Reason         string `json:"reason"`
	AmountCents    int64  `json:"amount_cents"`
	Currency       string `json:"currency"`
	IdempotencyKey string `json:"idempotency_key"`
}

func TestIssueCreditOncePerOrderAndReason(t *testing.T) {
	t.Parallel()
	f := setup(t)

	var first, second, other creditResult
	f.write(t, 1, shop.ToolIssueCredit, `{"order_id":"1001","reason":"damaged","amount_cents":2500,"currency":"EUR"}`, &first)
	// Another step, another amount: the natural key still holds.
	f.write(t, 2, shop.ToolIssueCredit, `{"order_id":"1001","reason":"damaged","amount_cents":9900,"currency":"EUR"}`, &second)
	f.write(t, 3, shop.ToolIssueCredit, `{"order_id":"1001","reason":"late","amount_cents":100,"currency":"EUR"}`, &other)

	assert.True(t, first.Created)
	assert.Equal(t, creditResult{
		Created: true, ID: first.ID, Tenant: "acme", OrderID: "1001", Reason: "damaged",
		AmountCents: 2500, Currency: "EUR", IdempotencyKey: "v1/acme/r1/1/issue_credit",
	}, first)
	assert.False(t, second.Created)
	first.Created = false
	assert.Equal(t, first, second, "the second call returns the existing credit")
	assert.True(t, other.Created)
	assert.NotEqual(t, first.ID, other.ID)
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM credits WHERE order_id = '1001' AND reason = 'damaged'"))
	assert.Equal(t, 2, f.count(t, "SELECT count(*) FROM credits"))
}

func TestIssueCreditRollsBackWithItsTransaction(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tl, c := f.call(t, "acme", 1, shop.ToolIssueCredit, `{"order_id":"1002","reason":"late","amount_cents":700,"currency":"EUR"}`)
	ctx := context.Background()
	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	c.Tx = tx
	_, err = tl.Run(ctx, c)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))

	assert.Equal(t, 0, f.count(t, "SELECT count(*) FROM credits"), "issue_credit writes through call.Tx only")
}

func TestGetCredit(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const key = `{"order_id":"1003","reason":"lost"}`

	var none map[string]any
	f.read(t, "acme", shop.ToolGetCredit, key, &none)
	assert.Equal(t, map[string]any{"found": false, "order_id": "1003", "reason": "lost"}, none)

	var issued, got creditResult
	f.write(t, 1, shop.ToolIssueCredit, `{"order_id":"1003","reason":"lost","amount_cents":8900,"currency":"EUR"}`, &issued)
	f.read(t, "acme", shop.ToolGetCredit, key, &got)
	assert.True(t, got.Found)
	issued.Found, issued.Created = true, false
	assert.Equal(t, issued, got)

	var otherTenant map[string]any
	f.read(t, "globex", shop.ToolGetCredit, key, &otherTenant)
	assert.Equal(t, false, otherTenant["found"])
}

func TestAddOrderNote(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var note struct {
		ID             int64  `json:"id"`
		Tenant         string `json:"tenant"`
		OrderID        string `json:"order_id"`
		Body           string `json:"body"`
		IdempotencyKey string `json:"idempotency_key"`
	}
	f.write(t, 4, shop.ToolAddOrderNote, `{"order_id":"1002","text":"customer called twice"}`, &note)

	assert.NotZero(t, note.ID)
	assert.Equal(t, "acme", note.Tenant)
	assert.Equal(t, "1002", note.OrderID)
	assert.Equal(t, "customer called twice", note.Body)
	assert.Equal(t, "v1/acme/r1/4/add_order_note", note.IdempotencyKey)
	assert.Equal(t, 1, f.count(t, `SELECT count(*) FROM order_notes
		WHERE id = $1 AND tenant = 'acme' AND order_id = '1002' AND body = 'customer called twice'`, note.ID))
}

// shopRegistry returns a registry of the shop's tools with cfg.
func shopRegistry(t *testing.T, cfg shop.Config) *tools.Registry {
	t.Helper()
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, shop.Tools(cfg)...)
	require.NoError(t, err)
	return reg
}
