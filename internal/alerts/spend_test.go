package alerts_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/alerts"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/spend"
	"github.com/oncerun/oncerun/tools"
)

type oneTool struct{ t tools.Tool }

func (o oneTool) Lookup(name string) (tools.Tool, bool) { return o.t, name == o.t.Name }

// chargedPast sets acme's cap "credits" of amount EUR on issue_credit,
// charges one credit of spent against it, and returns the alerts raised.
func chargedPast(t *testing.T, amount, spent int64) (*pgxpool.Pool, []spend.Level) {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.NewPool(t, 2)
	c := spend.Cap{Tenant: "acme", Name: "credits", Tools: []string{"issue_credit"}, Currency: "EUR", Amount: amount}
	reg := oneTool{tools.Tool{Name: "issue_credit", Amounts: []tools.Amount{{Field: "amount_cents", Currency: "currency"}}}}
	require.NoError(t, spend.CheckCap(reg, &c))
	require.NoError(t, spend.SetCap(ctx, pool, &c, "test"))
	var got spend.Counted
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		got, err = spend.ChargeTx(ctx, tx, spend.Charge{Tenant: "acme", RunID: "r1", Step: 1, Tool: "issue_credit",
			Key: "k1", Amounts: spend.Amounts{"EUR": spent}})
		return err
	}))
	return pool, got.Alerts()
}

// A charge that takes a cap past 80% raises an alert: it is posted under
// its id, and its row records the delivery; one the webhook refuses stays
// undelivered.
func TestASpendAlertIsPostedOnceAndItsDeliveryRecorded(t *testing.T) {
	ctx := context.Background()
	pool, fired := chargedPast(t, 200000, 170000)
	require.Len(t, fired, 1)

	rcv := &receiver{statuses: []int{http.StatusNoContent, http.StatusInternalServerError}}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	sa := &alerts.SpendAlerts{Webhook: &alerts.Webhook{URL: srv.URL}, Pool: pool}
	require.NoError(t, sa.SpendAlert(ctx, "acme", fired[0]))

	posts := rcv.posts()
	require.Len(t, posts, 1)
	id := "spend_cap/acme/credits/80/" + itoa(fired[0].AlertID)
	assert.Equal(t, id, posts[0].idempotencyKey)
	assert.JSONEq(t, `{"alert":"spend_cap","id":"`+id+`","tenant":"acme","cap":"credits","tools":["issue_credit"],
		"period":"utc_day","threshold":80,"currency":"EUR","spent":170000,"amount":200000,
		"spent_text":"1,700.00 EUR","amount_text":"2,000.00 EUR"}`, posts[0].body)
	var delivered int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM spend_alerts WHERE delivered_at IS NOT NULL`).Scan(&delivered))
	assert.Equal(t, 1, delivered)

	refused := fired[0]
	require.Error(t, sa.SpendAlert(ctx, "acme", refused), "a refused post is the caller's to log")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A charge past both thresholds posts the 100% alert; its delivery marks
// the 80% one the same charge recorded.
func TestASpendAlertPastBothThresholdsMarksBothDelivered(t *testing.T) {
	ctx := context.Background()
	pool, fired := chargedPast(t, 1000, 1000)
	require.Len(t, fired, 1)
	require.Equal(t, 100, fired[0].Alert)
	rcv := &receiver{statuses: []int{http.StatusOK}}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	require.NoError(t, (&alerts.SpendAlerts{Webhook: &alerts.Webhook{URL: srv.URL}, Pool: pool}).SpendAlert(ctx, "acme", fired[0]))
	assert.Len(t, rcv.posts(), 1)
	var undelivered int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM spend_alerts WHERE delivered_at IS NULL`).Scan(&undelivered))
	assert.Zero(t, undelivered)
}
