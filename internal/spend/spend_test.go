package spend_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/spend"
	"github.com/oncerun/oncerun/tools"
)

// registry is the tools the caps below may name.
type registry map[string]tools.Tool

func (r registry) Lookup(name string) (tools.Tool, bool) {
	t, ok := r[name]
	return t, ok
}

var credit = tools.Tool{Name: "issue_credit", Amounts: []tools.Amount{{Field: "amount_cents", Currency: "currency"}}}

var reg = registry{
	"issue_credit":   credit,
	"refund_payment": {Name: "refund_payment", Amounts: []tools.Amount{{Field: "amount_cents", Currency: "currency"}}},
	"send_email":     {Name: "send_email"},
	"note_amount":    {Name: "note_amount", Amounts: []tools.Amount{{Field: "amount_cents"}}},
	"quote":          {Name: "quote", Class: tools.ClassRead, Amounts: []tools.Amount{{Field: "amount_cents", Currency: "currency"}}},
}

func setCap(t *testing.T, db spend.DB, c spend.Cap) {
	t.Helper()
	require.NoError(t, spend.CheckCap(reg, &c))
	require.NoError(t, spend.SetCap(context.Background(), db, &c, "test"))
}

// chargeOne counts c in a transaction of its own, as a database tool's
// effect would: committed when it counted, rolled back when over.
func chargeOne(ctx context.Context, pool *pgxpool.Pool, c spend.Charge) (spend.Counted, error) {
	return chargeWith(ctx, pool, c, "")
}

// chargeWith is chargeOne with effect run in the transaction after the
// charge (an effect that takes its time, so that racing charges overlap).
func chargeWith(ctx context.Context, pool *pgxpool.Pool, c spend.Charge, effect string) (spend.Counted, error) {
	var out spend.Counted
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		out, err = spend.ChargeTx(ctx, tx, c)
		if err == nil && out.Over != nil {
			return &spend.OverError{Level: *out.Over}
		}
		if err == nil && effect != "" {
			_, err = tx.Exec(ctx, effect)
		}
		return err
	})
	if errors.Is(err, spend.ErrOver) {
		return out, nil
	}
	return out, err
}

func eur(n int64) spend.Amounts { return spend.Amounts{"EUR": n} }

func applied(t *testing.T, db spend.DB, tenant, tool string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.QueryRow(context.Background(),
		`SELECT coalesce(sum(amount), 0) FROM spend_entries WHERE tenant = $1 AND tool = $2 AND state = 'applied'`,
		tenant, tool).Scan(&n))
	return n
}

func TestOfCountsDeclaredAmountsByCurrency(t *testing.T) {
	two := tools.Tool{Name: "split", Amounts: []tools.Amount{
		{Field: "a", Currency: "cur"}, {Field: "b", Currency: "cur"}, {Field: "c", Currency: "other"}, {Field: "d"},
	}}
	got, err := spend.Of(two, []byte(`{"a": 100, "b": -50, "c": 7, "cur": "eur", "other": "JPY", "d": 9}`))
	require.NoError(t, err)
	assert.Equal(t, spend.Amounts{"EUR": 150, "JPY": 7}, got, "a negative amount counts by its magnitude; a field without a currency does not count")

	for _, code := range []string{`"XXQ"`, `"978"`, `"€"`, `"EURO"`, `"XXX"`, `"XTS"`, `""`, `" EUR"`, `978`, `null`} {
		_, err = spend.Of(credit, []byte(`{"amount_cents": 100, "currency": `+code+`}`))
		require.ErrorContains(t, err, "not an ISO 4217 currency code", "currency %s: an amount no limit can count is an error, never uncounted", code)
	}
	_, err = spend.Of(credit, []byte(`{"amount_cents": 100}`))
	require.ErrorContains(t, err, "not an ISO 4217 currency code", "a missing currency is an error")

	_, err = spend.Of(credit, []byte(`{"amount_cents": 1.5, "currency": "EUR"}`))
	require.ErrorContains(t, err, "amount_cents")
	_, err = spend.Of(credit, []byte(`{"amount_cents": -9223372036854775808, "currency": "EUR"}`))
	require.ErrorContains(t, err, "more than the 1000000000000000 minor units")
}

func TestReasonSaysWhichLimitAndHowFar(t *testing.T) {
	l := spend.Level{Cap: "issue_credit", Period: spend.PeriodDay, Tools: []string{"issue_credit"},
		Currency: "EUR", Limit: 200000, Spent: 195000, This: 12000}
	assert.Equal(t, "over the daily cap for issue_credit: 1,950.00 of 2,000.00 EUR spent, this call 120.00", l.Reason())
	l = spend.Level{Cap: "money", Period: spend.PeriodRolling, Tools: []string{"issue_credit", "refund_payment"},
		Currency: "EUR", Limit: 100, Spent: 90, This: 20}
	assert.Equal(t, "over the 24-hour cap for issue_credit, refund_payment (money): 0.90 of 1.00 EUR spent, this call 0.20", l.Reason())
	l = spend.Level{Period: "run", Currency: "JPY", Limit: 5000, Spent: 4000, This: 2000}
	assert.Equal(t, "over the run's budget: 4,000 of 5,000 JPY spent, this call 2,000", l.Reason())
}

// 64 runs race for the last 100.00 of a daily cap, 30.00 each: exactly
// three count, and the total stops at the cap less 10.00.
func TestChargesRacingForTheLastOfACapNeverCrossIt(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t, 16)
	setCap(t, pool, spend.Cap{Tenant: "acme", Name: "credits", Tools: []string{"issue_credit"}, Currency: "EUR", Amount: 200000})
	got, err := chargeOne(ctx, pool, spend.Charge{Tenant: "acme", RunID: "r0", Step: 1, Tool: "issue_credit", Key: "k0", Amounts: eur(190000)})
	require.NoError(t, err)
	require.Nil(t, got.Over)

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		counted  int
		refused  []spend.Level
		failures []error
	)
	for i := range 64 {
		wg.Go(func() {
			got, err := chargeWith(ctx, pool, spend.Charge{Tenant: "acme", RunID: fmt.Sprintf("r%d", i+1), Step: 1,
				Tool: "issue_credit", Key: fmt.Sprintf("k%d", i+1), Amounts: eur(3000)}, "SELECT pg_sleep(0.02)")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				failures = append(failures, err)
			case got.Over != nil:
				refused = append(refused, *got.Over)
			default:
				counted++
			}
		})
	}
	wg.Wait()
	require.Empty(t, failures)
	assert.Equal(t, 3, counted)
	assert.Len(t, refused, 61)
	assert.Equal(t, int64(199000), applied(t, pool, "acme", "issue_credit"))
	for _, l := range refused {
		assert.Equal(t, int64(199000), l.Spent, "a refused charge read the total of every charge before it")
		assert.Equal(t, "credits", l.Cap)
	}
}

// Two caps over one tool, and runs with budgets, charged concurrently in
// both orders of the caps' names: no deadlock, no limit crossed.
func TestChargesLockTheirLimitsInOneOrder(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t, 16)
	setCap(t, pool, spend.Cap{Tenant: "acme", Name: "a-credits", Tools: []string{"issue_credit"}, Currency: "EUR", Amount: 5000})
	setCap(t, pool, spend.Cap{Tenant: "acme", Name: "b-money", Tools: []string{"issue_credit", "refund_payment"}, Currency: "EUR", Amount: 4000, Period: spend.PeriodRolling})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Go(func() {
			tool := "issue_credit"
			if i%2 == 1 {
				tool = "refund_payment"
			}
			_, err := chargeOne(ctx, pool, spend.Charge{Tenant: "acme", RunID: fmt.Sprintf("r%d", i%4), Step: int64(i + 1),
				Tool: tool, Key: fmt.Sprintf("k%d", i), Amounts: eur(300), Budget: eur(1200)})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	total := applied(t, pool, "acme", "issue_credit") + applied(t, pool, "acme", "refund_payment")
	assert.LessOrEqual(t, total, int64(4000), "b-money holds across its two tools")
	assert.Equal(t, int64(3900), total, "b-money admits every 300 that fits")
	var perRun int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT max(s) FROM (SELECT sum(amount) s FROM spend_entries GROUP BY budget_run) x`).Scan(&perRun))
	assert.LessOrEqual(t, perRun, int64(1200), "no run's budget is crossed")
}

func TestAStepCountsOnceWhateverRetries(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t, 4)
	c := spend.Charge{Tenant: "acme", RunID: "r1", Step: 2, Tool: "issue_credit", Key: "acme/r1/2/issue_credit", Amounts: eur(500)}
	first, err := chargeOne(ctx, pool, c)
	require.NoError(t, err)
	assert.False(t, first.Already)
	again, err := chargeOne(ctx, pool, c)
	require.NoError(t, err)
	assert.True(t, again.Already)
	assert.Nil(t, again.Over)
	assert.Equal(t, int64(500), applied(t, pool, "acme", "issue_credit"))

	// A charge whose effect rolled back left nothing.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := spend.ChargeTx(ctx, tx, spend.Charge{Tenant: "acme", RunID: "r1", Step: 3, Tool: "issue_credit", Key: "k3", Amounts: eur(700)})
		require.NoError(t, err)
		return errors.New("the effect failed")
	})
	require.Error(t, err)
	assert.Equal(t, int64(500), applied(t, pool, "acme", "issue_credit"))
}

func TestTheRunsBudgetParksTheChargeThatWouldCrossIt(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t, 4)
	budget := eur(50000)
	for step, want := range []bool{false, false, true} {
		got, err := chargeOne(ctx, pool, spend.Charge{Tenant: "acme", RunID: "r1", Step: int64(step + 1), Tool: "refund_payment",
			Key: fmt.Sprintf("k%d", step), Amounts: eur(20000), Budget: budget})
		require.NoError(t, err)
		assert.Equal(t, want, got.Over != nil, "refund %d", step+1)
		if got.Over != nil {
			assert.Equal(t, "run", got.Over.Period)
			assert.Equal(t, "over the run's budget: 400.00 of 500.00 EUR spent, this call 200.00", got.Over.Reason())
		}
	}
	// Another run's budget is its own; the budget of a run that delegated
	// counts the runs it delegated to.
	got, err := chargeOne(ctx, pool, spend.Charge{Tenant: "acme", RunID: "r2", Step: 1, Tool: "refund_payment", Key: "k9", Amounts: eur(20000), Budget: budget})
	require.NoError(t, err)
	assert.Nil(t, got.Over)
	got, err = chargeOne(ctx, pool, spend.Charge{Tenant: "acme", RunID: "r1.3", BudgetRun: "r1", Step: 1, Tool: "refund_payment", Key: "k10", Amounts: eur(20000), Budget: budget})
	require.NoError(t, err)
	require.NotNil(t, got.Over)

	// An approver's exception counts past it, marked as such.
	got, err = chargeOne(ctx, pool, spend.Charge{Tenant: "acme", RunID: "r1", Step: 3, Tool: "refund_payment", Key: "k2", Amounts: eur(20000), Budget: budget, Exception: true})
	require.NoError(t, err)
	assert.Nil(t, got.Over)
	totals, err := spend.RunTotals(ctx, pool, "acme", "r1", budget)
	require.NoError(t, err)
	require.Len(t, totals, 1)
	assert.Equal(t, int64(60000), totals[0].Spent)
	var exception bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT exception FROM spend_entries WHERE key = 'k2'`).Scan(&exception))
	assert.True(t, exception)

	// Unchecked counts and refuses nothing.
	got, err = chargeOne(ctx, pool, spend.Charge{Tenant: "acme", RunID: "r1", Step: 4, Tool: "refund_payment", Key: "k4", Amounts: eur(20000), Budget: budget, Unchecked: true})
	require.NoError(t, err)
	assert.Nil(t, got.Over)
	totals, err = spend.RunTotals(ctx, pool, "acme", "r1", budget)
	require.NoError(t, err)
	assert.Equal(t, int64(80000), totals[0].Spent)
}

func TestAReservationIsKeptHeldOrReleasedByTheOutcome(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t, 4)
	setCap(t, pool, spend.Cap{Tenant: "acme", Name: "refunds", Tools: []string{"refund_payment"}, Currency: "EUR", Amount: 10000})
	c := func(key string, n int64) spend.Charge {
		return spend.Charge{Tenant: "acme", RunID: "r-" + key, Step: 1, Tool: "refund_payment", Key: key, Amounts: eur(n)}
	}
	got, err := spend.Reserve(ctx, pool, c("held", 6000))
	require.NoError(t, err)
	require.Nil(t, got.Over)

	// A held reservation counts: the next call over the rest is refused.
	got, err = spend.Reserve(ctx, pool, c("next", 5000))
	require.NoError(t, err)
	require.NotNil(t, got.Over)
	assert.Equal(t, int64(6000), got.Over.Spent)
	us, err := spend.ListCaps(ctx, pool, "acme")
	require.NoError(t, err)
	require.Len(t, us, 1)
	assert.Equal(t, int64(0), us[0].Spent)
	assert.Equal(t, int64(6000), us[0].Held)
	assert.InDelta(t, 0.6, us[0].Ratio, 1e-9)

	// Another attempt of the held step keeps its reservation as it is.
	got, err = spend.Reserve(ctx, pool, c("held", 6000))
	require.NoError(t, err)
	assert.True(t, got.Already)

	// Released: it counts no more, and the next call fits.
	settled, err := spend.Settle(ctx, pool, "acme", "held", false)
	require.NoError(t, err)
	assert.Equal(t, eur(6000), settled)
	got, err = spend.Reserve(ctx, pool, c("next", 5000))
	require.NoError(t, err)
	require.Nil(t, got.Over)
	settled, err = spend.Settle(ctx, pool, "acme", "next", true)
	require.NoError(t, err)
	assert.Equal(t, eur(5000), settled)
	settled, err = spend.Settle(ctx, pool, "acme", "next", false)
	require.NoError(t, err)
	assert.Empty(t, settled, "a settled entry stays as it is")
	u, err := spend.GetCap(ctx, pool, "acme", "refunds")
	require.NoError(t, err)
	assert.Equal(t, int64(5000), u.Spent)
	assert.Equal(t, int64(0), u.Held)

	// An attempt that lost its lease released a reservation that the
	// attempt which took over then applied: the amount counts again.
	got, err = spend.Reserve(ctx, pool, c("raced", 1000))
	require.NoError(t, err)
	require.Nil(t, got.Over)
	_, err = spend.Settle(ctx, pool, "acme", "raced", false)
	require.NoError(t, err)
	settled, err = spend.Settle(ctx, pool, "acme", "raced", true)
	require.NoError(t, err)
	assert.Equal(t, eur(1000), settled)
	u, err = spend.GetCap(ctx, pool, "acme", "refunds")
	require.NoError(t, err)
	assert.Equal(t, int64(6000), u.Spent)

	// A released step tried again reserves again, against the cap as it
	// stands now.
	got, err = spend.Reserve(ctx, pool, c("held", 6000))
	require.NoError(t, err)
	require.NotNil(t, got.Over)
	assert.False(t, got.Already)
}

func TestAlertsFireAtEightyAndAHundredOncePerWindow(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t, 4)
	setCap(t, pool, spend.Cap{Tenant: "acme", Name: "credits", Tools: []string{"issue_credit"}, Currency: "EUR", Amount: 1000})
	step := 0
	charge := func(n int64, exception bool) []spend.Level {
		step++
		got, err := chargeOne(ctx, pool, spend.Charge{Tenant: "acme", RunID: "r1", Step: int64(step), Tool: "issue_credit",
			Key: fmt.Sprintf("k%d", step), Amounts: eur(n), Exception: exception})
		require.NoError(t, err)
		return got.Alerts()
	}
	assert.Empty(t, charge(700, false))
	alerts := charge(150, false)
	require.Len(t, alerts, 1)
	assert.Equal(t, 80, alerts[0].Alert)
	assert.Empty(t, charge(100, false), "80% fired in this window already")
	assert.Empty(t, charge(100, false), "over: nothing counted, no alert")
	alerts = charge(100, true)
	require.Len(t, alerts, 1)
	assert.Equal(t, 100, alerts[0].Alert)
	assert.Empty(t, charge(10, true))
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM spend_alerts`).Scan(&n))
	assert.Equal(t, 2, n)

	// A new window: yesterday's entries and alerts no longer count.
	_, err := pool.Exec(ctx, `UPDATE spend_entries SET counted_at = counted_at - interval '1 day'`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE spend_alerts SET fired_at = fired_at - interval '1 day'`)
	require.NoError(t, err)
	alerts = charge(900, false)
	require.Len(t, alerts, 1)
	assert.Equal(t, 80, alerts[0].Alert)
}

func TestWindowsCountWhatTheyCover(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t, 4)
	setCap(t, pool, spend.Cap{Tenant: "acme", Name: "day", Tools: []string{"issue_credit"}, Currency: "EUR", Amount: 1000})
	setCap(t, pool, spend.Cap{Tenant: "acme", Name: "rolling", Tools: []string{"refund_payment"}, Currency: "EUR", Amount: 1000, Period: spend.PeriodRolling})
	for _, tool := range []string{"issue_credit", "refund_payment"} {
		_, err := chargeOne(ctx, pool, spend.Charge{Tenant: "acme", RunID: "r1", Step: 1, Tool: tool, Key: "old-" + tool, Amounts: eur(900)})
		require.NoError(t, err)
	}
	// 25 hours ago is outside both windows; 2 hours into the UTC day
	// before is outside the day and, depending on the hour now, maybe
	// inside the rolling 24 hours: set it where both answers are known.
	_, err := pool.Exec(ctx, `UPDATE spend_entries SET counted_at = statement_timestamp() - interval '25 hours'`)
	require.NoError(t, err)
	for _, tool := range []string{"issue_credit", "refund_payment"} {
		got, err := chargeOne(ctx, pool, spend.Charge{Tenant: "acme", RunID: "r2", Step: 1, Tool: tool, Key: "new-" + tool, Amounts: eur(900)})
		require.NoError(t, err)
		assert.Nil(t, got.Over, tool)
	}
	_, err = pool.Exec(ctx, `UPDATE spend_entries SET counted_at = statement_timestamp() - interval '23 hours' WHERE key LIKE 'old-%'`)
	require.NoError(t, err)
	got, err := chargeOne(ctx, pool, spend.Charge{Tenant: "acme", RunID: "r3", Step: 1, Tool: "refund_payment", Key: "r3", Amounts: eur(10)})
	require.NoError(t, err)
	require.NotNil(t, got.Over, "23 hours ago is within the rolling window")
	assert.Equal(t, int64(1800), got.Over.Spent)
}

func TestCapsThatCannotHoldAreRefusedNamingTheField(t *testing.T) {
	for _, tc := range []struct {
		cap   spend.Cap
		field string
	}{
		{spend.Cap{Name: "Bad Name", Tools: []string{"issue_credit"}, Currency: "EUR", Amount: 1}, "name"},
		{spend.Cap{Name: "x", Currency: "EUR", Amount: 1}, "tools"},
		{spend.Cap{Name: "x", Tools: []string{"nope"}, Currency: "EUR", Amount: 1}, "tools"},
		{spend.Cap{Name: "x", Tools: []string{"send_email"}, Currency: "EUR", Amount: 1}, "tools"},
		{spend.Cap{Name: "x", Tools: []string{"note_amount"}, Currency: "EUR", Amount: 1}, "tools"},
		{spend.Cap{Name: "x", Tools: []string{"quote"}, Currency: "EUR", Amount: 1}, "tools"},
		{spend.Cap{Name: "x", Tools: []string{"issue_credit"}, Currency: "EURO", Amount: 1}, "currency"},
		{spend.Cap{Name: "x", Tools: []string{"issue_credit"}, Currency: "XYZ", Amount: 1}, "currency"},
		{spend.Cap{Name: "x", Tools: []string{"issue_credit"}, Currency: "XXX", Amount: 1}, "currency"},
		{spend.Cap{Name: "x", Tools: []string{"issue_credit"}, Currency: "978", Amount: 1}, "currency"},
		{spend.Cap{Name: "x", Tools: []string{"issue_credit"}, Currency: " EUR", Amount: 1}, "currency"},
		{spend.Cap{Name: "x", Tools: []string{"issue_credit"}, Currency: "EUR", Amount: -5}, "amount"},
		{spend.Cap{Name: "x", Tools: []string{"issue_credit"}, Currency: "EUR"}, "amount"},
		{spend.Cap{Name: "x", Tools: []string{"issue_credit"}, Currency: "EUR", Amount: spend.MaxAmount + 1}, "amount"},
		{spend.Cap{Name: "x", Tools: []string{"issue_credit"}, Currency: "EUR", Amount: 1, Period: "week"}, "period"},
	} {
		err := spend.CheckCap(reg, &tc.cap)
		require.ErrorIs(t, err, spend.ErrInvalid, "%+v", tc.cap)
		assert.Contains(t, err.Error(), ": "+tc.field+": ", "%+v", tc.cap)
	}
	c := spend.Cap{Name: "ok", Tools: []string{"refund_payment", "issue_credit", "issue_credit"}, Currency: "eur", Amount: 1}
	require.NoError(t, spend.CheckCap(reg, &c))
	assert.Equal(t, []string{"issue_credit", "refund_payment"}, c.Tools)
	assert.Equal(t, "EUR", c.Currency)
	assert.Equal(t, spend.PeriodDay, c.Period)
	assert.Equal(t, spend.OtherPark, c.OtherCurrencies, "a cap parks other currencies unless it says otherwise")
}

// Limits fail closed: an amount in a currency that a limit covering the
// call does not name parks, unless the limit allows other currencies.
func TestAnAmountInACurrencyNoLimitNamesParks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t, 4)
	usd := spend.Amounts{"USD": 5000}
	step := int64(0)
	charge := func(tenant, tool string, amounts spend.Amounts, budget spend.Amounts, other string, exception bool) spend.Counted {
		t.Helper()
		step++
		got, err := chargeOne(ctx, pool, spend.Charge{Tenant: tenant, RunID: "r", Step: step, Tool: tool, Key: fmt.Sprintf("k%d", step),
			Amounts: amounts, Budget: budget, OtherCurrencies: other, Exception: exception})
		require.NoError(t, err)
		return got
	}

	// The run's budget names EUR only.
	got := charge("acme", "refund_payment", usd, eur(10000), "", false)
	require.NotNil(t, got.Over, "50.00 USD under a budget of 100.00 EUR")
	assert.Equal(t, "run", got.Over.Period)
	assert.Equal(t, []string{"EUR"}, got.Over.Named)
	assert.Equal(t, "outside the run's budget: it counts EUR only, and this call spends 50.00 USD", got.Over.Reason())
	assert.Zero(t, applied(t, pool, "acme", "refund_payment"), "a parked charge counts nothing")
	got = charge("acme", "refund_payment", spend.Amounts{"EUR": 100, "USD": 100}, spend.Amounts{"EUR": 10000, "USD": 10000}, "", false)
	assert.Nil(t, got.Over, "a budget may name several currencies")
	assert.Nil(t, charge("acme", "refund_payment", usd, eur(10000), spend.OtherAllow, false).Over, "the budget allows others")
	assert.Nil(t, charge("acme", "refund_payment", usd, eur(10000), "", true).Over, "an approver's exception")
	assert.Nil(t, charge("acme", "refund_payment", usd, nil, "", false).Over, "a run without a budget or a cap has no limit")

	// A tenant's caps on a tool name EUR and GBP; another tool's cap names
	// nothing of this tool.
	setCap(t, pool, spend.Cap{Tenant: "shop", Name: "credits-eur", Tools: []string{"issue_credit"}, Currency: "EUR", Amount: 100000})
	setCap(t, pool, spend.Cap{Tenant: "shop", Name: "credits-gbp", Tools: []string{"issue_credit"}, Currency: "GBP", Amount: 100000})
	setCap(t, pool, spend.Cap{Tenant: "shop", Name: "refunds", Tools: []string{"refund_payment"}, Currency: "EUR", Amount: 100000,
		OtherCurrencies: spend.OtherAllow})
	got = charge("shop", "issue_credit", usd, nil, "", false)
	require.NotNil(t, got.Over)
	assert.Equal(t, "credits-eur", got.Over.Cap)
	assert.Equal(t, []string{"EUR", "GBP"}, got.Over.Named)
	assert.Equal(t, "outside the daily cap for issue_credit (credits-eur): it counts EUR, GBP only, and this call spends 50.00 USD",
		got.Over.Reason())
	assert.Nil(t, charge("shop", "issue_credit", spend.Amounts{"GBP": 100}, nil, "", false).Over, "GBP has a cap of its own")
	assert.Nil(t, charge("shop", "refund_payment", usd, nil, "", false).Over, "the refunds cap allows other currencies")
	assert.Nil(t, charge("other", "issue_credit", usd, nil, "", false).Over, "another tenant's caps are not this one's")

	// Every cap of the tool must allow others for the amount to run.
	setCap(t, pool, spend.Cap{Tenant: "shop", Name: "credits-eur", Tools: []string{"issue_credit"}, Currency: "EUR", Amount: 100000,
		OtherCurrencies: spend.OtherAllow})
	got = charge("shop", "issue_credit", usd, nil, "", false)
	require.NotNil(t, got.Over)
	assert.Equal(t, "credits-gbp", got.Over.Cap, "the GBP cap still parks other currencies")
	caps, err := spend.ListCaps(ctx, pool, "shop")
	require.NoError(t, err)
	require.Len(t, caps, 3)
	assert.Equal(t, spend.OtherAllow, caps[0].OtherCurrencies)
	assert.Equal(t, spend.OtherPark, caps[1].OtherCurrencies)

	// A step whose key counted before the caps parked its currency (an
	// attempt that reserved, then died) keeps its reservation: its next
	// attempt finds it, and is not parked.
	held := spend.Charge{Tenant: "late", RunID: "r", Step: 1, Tool: "refund_payment", Key: "late-1", Amounts: usd}
	got, err = spend.Reserve(ctx, pool, held)
	require.NoError(t, err)
	require.Nil(t, got.Over)
	setCap(t, pool, spend.Cap{Tenant: "late", Name: "refunds", Tools: []string{"refund_payment"}, Currency: "EUR", Amount: 100000})
	got, err = spend.Reserve(ctx, pool, held)
	require.NoError(t, err)
	assert.Nil(t, got.Over, "the retry of a step that counted is not parked")
	assert.True(t, got.Already)
	held.Key, held.Step = "late-2", 2
	got, err = spend.Reserve(ctx, pool, held)
	require.NoError(t, err)
	assert.NotNil(t, got.Over, "a new step in USD parks at the EUR cap")

	c := spend.Cap{Name: "x", Tools: []string{"issue_credit"}, Currency: "EUR", Amount: 1, OtherCurrencies: "count"}
	err = spend.CheckCap(reg, &c)
	require.ErrorIs(t, err, spend.ErrInvalid)
	assert.Contains(t, err.Error(), ": other_currencies: ")
}

func TestCapsAreSetReplacedAndDeletedPerTenant(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t, 2)
	setCap(t, pool, spend.Cap{Tenant: "acme", Name: "credits", Tools: []string{"issue_credit"}, Currency: "EUR", Amount: 1000})
	setCap(t, pool, spend.Cap{Tenant: "acme", Name: "credits", Tools: []string{"issue_credit"}, Currency: "EUR", Amount: 2500})
	setCap(t, pool, spend.Cap{Tenant: "globex", Name: "credits", Tools: []string{"issue_credit"}, Currency: "USD", Amount: 10})
	u, err := spend.GetCap(ctx, pool, "acme", "credits")
	require.NoError(t, err)
	assert.Equal(t, int64(2500), u.Amount)
	assert.Equal(t, "test", u.UpdatedBy)
	require.ErrorIs(t, spend.DeleteCap(ctx, pool, "acme", "nope"), spend.ErrNotFound)
	require.NoError(t, spend.DeleteCap(ctx, pool, "acme", "credits"))
	_, err = spend.GetCap(ctx, pool, "acme", "credits")
	require.ErrorIs(t, err, spend.ErrNotFound)
	us, err := spend.ListCaps(ctx, pool, "globex")
	require.NoError(t, err)
	require.Len(t, us, 1)
	assert.Equal(t, "USD", us[0].Currency)
}

func TestALimitsFileIsReadStrictly(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, fmt.Sprintf("limits-%d.yaml", len(body)))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	caps, err := spend.LoadFile(write(`limits:
  - tenant: acme
    name: credits
    tools: [issue_credit]
    currency: EUR
    amount: 200000
  - tenant: acme
    name: refunds
    tools: [refund_payment]
    currency: EUR
    amount: 50000
    period: rolling_24h
`), reg)
	require.NoError(t, err)
	require.Len(t, caps, 2)
	assert.Equal(t, spend.PeriodDay, caps[0].Period)

	_, err = spend.LoadFile(write("limits:\n  - tenant: acme\n    name: credits\n    tool: [issue_credit]\n"), reg)
	require.ErrorContains(t, err, "tool")
	_, err = spend.LoadFile(write("limits:\n  - name: credits\n    tools: [issue_credit]\n    currency: EUR\n    amount: 1\n"), reg)
	require.ErrorContains(t, err, "tenant")
	_, err = spend.LoadFile(write("limits:\n  - {tenant: a, name: c, tools: [issue_credit], currency: EUR, amount: 1}\n  - {tenant: a, name: c, tools: [issue_credit], currency: EUR, amount: 2}\n"), reg)
	require.ErrorContains(t, err, "two limits named c")
	_, err = spend.LoadFile(write("limits:\n  - {tenant: a, name: c, tools: [send_email], currency: EUR, amount: 1}\n"), reg)
	require.ErrorContains(t, err, "limit 1 (c)")
	require.ErrorContains(t, err, "send_email")
}

// A charge that takes a cap from below 80% past 100% (an exception)
// reports the 100% alert and records both: no 80% alert comes late.
func TestAChargePastBothThresholdsRecordsBoth(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t, 2)
	setCap(t, pool, spend.Cap{Tenant: "acme", Name: "credits", Tools: []string{"issue_credit"}, Currency: "EUR", Amount: 1000})
	got, err := chargeOne(ctx, pool, spend.Charge{Tenant: "acme", RunID: "r1", Step: 1, Tool: "issue_credit", Key: "k1", Amounts: eur(1200), Exception: true})
	require.NoError(t, err)
	alerts := got.Alerts()
	require.Len(t, alerts, 1)
	assert.Equal(t, 100, alerts[0].Alert)
	got, err = chargeOne(ctx, pool, spend.Charge{Tenant: "acme", RunID: "r1", Step: 2, Tool: "issue_credit", Key: "k2", Amounts: eur(10), Exception: true})
	require.NoError(t, err)
	assert.Empty(t, got.Alerts())
	rows, err := pool.Query(ctx, `SELECT threshold FROM spend_alerts ORDER BY threshold`)
	require.NoError(t, err)
	thresholds, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	assert.Equal(t, []int{80, 100}, thresholds)
}
