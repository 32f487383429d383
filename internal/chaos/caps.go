package chaos

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/money"
	"github.com/oncerun/oncerun/internal/payments"
	sandbox "github.com/oncerun/oncerun/internal/sandbox/payments"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/internal/spend"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// capTools are the tools the runs spend with. Config.DailyCap caps each
// on its own, in a cap named after it: issue_credit's amounts land in the
// credits table, refund_payment's in the provider's ledger.
var capTools = []string{shop.ToolIssueCredit, payments.RefundPayment}

// toolOf is the tool of each step of the runs that spends.
var toolOf = map[int64]string{stepCredit: shop.ToolIssueCredit, stepRefund: payments.RefundPayment}

// capComment is the harness's comment on every step it rejects at a cap.
const capComment = "chaos: over the cap"

// Cents is an amount of the plans' currency in minor units, written as
// the flag takes it: in major units with at most two decimals ("2000",
// "2000.5", "2000.00"), no sign and no thousands separators.
type Cents int64

// String writes c in major units with two decimals; 0 is "0".
func (c Cents) String() string {
	if c == 0 {
		return "0"
	}
	return money.Decimal(int64(c), 2, false)
}

// Set reads an amount in major units.
func (c *Cents) Set(s string) error {
	whole, frac, dot := strings.Cut(strings.TrimSpace(s), ".")
	digits := func(d string) bool {
		return strings.Trim(d, "0123456789") == ""
	}
	if whole == "" || len(whole) > 15 || !digits(whole) || len(frac) > 2 || !digits(frac) || (dot && frac == "") {
		return fmt.Errorf("%q is not an amount such as 2000 or 2000.00: major units of %s, at most two decimals", s, planCurrency)
	}
	n, _ := strconv.ParseInt(whole, 10, 64)
	f, _ := strconv.ParseInt((frac + "00")[:2], 10, 64)
	*c = Cents(n*100 + f)
	return nil
}

// Type names the flag's value in help.
func (*Cents) Type() string { return planCurrency }

// setCaps sets Config.DailyCap, when there is one, as a cap per UTC day of
// the runs' tenant on each of capTools, checked as any cap is against the
// tools the workers run.
func (h *harness) setCaps(ctx context.Context) error {
	if h.cfg.DailyCap == 0 {
		return nil
	}
	reg, err := tools.NewRegistry(tools.RegistryConfig{},
		append(shop.Tools(shop.Config{}), payments.Tools(nil, payments.ToolsConfig{})...)...)
	if err != nil {
		return fmt.Errorf("chaos: tool registry for the caps: %w", err)
	}
	plan := planned(h.runs)
	var words []string
	for _, tool := range capTools {
		c := spend.Cap{Tenant: tenant, Name: tool, Tools: []string{tool}, Currency: planCurrency,
			Amount: int64(h.cfg.DailyCap), Period: spend.PeriodDay}
		if err := spend.CheckCap(reg, &c); err != nil {
			return fmt.Errorf("chaos: --daily-cap: %w", err)
		}
		if err := spend.SetCap(ctx, h.pool, &c, "chaos harness"); err != nil {
			return fmt.Errorf("chaos: --daily-cap: %w", err)
		}
		binds := "over it"
		if plan[tool] <= c.Amount {
			binds = "within it: no step of it waits at the cap"
		}
		words = append(words, fmt.Sprintf("%s %s, %s", tool, money.Format(plan[tool], planCurrency), binds))
	}
	h.say("daily cap of %s on each of %s; the runs propose %s", money.Format(int64(h.cfg.DailyCap), planCurrency),
		strings.Join(capTools, " and "), strings.Join(words, "; "))
	return nil
}

// Caps is the report's account of Config.DailyCap.
type Caps struct {
	// Cap is the cap of each tool per UTC day, in minor units of Currency.
	Cap      int64  `json:"cap"`
	Currency string `json:"currency"`
	// Planned is what the runs proposed to spend with each tool.
	Planned map[string]int64 `json:"planned"`
	// Days are what each tool applied on each UTC day, at the destination.
	Days []CapDay `json:"days"`
	// Parked counts the steps that waited at a cap (approvals of kind
	// limit); Rejected those the harness rejected there, Excepted those
	// approved past it, and the rest were not decided.
	Parked   int `json:"parked"`
	Rejected int `json:"parked_rejected"`
	Excepted int `json:"parked_approved"`
	// Over counts the days a tool applied more than the cap, exceptions
	// excluded, or anything in another currency: each is a violation.
	Over int `json:"days_over_cap"`
	// Misspelt counts the runs that spelled a currency as no currency
	// (978, €, XXX, …), each refused at its start as it must be.
	Misspelt int `json:"misspelt_refused"`
}

// CapDay is what one capped tool of a tenant applied in one currency on
// one UTC day, counted where its effects landed.
type CapDay struct {
	Tenant string `json:"tenant"`
	Tool   string `json:"tool"`
	// Currency is the effects' currency in its canonical form (money.
	// Lookup), or as the destination holds it when it is none.
	Currency string `json:"currency"`
	// Day is the UTC date, 2006-01-02.
	Day string `json:"day"`
	// Applied is the sum of the day's effects, in minor units; Exceptions
	// the part of it that approvers let past the cap.
	Applied    int64 `json:"applied"`
	Exceptions int64 `json:"exceptions"`
	Effects    int   `json:"effects"`
}

// capEffect is one effect of a capped tool as its destination shows it:
// a credit, or a refund in the provider's ledger.
type capEffect struct {
	tenant, tool, runID string
	// currency is canonical (see CapDay.Currency).
	currency string
	// at is when the destination says the effect was made.
	at     time.Time
	amount int64
}

// runTool names a run's step of one tool: each run calls each capped tool
// once.
type runTool struct{ runID, tool string }

// tallyCapDays sums the effects per tenant, tool, currency and UTC day. An effect of
// a step that excepted names (an approver let it past the cap) counts in
// Exceptions too, once per step: a duplicate of it is no exception.
func tallyCapDays(effects []capEffect, excepted map[runTool]bool) []CapDay {
	type dayRef struct{ tenant, tool, currency, day string }
	sums := map[dayRef]*CapDay{}
	used := map[runTool]bool{}
	for _, e := range effects {
		ref := dayRef{e.tenant, e.tool, e.currency, e.at.UTC().Format(time.DateOnly)}
		d := sums[ref]
		if d == nil {
			d = &CapDay{Tenant: ref.tenant, Tool: ref.tool, Currency: ref.currency, Day: ref.day}
			sums[ref] = d
		}
		d.Applied += e.amount
		d.Effects++
		if rt := (runTool{e.runID, e.tool}); excepted[rt] && !used[rt] {
			used[rt] = true
			d.Exceptions += e.amount
		}
	}
	out := make([]CapDay, 0, len(sums))
	for _, d := range sums {
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b CapDay) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Tool, b.Tool), cmp.Compare(a.Currency, b.Currency),
			cmp.Compare(a.Day, b.Day))
	})
	return out
}

// checkCaps returns a violation for each day on which a tool applied more
// than capCents of the cap's currency, exceptions excluded, and for each
// day on which it applied anything in another currency but by an
// exception: the caps name the one currency and park the others, so no
// amount of another currency may land without an approver's exception.
func checkCaps(capCents int64, currency string, days []CapDay) []string {
	var out []string
	for _, d := range days {
		if d.Currency != currency {
			if outside := d.Applied - d.Exceptions; outside > 0 {
				out = append(out, fmt.Sprintf("daily cap for %s of %s: tenant %s applied %s on %s in a currency the cap does not name (exceptions of %s excluded)",
					d.Tool, money.Format(capCents, currency), d.Tenant, money.Format(outside, d.Currency), d.Day,
					money.Format(d.Exceptions, d.Currency)))
			}
			continue
		}
		if within := d.Applied - d.Exceptions; within > capCents {
			out = append(out, fmt.Sprintf("daily cap for %s of %s: tenant %s applied %s on %s (exceptions of %s excluded), %s over",
				d.Tool, money.Format(capCents, currency), d.Tenant, money.Format(within, currency), d.Day,
				money.Format(d.Exceptions, currency), money.Format(within-capCents, currency)))
		}
	}
	return out
}

// querier is what the reads here need of a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// creditEffects reads the tenant's credits, in every currency, each with
// the run whose order it credits.
func creditEffects(ctx context.Context, db querier, tenantID string, runOfOrder map[string]string) ([]capEffect, error) {
	rows, err := db.Query(ctx, `SELECT order_id, amount_cents, currency, created_at FROM credits WHERE tenant = $1`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("read the credits: %w", err)
	}
	effects, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (capEffect, error) {
		var (
			order string
			e     = capEffect{tenant: tenantID, tool: shop.ToolIssueCredit}
		)
		err := row.Scan(&order, &e.amount, &e.currency, &e.at)
		e.runID, e.currency = runOfOrder[order], canonical(e.currency)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the credits: %w", err)
	}
	return effects, nil
}

// refundEffects are the provider's refunds, in every currency, each with
// the run whose payment it refunds.
func refundEffects(ledger []sandbox.Refund, tenantID string, runOfPayment map[string]string) []capEffect {
	var out []capEffect
	for _, r := range ledger {
		out = append(out, capEffect{tenant: tenantID, tool: payments.RefundPayment, runID: runOfPayment[r.PaymentID],
			currency: canonical(r.Currency), at: time.Unix(r.Created, 0), amount: r.Amount})
	}
	return out
}

// canonical is code in the form the limits compare, or code as it is
// when it is no currency of the table.
func canonical(code string) string {
	if c, ok := money.Lookup(code); ok {
		return c.Code
	}
	return code
}

// capReport counts what each capped tool applied per UTC day at its
// destination, and how the steps parked at a cap were decided. The steps
// excepted are those an approver let past a limit: their decisions of
// record say exception, as their spend entries do, and their amounts are
// not held against the cap.
func (h *harness) capReport(ctx context.Context, ledger []sandbox.Refund, waits map[stepRef]wait,
	decided map[waitRef]workflows.Decision, excepted map[stepRef]bool) (*Caps, error) {
	runOfOrder, runOfPayment := map[string]string{}, map[string]string{}
	// spender is the run and tool of each step that spends: a delegated
	// step's spends in its child run, on its parent's order.
	spender := map[stepRef]runTool{}
	for _, p := range h.runs {
		runOfOrder[p.orderID], runOfPayment[p.paymentID] = p.runID, p.runID
		for step, tool := range toolOf {
			spender[p.effect(step)] = runTool{p.runID, tool}
		}
	}
	effects, err := creditEffects(ctx, h.pool, tenant, runOfOrder)
	if err != nil {
		return nil, err
	}
	effects = append(effects, refundEffects(ledger, tenant, runOfPayment)...)
	past := map[runTool]bool{}
	for ref := range excepted {
		past[spender[ref]] = true
	}
	h.mu.Lock()
	misspelt := h.misspelt
	h.mu.Unlock()
	caps := &Caps{Cap: int64(h.cfg.DailyCap), Currency: planCurrency, Planned: planned(h.runs),
		Days: tallyCapDays(effects, past), Misspelt: misspelt}
	for ref, w := range waits {
		if w.kind != approvalstore.KindLimit {
			continue
		}
		caps.Parked++
		switch decided[waitRef{ref, w.round}] {
		case workflows.DecisionReject:
			caps.Rejected++
		case workflows.DecisionApprove, workflows.DecisionEdit:
			caps.Excepted++
		}
	}
	return caps, nil
}
