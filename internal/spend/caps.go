package spend

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	"github.com/oncerun/oncerun/internal/money"
	"github.com/oncerun/oncerun/tools"
)

// Cap is an operator's cap on what a tenant's tools spend in one currency
// per period.
type Cap struct {
	Tenant string `json:"tenant" yaml:"tenant"`
	// Name identifies the cap within the tenant: lower-case letters,
	// digits, '_', '-' and '.', at most 64.
	Name string `json:"name" yaml:"name"`
	// Tools are the tools whose calls count against it: one tool, or a
	// group.
	Tools []string `json:"tools" yaml:"tools"`
	// Currency is an ISO 4217 code; Amount the cap in its minor units.
	Currency string `json:"currency" yaml:"currency"`
	Amount   int64  `json:"amount" yaml:"amount"`
	// Period is PeriodDay (the default) or PeriodRolling.
	Period string `json:"period" yaml:"period"`
	// OtherCurrencies says what a call of one of Tools in a currency that
	// no cap of that tool names does: OtherPark (the default) waits for
	// an approver, OtherAllow lets it run uncounted by any cap.
	OtherCurrencies string    `json:"other_currencies" yaml:"other_currencies"`
	UpdatedBy       string    `json:"updated_by,omitempty" yaml:"-"`
	UpdatedAt       time.Time `json:"updated_at,omitzero" yaml:"-"`
}

// ErrInvalid is what a refused cap wraps; its message names the field.
var ErrInvalid = errors.New("invalid limit")

// ErrNotFound: the tenant has no cap of that name.
var ErrNotFound = errors.New("no such limit")

var capName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// ValidName reports whether name can name a cap: 1 to 64 lower-case
// letters, digits, '_', '-' or '.', starting with a letter or digit.
func ValidName(name string) bool { return capName.MatchString(name) }

// Registry is what CheckCap needs of the worker's tools.
type Registry interface {
	Lookup(name string) (tools.Tool, bool)
}

// CheckCap checks c against the tools: a name, at least one tool, each a
// registered tool that declares an amount with a currency field, a known
// currency, an amount above zero and a known period. It fills the
// defaults (the period, the currency in upper case, tools sorted and
// unique). A refusal wraps ErrInvalid and names the field.
func CheckCap(reg Registry, c *Cap) error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
	}
	if !capName.MatchString(c.Name) {
		return bad("name", "%q is not a limit name: 1 to 64 lower-case letters, digits, '_', '-' or '.', starting with a letter or digit", cut(c.Name))
	}
	if len(c.Tools) == 0 {
		return bad("tools", "name at least one tool")
	}
	if len(c.Tools) > 64 {
		return bad("tools", "at most 64 tools, not %d", len(c.Tools))
	}
	ts := slices.Clone(c.Tools)
	slices.Sort(ts)
	c.Tools = slices.Compact(ts)
	for _, name := range c.Tools {
		t, ok := reg.Lookup(name)
		if !ok {
			return bad("tools", "%q is not a registered tool", cut(name))
		}
		if !countable(t) {
			return bad("tools", "%s declares no amount with a currency: nothing of it could count against a cap", name)
		}
		if t.Class == tools.ClassRead {
			return bad("tools", "%s is a read: it has no effect, so nothing of it counts against a cap", name)
		}
	}
	_, unit, ok := money.Scale(c.Currency)
	if !ok {
		return bad("currency", "%q is not an ISO 4217 currency code such as EUR", cut(c.Currency))
	}
	c.Currency = unit
	if c.Amount <= 0 || c.Amount > MaxAmount {
		return bad("amount", "%d: a cap is a whole number of minor units above 0, at most %d", c.Amount, int64(MaxAmount))
	}
	switch c.Period {
	case "":
		c.Period = PeriodDay
	case PeriodDay, PeriodRolling:
	default:
		return bad("period", "%q is neither %s nor %s", cut(c.Period), PeriodDay, PeriodRolling)
	}
	rule, err := OtherRule(c.OtherCurrencies)
	if err != nil {
		return bad("other_currencies", "%s", err.Error())
	}
	c.OtherCurrencies = rule
	return nil
}

// countable reports whether calls of t can count against a cap.
func countable(t tools.Tool) bool {
	for _, a := range t.Amounts {
		if a.Currency != "" {
			return true
		}
	}
	return false
}

func cut(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

const setCapSQL = `INSERT INTO spend_caps (tenant, name, tools, currency, amount, period, updated_by, other_currencies)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (tenant, name) DO UPDATE SET tools = EXCLUDED.tools, currency = EXCLUDED.currency,
    amount = EXCLUDED.amount, period = EXCLUDED.period, updated_by = EXCLUDED.updated_by,
    other_currencies = EXCLUDED.other_currencies, updated_at = statement_timestamp()
RETURNING updated_at`

// SetCap writes c, checked by CheckCap, replacing the tenant's cap of the
// same name. by names who set it.
func SetCap(ctx context.Context, db DB, c *Cap, by string) error {
	c.UpdatedBy = by
	if err := db.QueryRow(ctx, setCapSQL, c.Tenant, c.Name, c.Tools, c.Currency, c.Amount, c.Period, by,
		cmp.Or(c.OtherCurrencies, OtherPark)).Scan(&c.UpdatedAt); err != nil {
		return fmt.Errorf("set limit %s: %w", c.Name, err)
	}
	return nil
}

// DeleteCap removes the tenant's cap name: ErrNotFound when it has none.
func DeleteCap(ctx context.Context, db DB, tenant, name string) error {
	tag, err := db.Exec(ctx, `DELETE FROM spend_caps WHERE tenant = $1 AND name = $2`, tenant, name)
	if err != nil {
		return fmt.Errorf("delete limit %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: tenant %s has no limit %q", ErrNotFound, tenant, cut(name))
	}
	return nil
}

// Usage is a cap and where it stands now.
type Usage struct {
	Cap
	// Since is the start of the cap's window.
	Since time.Time `json:"since"`
	// Spent is applied within the window; Held is reserved by external
	// calls whose outcome is not known yet. Both count.
	Spent int64 `json:"spent"`
	Held  int64 `json:"held"`
	// Ratio is (Spent+Held)/Amount.
	Ratio float64 `json:"ratio"`
}

const listCapsSQL = `
WITH c AS (
    SELECT s.*, CASE s.period
        WHEN 'utc_day' THEN date_trunc('day', statement_timestamp() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
        ELSE statement_timestamp() - interval '24 hours' END AS since
    FROM spend_caps s WHERE s.tenant = $1 AND ($2 = '' OR s.name = $2))
SELECT c.name, c.tools, c.currency, c.amount, c.period, c.other_currencies, c.updated_by, c.updated_at, c.since,
    coalesce((SELECT sum(e.amount) FROM spend_entries e WHERE e.tenant = c.tenant AND e.tool = ANY (c.tools)
        AND e.currency = c.currency AND e.counted_at >= c.since AND e.state = 'applied'), 0)::bigint,
    coalesce((SELECT sum(e.amount) FROM spend_entries e WHERE e.tenant = c.tenant AND e.tool = ANY (c.tools)
        AND e.currency = c.currency AND e.counted_at >= c.since AND e.state = 'reserved'), 0)::bigint
FROM c ORDER BY c.name`

// ListCaps returns the tenant's caps with what each has spent and holds
// in its current window, by name.
func ListCaps(ctx context.Context, db DB, tenant string) ([]Usage, error) {
	return listCaps(ctx, db, tenant, "")
}

// GetCap returns one of the tenant's caps: ErrNotFound when it has none of
// that name.
func GetCap(ctx context.Context, db DB, tenant, name string) (Usage, error) {
	us, err := listCaps(ctx, db, tenant, name)
	if err != nil {
		return Usage{}, err
	}
	if len(us) == 0 {
		return Usage{}, fmt.Errorf("%w: tenant %s has no limit %q", ErrNotFound, tenant, cut(name))
	}
	return us[0], nil
}

func listCaps(ctx context.Context, db DB, tenant, name string) ([]Usage, error) {
	rows, err := db.Query(ctx, listCapsSQL, tenant, name)
	if err != nil {
		return nil, fmt.Errorf("list limits: %w", err)
	}
	us, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Usage, error) {
		u := Usage{Cap: Cap{Tenant: tenant}}
		err := row.Scan(&u.Name, &u.Tools, &u.Currency, &u.Amount, &u.Period, &u.OtherCurrencies, &u.UpdatedBy, &u.UpdatedAt, &u.Since,
			&u.Spent, &u.Held)
		u.Ratio = float64(u.Spent+u.Held) / float64(u.Amount)
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("list limits: %w", err)
	}
	return us, nil
}

// File is a limits file: the caps to set when a process starts
// (ONCERUN_LIMITS_FILE), in YAML or JSON.
//
//	limits:
//	  - tenant: acme
//	    name: credits
//	    tools: [issue_credit]
//	    currency: EUR
//	    amount: 200000
//	    period: utc_day
//	    other_currencies: park
type File struct {
	Limits []Cap `yaml:"limits"`
}

// LoadFile reads a limits file strictly: an unknown field, a cap that
// CheckCap refuses, or two caps of one tenant with one name is an error
// naming the cap.
func LoadFile(path string, reg Registry) ([]Cap, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("limits file: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("limits file %s: %w", path, err)
	}
	seen := map[string]bool{}
	for i := range f.Limits {
		c := &f.Limits[i]
		if c.Tenant == "" {
			return nil, fmt.Errorf("limits file %s: limit %d (%s): %w: tenant: name the tenant", path, i+1, c.Name, ErrInvalid)
		}
		if err := CheckCap(reg, c); err != nil {
			return nil, fmt.Errorf("limits file %s: limit %d (%s): %w", path, i+1, c.Name, err)
		}
		id := c.Tenant + "/" + c.Name
		if seen[id] {
			return nil, fmt.Errorf("limits file %s: limit %d: %w: name: tenant %s has two limits named %s", path, i+1, ErrInvalid, c.Tenant, c.Name)
		}
		seen[id] = true
	}
	return f.Limits, nil
}

// Apply sets each cap of a limits file, as set by "file:<path>".
func Apply(ctx context.Context, db DB, caps []Cap, path string) error {
	for i := range caps {
		if err := SetCap(ctx, db, &caps[i], "file:"+path); err != nil {
			return err
		}
	}
	return nil
}
