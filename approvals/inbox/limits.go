package inbox

import (
	"net/http"
	"strconv"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/money"
	"github.com/oncerun/oncerun/internal/spend"
	"github.com/oncerun/oncerun/workflows"
)

// usageBar is how much of a limit is used, for the pages' bars.
type usageBar struct {
	// Percent is the share used, in words ("17.9%"); Width the bar's
	// width in percent, at most 100.
	Percent string
	Width   int
	// Level is "ok", "warn" (at 80% or more, the cap's first alert) or
	// "over" (at 100% or more).
	Level string
}

// barOf is the bar of used out of limit; limit 0 is a limit used up by
// anything.
func barOf(used, limit int64) usageBar {
	ratio := 0.0
	switch {
	case limit > 0:
		ratio = float64(used) / float64(limit)
	case used > 0:
		ratio = 1
	}
	b := usageBar{Percent: strconv.FormatFloat(ratio*100, 'f', 1, 64) + "%", Width: int(min(ratio, 1) * 100), Level: "ok"}
	switch {
	case ratio >= 1:
		b.Level = "over"
	case ratio >= 0.8:
		b.Level = "warn"
	}
	return b
}

// limitView is one cap as the limits page shows it.
type limitView struct {
	approvals.Limit
	// Window says what the period is, in words.
	Window string
	// Cap, Spent and Held are money ("2,000.00 EUR").
	Cap, Spent, Held string
	Bar              usageBar
}

// windows say each period in words.
var windows = map[string]string{spend.PeriodDay: "per UTC day", spend.PeriodRolling: "per rolling 24 hours"}

func limitViewOf(u approvals.Limit) limitView {
	return limitView{Limit: u, Window: windows[u.Period], Cap: money.Format(u.Amount, u.Currency),
		Spent: money.Format(u.Spent, u.Currency), Held: money.Format(u.Held, u.Currency), Bar: barOf(u.Spent+u.Held, u.Amount)}
}

// limitsPage lists the tenant's caps, where each stands in its window:
// what was spent, what is held, a bar of the share used.
func (s *Inbox) limitsPage(w http.ResponseWriter, r *http.Request) {
	p, ok := s.signedIn(w, r, "Limits")
	if !ok {
		return
	}
	ctx, cancel := s.dbContext(r.Context())
	defer cancel()
	us, err := s.api.Limits(ctx, *p.ID)
	if err != nil {
		s.listFailed(w, p, "limits", err)
		return
	}
	p.Listed = true
	for _, u := range us {
		p.Limits = append(p.Limits, limitViewOf(u))
	}
	s.render(w, "limits", p)
}

// spendRow is what a run spent in one currency, as its page shows it.
type spendRow struct {
	Currency string
	// Spent, Held and Budget are money; Budget is "" without a budget.
	Spent, Held, Budget string
	// Bar is set with a budget.
	Bar *usageBar
}

// spendRowsOf is the run's spend against its budget, per currency.
func spendRowsOf(st workflows.Status) []spendRow {
	rows := make([]spendRow, 0, len(st.Spend))
	for _, t := range st.Spend {
		row := spendRow{Currency: t.Currency, Spent: money.Format(t.Spent, t.Currency), Held: money.Format(t.Held, t.Currency)}
		if t.Budget != nil {
			b := barOf(t.Spent+t.Held, *t.Budget)
			row.Budget, row.Bar = money.Format(*t.Budget, t.Currency), &b
		}
		rows = append(rows, row)
	}
	return rows
}
