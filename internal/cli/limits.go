package cli

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/money"
	"github.com/oncerun/oncerun/internal/spend"
)

const limitsModes = `

With ONCERUN_API set, the command goes through the approvals service for
your token's tenant (setting and deleting take an operator's token).
Without it, it reads and writes DATABASE_URL directly for --tenant, as an
operator, and records --as (default $USER) as who set a limit.`

func newLimitsCmd(conn *connections) *cobra.Command {
	var (
		tenant string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "limits [--tenant T] [--json]",
		Short: "List, set and delete the money limits on a tenant's tools",
		Long: `List the tenant's spend limits: each caps what its tools may spend in one
currency per UTC day (utc_day) or per rolling 24 hours (rolling_24h), with
what was spent and what is held (reserved by external calls whose outcome
is not known yet) in the current window. A call that would take a limit
past its cap waits for an approver, who may let it past as an exception.

--json prints {"limits": [...]}, each with name, tools, currency, amount,
period, updated_by, updated_at, since, spent, held and ratio, as
GET /v1/limits answers.` + limitsModes,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			api, err := conn.api()
			if err != nil {
				return err
			}
			var list approvals.LimitList
			if api != nil {
				if err := refuseInAPIMode(map[string]bool{"tenant": cmd.Flags().Changed("tenant")}); err != nil {
					return err
				}
				if list.Limits, err = api.Limits(ctx); err != nil {
					return err
				}
			} else {
				if err := needTenant(tenant, "list limits"); err != nil {
					return err
				}
				pool, err := conn.database(ctx)
				if err != nil {
					return err
				}
				us, err := spend.ListCaps(ctx, pool, tenant)
				if err != nil {
					return err
				}
				list.Limits = make([]approvals.Limit, 0, len(us))
				for _, u := range us {
					list.Limits = append(list.Limits, limitOf(u))
				}
			}
			if asJSON {
				return writeJSON(out, list)
			}
			if len(list.Limits) == 0 {
				fmt.Fprintln(out, "no limit is set")
				return nil
			}
			return printLimits(out, list.Limits)
		},
	}
	cmd.PersistentFlags().StringVar(&tenant, "tenant", "", "tenant of the limits (required without ONCERUN_API)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	cmd.AddCommand(newLimitsSetCmd(conn, &tenant), newLimitsDeleteCmd(conn, &tenant))
	return cmd
}

func newLimitsSetCmd(conn *connections, tenant *string) *cobra.Command {
	var (
		req    approvals.LimitRequest
		as     string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "set NAME --tools TOOL[,TOOL] --currency EUR --amount MINOR [--period utc_day|rolling_24h] [--other-currencies park|allow]",
		Short: "Set a limit, or replace it",
		Long: `Set the limit NAME (lower-case letters, digits, '_', '-' and '.'): the
tools' calls together may spend at most --amount, in minor units of
--currency (200000 EUR is 2,000.00 EUR), per --period (default utc_day).
Each tool must declare an amount with a currency field. A call of the
tools in a currency that no limit of theirs names waits for approval,
unless --other-currencies allow. A limit of that
name is replaced whole. It prints the limit with what it has spent in its
window; --json prints it as PUT /v1/limits/{name} answers.` + limitsModes,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, name := cmd.Context(), args[0]
			api, err := conn.api()
			if err != nil {
				return err
			}
			var l approvals.Limit
			if api != nil {
				if err := refuseInAPIMode(map[string]bool{"tenant": cmd.Flags().Changed("tenant"), "as": cmd.Flags().Changed("as")}); err != nil {
					return err
				}
				if l, err = api.SetLimit(ctx, name, req); err != nil {
					return err
				}
			} else {
				if l, err = setLimitDirect(cmd, conn, *tenant, name, cmp.Or(as, conn.env.User), req); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(out, l)
			}
			fmt.Fprintf(out, "limit %s: %s %s for %s\n", l.Name, money.Format(l.Amount, l.Currency), periodWords(l.Period),
				strings.Join(l.Tools, ", "))
			return printLimits(out, []approvals.Limit{l})
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&req.Tools, "tools", nil, "the tools whose calls count, comma-separated (required)")
	f.StringVar(&req.Currency, "currency", "", "ISO 4217 currency code, such as EUR (required)")
	f.Int64Var(&req.Amount, "amount", 0, "the cap in minor units of the currency: 200000 is 2,000.00 EUR (required)")
	f.StringVar(&req.Period, "period", "", "utc_day (default) or rolling_24h")
	f.StringVar(&req.OtherCurrencies, "other-currencies", "", "what a call of the tools in a currency no cap of theirs names does: park (default) or allow")
	f.StringVar(&as, "as", "", "your name, recorded as who set the limit (default $USER; not with ONCERUN_API)")
	f.BoolVar(&asJSON, "json", false, "print the limit as JSON")
	for _, name := range []string{"tools", "currency", "amount"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// setLimitDirect checks the limit against the deployment's tools and
// writes it to the database.
func setLimitDirect(cmd *cobra.Command, conn *connections, tenant, name, by string, req approvals.LimitRequest) (approvals.Limit, error) {
	if err := needTenant(tenant, "set a limit"); err != nil {
		return approvals.Limit{}, err
	}
	if by == "" {
		return approvals.Limit{}, errors.New("give --as NAME: a limit records who set it")
	}
	reg, err := conn.env.Registry()
	if err != nil {
		return approvals.Limit{}, err
	}
	c := spend.Cap{Tenant: tenant, Name: name, Tools: req.Tools, Currency: req.Currency, Amount: req.Amount, Period: req.Period,
		OtherCurrencies: req.OtherCurrencies}
	if err := spend.CheckCap(reg, &c); err != nil {
		return approvals.Limit{}, err
	}
	ctx := cmd.Context()
	pool, err := conn.database(ctx)
	if err != nil {
		return approvals.Limit{}, err
	}
	if err := spend.SetCap(ctx, pool, &c, by); err != nil {
		return approvals.Limit{}, err
	}
	u, err := spend.GetCap(ctx, pool, tenant, name)
	if err != nil {
		return approvals.Limit{}, err
	}
	return limitOf(u), nil
}

func newLimitsDeleteCmd(conn *connections, tenant *string) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a limit",
		Long:  `Delete the limit NAME: its tools' calls no longer count against it.` + limitsModes,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, name := cmd.Context(), args[0]
			api, err := conn.api()
			if err != nil {
				return err
			}
			if api != nil {
				if err := refuseInAPIMode(map[string]bool{"tenant": cmd.Flags().Changed("tenant")}); err != nil {
					return err
				}
				if err := api.DeleteLimit(ctx, name); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted limit %s\n", name)
				return nil
			}
			if err := needTenant(*tenant, "delete a limit"); err != nil {
				return err
			}
			pool, err := conn.database(ctx)
			if err != nil {
				return err
			}
			if err := spend.DeleteCap(ctx, pool, *tenant, name); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted limit %s of tenant %s\n", name, *tenant)
			return nil
		},
	}
}

// needTenant checks the --tenant of a command without ONCERUN_API: given,
// and a tenant a key can hold.
func needTenant(tenant, doing string) error {
	if tenant == "" {
		return fmt.Errorf("give --tenant T (or set %s to %s through the approvals service)", EnvAPI, doing)
	}
	return checkTenant(tenant)
}

// limitOf is a cap and its usage as the API shows them.
func limitOf(u spend.Usage) approvals.Limit {
	return approvals.Limit{Name: u.Name, Tools: u.Tools, Currency: u.Currency, Amount: u.Amount, Period: u.Period,
		OtherCurrencies: u.OtherCurrencies, UpdatedBy: u.UpdatedBy, UpdatedAt: u.UpdatedAt, Since: u.Since,
		Spent: u.Spent, Held: u.Held, Ratio: u.Ratio}
}

// periodWords says a period in words.
func periodWords(period string) string {
	switch period {
	case spend.PeriodDay:
		return "per UTC day"
	case spend.PeriodRolling:
		return "per rolling 24 hours"
	}
	return "per " + period
}

// printLimits prints limits as a table, money as money.
func printLimits(out io.Writer, ls []approvals.Limit) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTOOLS\tPERIOD\tCAP\tSPENT\tHELD\tUSED%")
	for _, l := range ls {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Name, strings.Join(l.Tools, ","), l.Period,
			money.Format(l.Amount, l.Currency), money.Format(l.Spent, l.Currency), money.Format(l.Held, l.Currency),
			strconv.FormatFloat(l.Ratio*100, 'f', 1, 64)+"%")
	}
	return tw.Flush()
}
