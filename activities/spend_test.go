package activities_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/spend"
	"github.com/oncerun/oncerun/tools"
)

// alertsSeen records the spend alerts a worker would post.
type alertsSeen struct {
	mu     sync.Mutex
	levels []spend.Level
}

func (a *alertsSeen) SpendAlert(_ context.Context, _ string, l spend.Level) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.levels = append(a.levels, l)
	return nil
}

func creditOf(order string, cents int) string {
	return `{"order_id":"` + order + `","reason":"damaged","amount_cents":` + strconv.Itoa(cents) + `,"currency":"EUR"}`
}

func (f fixture) setCap(t *testing.T, c spend.Cap) {
	t.Helper()
	require.NoError(t, spend.CheckCap(f.acts.Tools, &c))
	require.NoError(t, spend.SetCap(context.Background(), f.pool, &c, "test"))
}

func TestADatabaseStepThatWouldCrossACapParksAndCommitsNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	seen := &alertsSeen{}
	f.acts.SpendAlerts = seen
	f.setCap(t, spend.Cap{Tenant: "acme", Name: "credits", Tools: []string{"issue_credit"}, Currency: "EUR", Amount: 3000})

	first := input(t, 1, "issue_credit", creditOf("1001", 2500))
	first.Spend = &activities.SpendInput{}
	out, err := f.run(t, first)
	require.NoError(t, err)
	require.Nil(t, out.Parked)
	require.Len(t, seen.levels, 1, "2,500 of 3,000 is past 80%")
	assert.Equal(t, 80, seen.levels[0].Alert)
	assert.NotZero(t, seen.levels[0].AlertID)
	assert.InDelta(t, 2500.0, testutil.ToFloat64(f.metrics.SpendTotal.WithLabelValues("acme", "issue_credit", "EUR")), 0)

	second := input(t, 2, "issue_credit", creditOf("1002", 1000))
	second.Spend = &activities.SpendInput{}
	out, err = f.run(t, second)
	require.NoError(t, err)
	require.NotNil(t, out.Parked)
	assert.Equal(t, "over the daily cap for issue_credit (credits): 25.00 of 30.00 EUR spent, this call 10.00", out.Parked.Reason)
	assert.Empty(t, out.Key, "a parked answer holds nothing else")
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM credits"))
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM idempotency_keys"), "the parked step left no key")
	assert.InDelta(t, 1.0, testutil.ToFloat64(f.metrics.StepsParked.WithLabelValues("acme", "daily_cap")), 0)

	// Let past as an exception: it applies once, and counts.
	second.Spend.Exception = true
	out, err = f.run(t, second)
	require.NoError(t, err)
	require.Nil(t, out.Parked)
	assert.False(t, out.Replayed)
	again, err := f.run(t, second)
	require.NoError(t, err)
	assert.True(t, again.Replayed)
	assert.Equal(t, 2, f.count(t, "SELECT count(*) FROM credits"))
	assert.Equal(t, 1, f.count(t, "SELECT count(*) FROM spend_entries WHERE exception"))
	assert.Equal(t, 3500, f.count(t, "SELECT sum(amount)::int FROM spend_entries WHERE state = 'applied'"))
	require.Len(t, seen.levels, 2)
	assert.Equal(t, 100, seen.levels[1].Alert)

	// A run begun before limits (no Spend) counts but never parks.
	old := input(t, 3, "issue_credit", creditOf("1003", 1000))
	out, err = f.run(t, old)
	require.NoError(t, err)
	require.Nil(t, out.Parked)
	assert.Equal(t, 4500, f.count(t, "SELECT sum(amount)::int FROM spend_entries WHERE state = 'applied'"))
}

// payout is an external tool that moves an amount; its provider answers
// as each test's script says.
func payout(run func(context.Context, tools.Call) (any, error)) tools.Tool {
	return tools.Tool{Name: "send_payout", Class: tools.ClassExternal, Run: run,
		Schema: json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"},"amount_cents":{"type":"integer"},` +
			`"currency":{"type":"string"}},"required":["order_id","amount_cents","currency"],"additionalProperties":false}`),
		Amounts: []tools.Amount{{Field: "amount_cents", Currency: "currency"}}}
}

func entryState(t *testing.T, f fixture, step int64) string {
	t.Helper()
	var state string
	require.NoError(t, f.pool.QueryRow(context.Background(),
		`SELECT state FROM spend_entries WHERE run_id = 'r1' AND step = $1`, step).Scan(&state))
	return state
}

func TestAnExternalStepsReservationIsSettledByItsOutcome(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		next []error
		sent int
	)
	f := setup(t, payout(func(_ context.Context, call tools.Call) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		var err error
		if len(next) > 0 {
			err, next = next[0], next[1:]
		}
		if err == nil {
			sent++
			return map[string]any{"id": call.Key.String()}, nil
		}
		return nil, err
	}))
	f.setCap(t, spend.Cap{Tenant: "acme", Name: "payouts", Tools: []string{"send_payout"}, Currency: "EUR", Amount: 10000})
	in := func(step int64, cents int) activities.ToolInput {
		i := input(t, step, "send_payout", `{"order_id":"o","amount_cents":`+strconv.Itoa(cents)+`,"currency":"EUR"}`)
		i.Spend = &activities.SpendInput{}
		return i
	}

	// Applied: kept.
	_, err := f.run(t, in(1, 4000))
	require.NoError(t, err)
	assert.Equal(t, spend.StateApplied, entryState(t, f, 1))

	// Refused before anything was sent: released, and the next attempt
	// reserves again.
	next = []error{errRefused}
	_, err = f.run(t, in(2, 5000))
	require.Error(t, err)
	assert.Equal(t, spend.StateReleased, entryState(t, f, 2))
	_, err = f.run(t, in(2, 5000))
	require.NoError(t, err)
	assert.Equal(t, spend.StateApplied, entryState(t, f, 2))

	// Unknown (no paired read): held while nobody knows, and it counts.
	next = []error{errTimeout}
	_, err = f.run(t, in(3, 500))
	requireRetryable(t, err)
	assert.Equal(t, spend.StateReserved, entryState(t, f, 3))
	_, err = f.run(t, in(3, 500))
	requireAppError(t, err, activities.ErrTypeNeedsResolution, true)
	assert.Equal(t, spend.StateReserved, entryState(t, f, 3))
	assert.Equal(t, 500, f.count(t, "SELECT amount::int FROM spend_entries WHERE step = 3"), "counted once")

	// 4,000 + 5,000 + 500 held: a further 1,000 would cross.
	out, err := f.run(t, in(4, 1000))
	require.NoError(t, err)
	require.NotNil(t, out.Parked)
	assert.Equal(t, int64(9500), out.Parked.Level.Spent)
	assert.Equal(t, 2, sent, "the parked step sent nothing")

	// A person answers that step 3 did not happen: released, and step 4
	// fits.
	resolve := in(3, 500)
	v, err := f.env().ExecuteActivity(f.acts.ApplyResolution, activities.ResolutionAnswer{Tenant: "acme", RunID: "r1", Step: 3,
		Round: 1, Tool: "send_payout", ArgsHash: resolve.ArgsHash, Applied: false, By: "alice", At: time.Now()})
	require.NoError(t, err)
	require.NoError(t, v.Get(new(activities.ApplyResolutionOutput)))
	assert.Equal(t, spend.StateReleased, entryState(t, f, 3))
	out, err = f.run(t, in(4, 1000))
	require.NoError(t, err)
	require.Nil(t, out.Parked)
	assert.Equal(t, 3, sent)
}
