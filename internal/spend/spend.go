// Package spend owns the money limits: operators' caps on what a tenant's
// tools may spend per UTC day or per rolling 24 hours (spend_caps), what
// each step counted against them and against its run's budget
// (spend_entries), and the alerts at 80% and 100% of a cap (spend_alerts).
// Every statement on these tables is here.
//
// A step's amounts count where its effect commits: [ChargeTx] runs in the
// transaction of a database tool's effect, so the amount and the effect
// commit or vanish together; an external call's amounts are reserved by
// [Reserve] before it is sent and settled by [Settle] once its outcome is
// known (kept when applied, released when provably not applied, held while
// nobody knows). Each charge locks the run's budget and every cap it counts
// against, in one order, before it reads their totals: under any
// concurrency no limit is crossed but by an approver's exception. A step's
// key has one entry per currency, so a retry or a replay counts nothing
// twice.
package spend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncerun/oncerun/internal/money"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/tools"
)

// DB is what the functions here need of a pool, a connection or a
// transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Periods of a cap.
const (
	// PeriodDay: the UTC calendar day.
	PeriodDay = "utc_day"
	// PeriodRolling: the 24 hours before each charge.
	PeriodRolling = "rolling_24h"
	// periodRun is a run's budget, as spend_charge names it.
	periodRun = "run"
)

// What a limit does with an amount in a currency it does not name (a
// budget's limits.other_currencies, a cap's other_currencies).
const (
	// OtherPark: the step waits for an approver, as over the limit. The
	// default: a limit fails closed.
	OtherPark = "park"
	// OtherAllow: the amount runs, counted by no limit of that currency.
	OtherAllow = "allow"
)

// OtherRule checks a limit's other_currencies: "" is OtherPark.
func OtherRule(rule string) (string, error) {
	switch rule {
	case "", OtherPark:
		return OtherPark, nil
	case OtherAllow:
		return OtherAllow, nil
	}
	return "", fmt.Errorf("%q is neither %s nor %s", untrusted.Cut(rule, 16), OtherPark, OtherAllow)
}

// Entry states.
const (
	StateReserved = "reserved"
	StateApplied  = "applied"
	StateReleased = "released"
)

// MaxAmount bounds every amount counted and every limit, in minor units
// (10 trillion EUR): sums and percentages of them stay within 64 bits.
const MaxAmount = 1_000_000_000_000_000

// Amounts are sums of money in minor units, by upper-case ISO 4217 code.
type Amounts map[string]int64

// Currencies returns the codes, sorted: the order in which charges lock.
func (a Amounts) Currencies() []string {
	codes := make([]string, 0, len(a))
	for c := range a {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	return codes
}

// Of returns the amounts a call of t spends: each of t's declared amounts
// that the canonical arguments hold, by the currency its currency field
// names, summed per currency. An amount below zero counts by its
// magnitude: a cap bounds the money a tool moves either way. An amount
// whose tool names no currency field is not money (points) and counts
// nothing; one whose currency is missing or not a currency of the table
// (money.Lookup) is an error: limits fail closed. The registry refuses
// such a call before it gets here (tools.Registry.Prepare).
func Of(t tools.Tool, args []byte) (Amounts, error) {
	if len(t.Amounts) == 0 {
		return nil, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(args, &fields); err != nil {
		return nil, fmt.Errorf("amounts of %s: %w", t.Name, err)
	}
	var out Amounts
	for _, a := range t.Amounts {
		raw, ok := fields[a.Field]
		if !ok || a.Currency == "" {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("amount %s of %s is not an integer of minor units: %s", a.Field, t.Name, raw)
		}
		if n > MaxAmount || n < -MaxAmount {
			return nil, fmt.Errorf("amount %s of %s is %d: more than the %d minor units a limit can count", a.Field, t.Name, n, int64(MaxAmount))
		}
		var code string
		_ = json.Unmarshal(fields[a.Currency], &code)
		_, unit, ok := money.Scale(code)
		if !ok {
			return nil, fmt.Errorf("amount %s of %s is in %s %s: not an ISO 4217 currency code that amounts can be counted in",
				a.Field, t.Name, a.Currency, strconv.Quote(untrusted.Cut(code, 16)))
		}
		if n < 0 {
			n = -n
		}
		if out == nil {
			out = Amounts{}
		}
		out[unit] += n
	}
	return out, nil
}

// Charge is one step's amounts, to count.
type Charge struct {
	Tenant string
	RunID  string
	// BudgetRun is the run whose budget the amounts count against: the
	// run itself, or the run that delegated to it. Default RunID.
	BudgetRun string
	Step      int64
	Tool      string
	// Key is the step's key: one entry per key and currency.
	Key     string
	Amounts Amounts
	// Budget is the run's budget per currency (limits.spend). An amount
	// in a currency it does not name parks, unless OtherCurrencies is
	// OtherAllow; a run without a budget has no limit of its own.
	Budget Amounts
	// OtherCurrencies is the budget's rule for such amounts: OtherPark
	// ("" too) or OtherAllow.
	OtherCurrencies string
	// Exception counts the amounts whatever limit they cross: an approver
	// let the step past.
	Exception bool
	// Unchecked counts the amounts without refusing any: for a run that
	// cannot wait at a limit (one begun before limits existed).
	Unchecked bool
}

// Level is where one limit stands at a charge.
type Level struct {
	// Cap is the cap's name; "" is the run's budget.
	Cap string `json:"cap,omitempty"`
	// Period is PeriodDay, PeriodRolling, or "run" for the budget.
	Period string `json:"period"`
	// Tools are the cap's tools.
	Tools    []string `json:"tools,omitempty"`
	Currency string   `json:"currency"`
	Limit    int64    `json:"limit"`
	// Spent is what the limit had counted before this charge.
	Spent int64 `json:"spent"`
	// This is the charge's amount in the currency.
	This int64 `json:"this"`
	// Over says this charge takes the limit past Limit.
	Over bool `json:"over,omitempty"`
	// Alert is 80 or 100 when this charge raised that alert of the cap.
	Alert int `json:"alert,omitempty"`
	// AlertID is the alert's row in spend_alerts, when Alert is set.
	AlertID int64 `json:"alert_id,omitempty"`
	// Named, set on a limit the charge would cross by its currency alone,
	// are the currencies the limit counts: the charge's is not one of
	// them, and the limit parks others (see OtherPark).
	Named []string `json:"named,omitempty"`
}

// Ratio is the share of the limit spent once the charge counted.
func (l Level) Ratio() float64 {
	if l.Limit <= 0 {
		return 0
	}
	return float64(l.Spent+l.This) / float64(l.Limit)
}

// Reason says why a step waits at this limit, in the inbox's words:
// "over the daily cap for issue_credit: 1,950.00 of 2,000.00 EUR spent,
// this call 120.00".
func (l Level) Reason() string {
	scale, _, _ := money.Scale(l.Currency)
	what := "the run's budget"
	switch l.Period {
	case PeriodDay:
		what = "the daily cap"
	case PeriodRolling:
		what = "the 24-hour cap"
	}
	if l.Cap != "" {
		what += " for " + strings.Join(l.Tools, ", ")
		if len(l.Tools) > 1 || (len(l.Tools) == 1 && l.Tools[0] != l.Cap) {
			what += " (" + l.Cap + ")"
		}
	}
	if len(l.Named) > 0 {
		return fmt.Sprintf("outside %s: it counts %s only, and this call spends %s", what,
			strings.Join(l.Named, ", "), money.Format(l.This, l.Currency))
	}
	return fmt.Sprintf("over %s: %s of %s spent, this call %s", what,
		money.Decimal(l.Spent, scale, true), money.Format(l.Limit, l.Currency), money.Decimal(l.This, scale, true))
}

// Kind names the limit for metrics: "run_budget", "daily_cap" or
// "rolling_cap".
func (l Level) Kind() string {
	switch l.Period {
	case PeriodDay:
		return "daily_cap"
	case PeriodRolling:
		return "rolling_cap"
	}
	return "run_budget"
}

// Counted is what a charge did.
type Counted struct {
	// Over is the first limit the charge would cross (the budget first,
	// then the caps by name); nothing was counted. Nil when it counted.
	Over *Level
	// Already is set when the step's key had counted before (a retry, a
	// replay): nothing was counted again.
	Already bool
	// Levels are the limits the charge met, with what they had spent.
	Levels []Level
}

// Alerts are the levels whose alert this charge raised.
func (c Counted) Alerts() []Level {
	var out []Level
	for _, l := range c.Levels {
		if l.Alert != 0 {
			out = append(out, l)
		}
	}
	return out
}

// ErrOver is what an effect returns when its charge would cross a limit,
// so that its transaction rolls back; see [OverError].
var ErrOver = errors.New("over a spend limit")

// OverError carries the limit a charge would cross.
type OverError struct{ Level Level }

func (e *OverError) Error() string { return e.Level.Reason() }

// Is reports whether target is ErrOver.
func (e *OverError) Is(target error) bool { return target == ErrOver }

const chargeSQL = `SELECT cap, period, tools, cap_amount, spent, over, already, coalesce(alert, 0), coalesce(alert_id, 0)
FROM spend_charge($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`

// ChargeTx counts c in tx, the transaction of the step's effect, as
// applied. tx must be READ COMMITTED, as the dedup store's are. Over a limit, unless c.Exception, nothing is written and
// Counted.Over says which limit: the caller rolls back its effect.
func ChargeTx(ctx context.Context, tx DB, c Charge) (Counted, error) {
	return charge(ctx, tx, c, StateApplied)
}

func charge(ctx context.Context, db DB, c Charge, state string) (Counted, error) {
	if c.BudgetRun == "" {
		c.BudgetRun = c.RunID
	}
	if !c.Exception && !c.Unchecked {
		over, err := unnamed(ctx, db, c)
		if err != nil || over != nil {
			return Counted{Over: over}, err
		}
	}
	var out Counted
	for _, cur := range c.Amounts.Currencies() {
		var budget *int64
		if b, ok := c.Budget[cur]; ok {
			budget = &b
		}
		rows, err := db.Query(ctx, chargeSQL, c.Tenant, c.Key, cur, c.RunID, c.BudgetRun, c.Step, c.Tool,
			c.Amounts[cur], budget, c.Exception, !c.Unchecked, state)
		if err != nil {
			return Counted{}, fmt.Errorf("count %s of %s: %w", cur, c.Key, err)
		}
		var levels []Level
		already := false
		for rows.Next() {
			var (
				l     Level
				tools string
				alr   bool
			)
			if err := rows.Scan(&l.Cap, &l.Period, &tools, &l.Limit, &l.Spent, &l.Over, &alr, &l.Alert, &l.AlertID); err != nil {
				rows.Close()
				return Counted{}, fmt.Errorf("count %s of %s: %w", cur, c.Key, err)
			}
			if alr {
				already = true
				continue
			}
			if tools != "" {
				l.Tools = strings.Split(tools, ",")
			}
			l.Currency, l.This = cur, c.Amounts[cur]
			levels = append(levels, l)
		}
		if err := rows.Err(); err != nil {
			return Counted{}, fmt.Errorf("count %s of %s: %w", cur, c.Key, err)
		}
		out.Already = out.Already || already
		out.Levels = append(out.Levels, levels...)
		if c.Exception || c.Unchecked {
			continue
		}
		for i := range levels {
			if levels[i].Over {
				l := levels[i]
				out.Over = &l
				return out, nil
			}
		}
	}
	return out, nil
}

const countedSQL = `SELECT EXISTS (SELECT 1 FROM spend_entries WHERE tenant = $1 AND key = $2 AND state <> 'released')`

// toolCapsSQL reads the caps of a tool without locking them: the charge
// locks the caps of its currency after the run's budget (spend_charge),
// and locking here first would invert that order. A cap set while a
// charge is counted holds from the next charge.
const toolCapsSQL = `SELECT name, period, tools, currency, other_currencies FROM spend_caps
WHERE tenant = $1 AND $2 = ANY (tools) ORDER BY name`

// unnamed returns the first limit that covers c and names none of c's
// currencies while it parks others (the budget first, then the caps of
// c's tool by name), or nil: limits fail closed, so an amount no limit of
// its currency counts waits for an approver unless the limit allows it.
func unnamed(ctx context.Context, db DB, c Charge) (*Level, error) {
	over, err := outside(ctx, db, c)
	if err != nil || over == nil {
		return over, err
	}
	// A step whose key counted already (an attempt that reserved before a
	// cap was set, or before a rolling deploy) keeps what it counted:
	// spend_charge finds it, and nothing parks it now. Asked only of a
	// charge that would park, so that a charge that counts pays for one
	// read here, the caps'.
	var counted bool
	if err := db.QueryRow(ctx, countedSQL, c.Tenant, c.Key).Scan(&counted); err != nil {
		return nil, fmt.Errorf("read the entries of %s: %w", c.Key, err)
	}
	if counted {
		return nil, nil
	}
	return over, nil
}

// outside returns the first limit that covers c and names none of c's
// currencies while it parks others, or nil.
func outside(ctx context.Context, db DB, c Charge) (*Level, error) {
	currencies := c.Amounts.Currencies()
	if len(c.Budget) > 0 && c.OtherCurrencies != OtherAllow {
		for _, cur := range currencies {
			if _, ok := c.Budget[cur]; !ok {
				return &Level{Period: periodRun, Currency: cur, This: c.Amounts[cur], Over: true,
					Named: c.Budget.Currencies()}, nil
			}
		}
	}
	rows, err := db.Query(ctx, toolCapsSQL, c.Tenant, c.Tool)
	if err != nil {
		return nil, fmt.Errorf("read the caps of %s: %w", c.Tool, err)
	}
	caps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Cap, error) {
		var k Cap
		err := row.Scan(&k.Name, &k.Period, &k.Tools, &k.Currency, &k.OtherCurrencies)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the caps of %s: %w", c.Tool, err)
	}
	named := map[string]bool{}
	for _, k := range caps {
		named[k.Currency] = true
	}
	for _, cur := range currencies {
		if named[cur] {
			continue
		}
		for _, k := range caps {
			if k.OtherCurrencies == OtherAllow {
				continue
			}
			return &Level{Cap: k.Name, Period: k.Period, Tools: k.Tools, Currency: cur, This: c.Amounts[cur], Over: true,
				Named: slices.Sorted(maps.Keys(named))}, nil
		}
	}
	return nil, nil
}

// Reserve counts an external call's amounts as reserved, in a transaction
// of its own, before the call is sent. A reservation the step's key holds
// already (an earlier attempt's) is kept as it is; one that was released
// is made again, against the limits as they stand. Over a limit nothing is
// reserved and Counted.Over says which.
func Reserve(ctx context.Context, pool interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}, c Charge) (Counted, error) {
	if len(c.Amounts) == 0 {
		return Counted{}, nil
	}
	// READ COMMITTED, whatever the database's default: each total is read
	// after the locks, with a snapshot of its own (see spend_charge).
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return Counted{}, fmt.Errorf("reserve for %s: %w", c.Key, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a committed transaction's rollback is a no-op
	out, err := charge(ctx, tx, c, StateReserved)
	if err != nil || out.Over != nil {
		return out, err
	}
	if err := tx.Commit(ctx); err != nil {
		return Counted{}, fmt.Errorf("reserve for %s: %w", c.Key, err)
	}
	return out, nil
}

// settleSQL settles a reservation: applied from reserved, or from
// released (an attempt that lost its lease released it while the attempt
// that took over made the effect: an applied effect always counts);
// released from reserved only.
const settleSQL = `UPDATE spend_entries SET state = $3, settled_at = statement_timestamp()
WHERE tenant = $1 AND key = $2 AND (state = 'reserved' OR ($3 = 'applied' AND state = 'released'))
RETURNING currency, amount`

// Settle settles the reservation of a step's key: applied keeps it,
// counted for good (a released one counts again); otherwise it is released
// and counts no more. An applied entry is left as it is. It returns the
// amounts it settled.
func Settle(ctx context.Context, db DB, tenant, key string, applied bool) (Amounts, error) {
	state := StateReleased
	if applied {
		state = StateApplied
	}
	rows, err := db.Query(ctx, settleSQL, tenant, key, state)
	if err != nil {
		return nil, fmt.Errorf("settle the reservation of %s: %w", key, err)
	}
	var (
		out Amounts
		cur string
		n   int64
	)
	_, err = pgx.ForEachRow(rows, []any{&cur, &n}, func() error {
		if out == nil {
			out = Amounts{}
		}
		out[cur] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("settle the reservation of %s: %w", key, err)
	}
	return out, nil
}

// RunTotal is what a run has counted in one currency.
type RunTotal struct {
	Currency string `json:"currency"`
	// Spent is applied; Held is reserved by calls whose outcome is not
	// known yet. Both count against the budget.
	Spent int64 `json:"spent"`
	Held  int64 `json:"held"`
	// Budget is the run's budget in the currency, if it has one.
	Budget *int64 `json:"budget,omitempty"`
}

const runTotalsSQL = `SELECT currency, coalesce(sum(amount) FILTER (WHERE state = 'applied'), 0)::bigint,
    coalesce(sum(amount) FILTER (WHERE state = 'reserved'), 0)::bigint
FROM spend_entries WHERE tenant = $1 AND budget_run = $2 AND state <> 'released'
GROUP BY currency ORDER BY currency`

// RunTotals returns what the run counted, per currency, beside its budget
// (a currency of the budget with nothing counted reads 0).
func RunTotals(ctx context.Context, db DB, tenant, runID string, budget Amounts) ([]RunTotal, error) {
	rows, err := db.Query(ctx, runTotalsSQL, tenant, runID)
	if err != nil {
		return nil, fmt.Errorf("read the spend of run %s: %w", runID, err)
	}
	totals, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunTotal, error) {
		var t RunTotal
		err := row.Scan(&t.Currency, &t.Spent, &t.Held)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the spend of run %s: %w", runID, err)
	}
	seen := map[string]bool{}
	for i := range totals {
		seen[totals[i].Currency] = true
		if b, ok := budget[totals[i].Currency]; ok {
			totals[i].Budget = &b
		}
	}
	for _, cur := range budget.Currencies() {
		if !seen[cur] {
			b := budget[cur]
			totals = append(totals, RunTotal{Currency: cur, Budget: &b})
		}
	}
	sort.Slice(totals, func(i, j int) bool { return totals[i].Currency < totals[j].Currency })
	return totals, nil
}

// alertDeliveredSQL marks an alert delivered, and with it the 80% alert
// the same charge recorded when it crossed both thresholds at once (only
// the 100% one is posted).
const alertDeliveredSQL = `UPDATE spend_alerts a SET delivered_at = statement_timestamp()
FROM spend_alerts d
WHERE d.id = $1 AND a.tenant = d.tenant AND a.cap = d.cap AND a.fired_at = d.fired_at
  AND a.threshold <= d.threshold AND a.delivered_at IS NULL`

// AlertDelivered records that the alert id of spend_alerts reached the
// alert webhook. An alert left undelivered (the webhook refused it, or the
// process stopped first) keeps delivered_at empty.
func AlertDelivered(ctx context.Context, db DB, id int64) error {
	if _, err := db.Exec(ctx, alertDeliveredSQL, id); err != nil {
		return fmt.Errorf("record the delivery of spend alert %d: %w", id, err)
	}
	return nil
}
