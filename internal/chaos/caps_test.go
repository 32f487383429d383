package chaos

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/payments"
	"github.com/oncerun/oncerun/internal/pgtest"
	sandbox "github.com/oncerun/oncerun/internal/sandbox/payments"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/workflows"
)

func TestCheckCapsFlagsAnExcessAndPassesAnExactFit(t *testing.T) {
	t.Parallel()
	day := func(applied, exceptions int64) CapDay {
		return CapDay{Tenant: "acme", Tool: shop.ToolIssueCredit, Currency: "EUR", Day: "2025-06-01", Applied: applied, Exceptions: exceptions}
	}
	for _, tc := range []struct {
		name string
		days []CapDay
		want []string
	}{
		{name: "an exact fit", days: []CapDay{day(200000, 0)}},
		{name: "nothing applied", days: nil},
		{name: "one cent over", days: []CapDay{day(200001, 0)},
			want: []string{"daily cap for issue_credit of 2,000.00 EUR: tenant acme applied 2,000.01 EUR on 2025-06-01 (exceptions of 0.00 EUR excluded), 0.01 EUR over"}},
		{name: "over by exceptions only", days: []CapDay{day(212000, 12000)}},
		{name: "over beside an exception", days: []CapDay{day(212001, 12000)},
			want: []string{"applied 2,000.01 EUR on 2025-06-01 (exceptions of 120.00 EUR excluded)"}},
		{name: "each day and tool on its own", days: []CapDay{
			day(200000, 0),
			{Tenant: "acme", Tool: shop.ToolIssueCredit, Currency: "EUR", Day: "2025-06-02", Applied: 150000},
			{Tenant: "acme", Tool: payments.RefundPayment, Currency: "EUR", Day: "2025-06-01", Applied: 250000},
		}, want: []string{"daily cap for refund_payment of 2,000.00 EUR: tenant acme applied 2,500.00 EUR on 2025-06-01"}},
		{name: "a cent in another currency", days: []CapDay{day(100, 0),
			{Tenant: "acme", Tool: shop.ToolIssueCredit, Currency: "USD", Day: "2025-06-01", Applied: 1}},
			want: []string{"daily cap for issue_credit of 2,000.00 EUR: tenant acme applied 0.01 USD on 2025-06-01 in a currency the cap does not name"}},
		{name: "another currency let past", days: []CapDay{
			{Tenant: "acme", Tool: shop.ToolIssueCredit, Currency: "USD", Day: "2025-06-01", Applied: 5000, Exceptions: 5000}}},
		{name: "no currency at all", days: []CapDay{
			{Tenant: "acme", Tool: shop.ToolIssueCredit, Currency: "XXX", Day: "2025-06-01", Applied: 9000}},
			want: []string{"applied 9000 XXX on 2025-06-01 in a currency the cap does not name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := checkCaps(200000, "EUR", tc.days)
			require.Len(t, got, len(tc.want), "%q", got)
			for i := range tc.want {
				assert.Contains(t, got[i], tc.want[i])
			}
		})
	}
}

func TestTallyCapDaysSumsPerToolAndUTCDayAndExceptsAStepOnce(t *testing.T) {
	t.Parallel()
	paris := time.FixedZone("CEST", 2*3600)
	effects := []capEffect{
		{tenant: "acme", tool: shop.ToolIssueCredit, currency: "EUR", runID: "r-a", at: time.Date(2025, 6, 1, 23, 59, 59, 0, time.UTC), amount: 12000},
		// 01:30 in Paris is 23:30 UTC the day before.
		{tenant: "acme", tool: shop.ToolIssueCredit, currency: "EUR", runID: "r-b", at: time.Date(2025, 6, 2, 1, 30, 0, 0, paris), amount: 3000},
		{tenant: "acme", tool: shop.ToolIssueCredit, currency: "EUR", runID: "r-c", at: time.Date(2025, 6, 2, 0, 0, 1, 0, time.UTC), amount: 12000},
		{tenant: "acme", tool: shop.ToolIssueCredit, currency: "USD", runID: "r-u", at: time.Date(2025, 6, 2, 0, 0, 1, 0, time.UTC), amount: 7000},
		// r-d's refund landed twice: one of them is its exception.
		{tenant: "acme", tool: payments.RefundPayment, currency: "EUR", runID: "r-d", at: time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC), amount: 15000},
		{tenant: "acme", tool: payments.RefundPayment, currency: "EUR", runID: "r-d", at: time.Date(2025, 6, 1, 10, 0, 1, 0, time.UTC), amount: 15000},
	}
	got := tallyCapDays(effects, map[runTool]bool{{"r-d", payments.RefundPayment}: true, {"r-a", payments.RefundPayment}: true})
	assert.Equal(t, []CapDay{
		{Tenant: "acme", Tool: shop.ToolIssueCredit, Currency: "EUR", Day: "2025-06-01", Applied: 15000, Effects: 2},
		{Tenant: "acme", Tool: shop.ToolIssueCredit, Currency: "EUR", Day: "2025-06-02", Applied: 12000, Effects: 1},
		{Tenant: "acme", Tool: shop.ToolIssueCredit, Currency: "USD", Day: "2025-06-02", Applied: 7000, Effects: 1},
		{Tenant: "acme", Tool: payments.RefundPayment, Currency: "EUR", Day: "2025-06-01", Applied: 30000, Exceptions: 15000, Effects: 2},
	}, got)
}

// TestTheCapIsCheckedAtTheDestination reads credits and a provider's
// ledger as the harness does, and checks them against a cap
// of 150.00 EUR: an exact fit on each day passes, one more credit fails.
func TestTheCapIsCheckedAtTheDestination(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t, 2)
	day1 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	day2 := day1.Add(24 * time.Hour)
	credit := func(order string, cents int64, currency string, at time.Time) {
		_, err := pool.Exec(ctx, `INSERT INTO credits (tenant, order_id, reason, amount_cents, currency, idempotency_key, created_at)
VALUES ('acme', $1, 'chaos', $2, $3, $1, $4)`, order, cents, currency, at)
		require.NoError(t, err)
	}
	credit("o-a", 12000, "EUR", day1)
	credit("o-b", 3000, "EUR", day1.Add(11*time.Hour+59*time.Minute))
	credit("o-c", 12000, "EUR", day2)
	credit("o-d", 3000, "EUR", day2)
	credit("o-e", 12000, "EUR", day2) // approved past the cap
	credit("o-f", 99999, "USD", day2) // not the cap's currency, let past it
	// r-e's credit was approved past the cap, and r-f's; r-f's refund too,
	// but it did not land.
	excepted := map[runTool]bool{{"r-e", shop.ToolIssueCredit}: true, {"r-f", shop.ToolIssueCredit}: true, {"r-f", payments.RefundPayment}: true}
	runOfOrder := map[string]string{"o-a": "r-a", "o-b": "r-b", "o-c": "r-c", "o-d": "r-d", "o-e": "r-e", "o-f": "r-f", "o-g": "r-g"}
	ledger := []sandbox.Refund{
		{PaymentID: "pay_o-a", Amount: 10000, Currency: "eur", Created: day1.Unix()},
		{PaymentID: "pay_o-b", Amount: 5000, Currency: "EUR", Created: day1.Unix()},
	}
	runOfPayment := map[string]string{"pay_o-a": "r-a", "pay_o-b": "r-b", "pay_o-c": "r-c"}

	check := func() []string {
		effects, err := creditEffects(ctx, pool, "acme", runOfOrder)
		require.NoError(t, err)
		effects = append(effects, refundEffects(ledger, "acme", runOfPayment)...)
		days := tallyCapDays(effects, excepted)
		assert.Contains(t, days, CapDay{Tenant: "acme", Tool: payments.RefundPayment, Currency: "EUR", Day: "2025-06-01", Applied: 15000, Effects: 2},
			"a currency spelled either way is one currency")
		return checkCaps(15000, "EUR", days)
	}
	assert.Empty(t, check(), "150.00 on each day, the exceptions excluded")

	credit("o-g", 1, "EUR", day2)
	over := check()
	require.Len(t, over, 1)
	assert.Contains(t, over[0], "applied 150.01 EUR on 2025-06-02 (exceptions of 120.00 EUR excluded), 0.01 EUR over")

	ledger = append(ledger, sandbox.Refund{PaymentID: "pay_o-c", Amount: 2500, Currency: "usd", Created: day1.Unix()})
	over = check()
	require.Len(t, over, 2)
	assert.Contains(t, over[1], "daily cap for refund_payment of 150.00 EUR: tenant acme applied 25.00 USD on 2025-06-01 in a currency the cap does not name")
}

func TestTheRunsSpellTheirCurrenciesEveryWayUnderACap(t *testing.T) {
	t.Parallel()
	ps := plans("t", 8, 0, rand.New(rand.NewPCG(1, 2)))
	spellCurrencies(ps)
	var spellings []string
	for _, p := range ps {
		spellings = append(spellings, p.creditCurrency+"/"+p.refundCurrency)
	}
	assert.Equal(t, []string{"EUR/EUR", "EUR/eur", "EUR/Eur", "USD/EUR", "EUR/eur", "EUR/Eur", "EUR/EUR", "USD/eur"}, spellings)
	var credits, refunds int64
	for i, p := range ps {
		refunds += p.refundCents
		if i%4 != 3 {
			credits += p.creditCents
		}
	}
	assert.Equal(t, refunds, planned(ps)[payments.RefundPayment], "every spelling of the refunds' currency is planned against the cap")
	assert.Equal(t, credits, planned(ps)[shop.ToolIssueCredit], "the USD credits are not planned against the EUR cap")
}

func TestAStepParkedAtALimitMustNotApplyUnlessApprovedThere(t *testing.T) {
	t.Parallel()
	big := runPlan{runID: "r-big", creditCents: largeCreditCents, refundCents: smallRefundCents}
	small := runPlan{runID: "r-small", creditCents: smallCreditCents, refundCents: smallRefundCents}
	credit := func(p runPlan) stepRef { return stepRef{p.runID, stepCredit} }
	approve, reject := workflows.DecisionApprove, workflows.DecisionReject
	for _, tc := range []struct {
		name    string
		plan    runPlan
		waits   map[stepRef]wait
		decided map[waitRef]workflows.Decision
		want    int
	}{
		{name: "no wait, no rule", plan: small, want: 1},
		{name: "the rule asks, nobody decided", plan: big, want: 0},
		{name: "approved under the rule", plan: big, want: 1,
			waits:   map[stepRef]wait{credit(big): {approvalstore.KindRule, 1}},
			decided: map[waitRef]workflows.Decision{{credit(big), 1}: approve}},
		{name: "approved under the rule, then rejected at the cap", plan: big, want: 0,
			waits:   map[stepRef]wait{credit(big): {approvalstore.KindLimit, 2}},
			decided: map[waitRef]workflows.Decision{{credit(big), 1}: approve, {credit(big), 2}: reject}},
		{name: "approved under the rule, parked at the cap, undecided", plan: big, want: 0,
			waits:   map[stepRef]wait{credit(big): {approvalstore.KindLimit, 2}},
			decided: map[waitRef]workflows.Decision{{credit(big), 1}: approve}},
		{name: "no rule, rejected at the cap", plan: small, want: 0,
			waits:   map[stepRef]wait{credit(small): {approvalstore.KindLimit, 1}},
			decided: map[waitRef]workflows.Decision{{credit(small), 1}: reject}},
		{name: "no rule, approved past the cap", plan: small, want: 1,
			waits:   map[stepRef]wait{credit(small): {approvalstore.KindLimit, 1}},
			decided: map[waitRef]workflows.Decision{{credit(small), 1}: approve}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, wantOf(tc.plan, stepCredit, tc.waits, tc.decided))
			assert.Equal(t, 1, wantOf(tc.plan, stepNote, tc.waits, tc.decided), "the note never waits")
		})
	}
}

// decideFixture is a harness whose API records the decisions sent to it,
// on a database of its own.
type decideFixture struct {
	h    *harness
	pool *pgxpool.Pool
	mu   sync.Mutex
	sent []string
	// refused counts the decisions refused for naming another round.
	refused int
}

func newDecideFixture(t *testing.T) *decideFixture {
	f := &decideFixture{pool: pgtest.NewPool(t, 2)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req approvals.DecideRequest
		_ = json.Unmarshal(b, &req)
		// As the service does: a decision for another round than the
		// step's is refused.
		var run string
		var round int
		parts := strings.Split(r.URL.Path, "/") // /v1/runs/{run}/steps/{n}/{verb}
		if err := f.pool.QueryRow(r.Context(), `SELECT run_id, round FROM approvals WHERE run_id = $1`, parts[3]).Scan(&run, &round); err == nil &&
			max(req.Round, 1) != round {
			f.mu.Lock()
			f.refused++
			f.mu.Unlock()
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"error":{"code":"round_changed","message":"another round"}}`))
			return
		}
		f.mu.Lock()
		f.sent = append(f.sent, r.URL.Path+" "+req.Comment)
		f.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(srv.Close)
	f.h = &harness{cfg: Config{RejectRate: 0}, out: io.Discard, rng: rand.New(rand.NewPCG(1, 2)),
		api: newAPIClient(srv.URL, "token"), pool: f.pool, decided: map[waitRef]workflows.Decision{}}
	return f
}

func (f *decideFixture) row(t *testing.T, run string, step int64, kind string, round int) {
	_, err := f.pool.Exec(context.Background(), `INSERT INTO approvals (tenant, run_id, step, tool, args, args_hash, requested_at, deadline, kind, round)
VALUES ($1, $2, $3, 'issue_credit', '{}', $4, now(), now() + interval '1 hour', $5, $6)`,
		tenant, run, step, strings.Repeat("a", 64), kind, round)
	require.NoError(t, err)
}

func TestTheHarnessRejectsEveryStepParkedAtACap(t *testing.T) {
	t.Parallel()
	f := newDecideFixture(t)
	ctx := context.Background()
	f.row(t, "r-a", stepCredit, approvalstore.KindLimit, 2)
	f.row(t, "r-b", stepCredit, approvalstore.KindRule, 1)
	item := func(run string) approvals.Item {
		return approvals.Item{Kind: approvals.KindApproval, RunID: run, Step: stepCredit, ArgsHash: strings.Repeat("a", 64)}
	}

	f.h.decideStep(ctx, item("r-a"), wait{approvalstore.KindLimit, 2})
	stale := item("r-a")
	stale.Decision = &approvals.DecisionRecord{Decision: workflows.DecisionApprove} // round 1's, listed before the step parked
	f.h.decideStep(ctx, stale, wait{approvalstore.KindLimit, 2})
	// Listed under its rule in round 1, it waits at the cap by now: no approve.
	f.h.decideStep(ctx, item("r-a"), wait{approvalstore.KindRule, 1})
	f.h.decideStep(ctx, item("r-b"), wait{approvalstore.KindRule, 1})

	assert.Equal(t, []string{"/v1/runs/r-a/steps/2/reject " + capComment, "/v1/runs/r-b/steps/2/approve chaos harness"}, f.sent)
	assert.Equal(t, map[waitRef]workflows.Decision{
		{stepRef{"r-a", stepCredit}, 2}: workflows.DecisionReject,
		{stepRef{"r-b", stepCredit}, 1}: workflows.DecisionApprove,
	}, f.h.decided)
	assert.Equal(t, 1, f.h.counts.CapRejections)
	assert.Equal(t, 1, f.refused, "the approve meant for round 1 was refused, not sent as an exception")
	assert.Empty(t, f.h.counts.violations)
}

func TestWaitsAreReadFromTheApprovalsStore(t *testing.T) {
	t.Parallel()
	f := newDecideFixture(t)
	ctx := context.Background()
	f.row(t, "r-a", stepCredit, approvalstore.KindLimit, 2)
	f.row(t, "r-b", stepRefund, approvalstore.KindRule, 1)
	_, err := f.pool.Exec(ctx, `UPDATE approvals SET state = 'rejected', decided_at = now(), decided_by = 'chaos'
WHERE run_id = 'r-b'`)
	require.NoError(t, err)

	open, err := readWaits(ctx, f.pool, tenant, 10, waitsOpen)
	require.NoError(t, err)
	assert.Equal(t, map[stepRef]wait{{"r-a", stepCredit}: {approvalstore.KindLimit, 2}}, open)
	all, err := readWaits(ctx, f.pool, tenant, 10, waitsAll)
	require.NoError(t, err)
	assert.Equal(t, map[stepRef]wait{
		{"r-a", stepCredit}: {approvalstore.KindLimit, 2},
		{"r-b", stepRefund}: {approvalstore.KindRule, 1},
	}, all)
	_, err = readWaits(ctx, f.pool, tenant, 1, waitsAll)
	assert.ErrorContains(t, err, "more than the runs have steps")
}

func TestCentsReadMajorUnits(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Cents{"2000": 200000, "2000.00": 200000, "2000.5": 200050, "0.01": 1, " 600 ": 60000} {
		var c Cents
		require.NoError(t, c.Set(in), in)
		assert.Equal(t, want, c, in)
	}
	for _, in := range []string{"", "-1", "1.234", "2,000.00", ".5", "1.", "1e3", "EUR 5", "9999999999999999"} {
		var c Cents
		assert.Error(t, c.Set(in), in)
	}
	assert.Equal(t, "2000.50", Cents(200050).String())
	assert.Equal(t, "0", Cents(0).String())
}
