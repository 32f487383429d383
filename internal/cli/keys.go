package cli

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/activities"
)

// ExpiringKey is a key that will expire soon while its run is open.
type ExpiringKey struct {
	Tenant    string    `db:"tenant" json:"tenant"`
	Key       string    `db:"key" json:"key"`
	RunID     string    `db:"run_id" json:"run_id"`
	Step      int64     `db:"step" json:"step"`
	Tool      string    `db:"tool" json:"tool"`
	State     string    `db:"state" json:"state"`
	ExpiresAt time.Time `db:"expires_at" json:"expires_at"`
	RunState  string    `db:"-" json:"run_state"`
}

// maxExpiring bounds the keys one listing looks at.
const maxExpiring = 10000

func newKeysCmd(conn *connections) *cobra.Command {
	var (
		expiring bool
		within   time.Duration
		tenant   string
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "keys --expiring [--within 24h] [--tenant T]",
		Short: "List keys that will expire soon while their runs are still open",
		Long: `List the idempotency keys that expire within --within (already expired
included) and whose run Temporal reports open: the keys the expiry watchdog
would alert on. Act before it does: approve or reject the paused run, or
lengthen the tool's retention window.

--json prints an array of objects with tenant, key, run_id, step, tool,
state, expires_at and run_state.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !expiring {
				return errors.New("give --expiring: it is the only listing there is")
			}
			if within <= 0 {
				return fmt.Errorf("--within %s: want a positive duration", within)
			}
			if err := checkTenant(tenant); err != nil {
				return err
			}
			ctx := cmd.Context()
			rc, err := conn.client(ctx, true)
			if err != nil {
				return err
			}
			rows, err := rc.Pool.Query(ctx, `
SELECT tenant, key, run_id, step, tool, state, expires_at
FROM idempotency_keys
WHERE expires_at < statement_timestamp() + $1::interval AND ($2 = '' OR tenant = $2)
ORDER BY expires_at
LIMIT $3`, within, tenant, maxExpiring)
			if err != nil {
				return fmt.Errorf("list expiring keys: %w", err)
			}
			due, err := pgx.CollectRows(rows, pgx.RowToStructByName[ExpiringKey])
			if err != nil {
				return fmt.Errorf("list expiring keys: %w", err)
			}
			runs := activities.TemporalRuns{Client: rc.Temporal}
			states := map[[2]string]string{}
			list := []ExpiringKey{}
			for _, k := range due {
				ref := [2]string{k.Tenant, k.RunID}
				state, seen := states[ref]
				if !seen {
					open, word, err := runs.RunState(ctx, k.Tenant, k.RunID)
					if err != nil {
						return err
					}
					if !open {
						word = ""
					}
					states[ref], state = word, word
				}
				if state != "" {
					k.RunState = state
					list = append(list, k)
				}
			}
			out := cmd.OutOrStdout()
			if len(due) == maxExpiring {
				// Keys of closed runs that the watchdog has not pruned yet may
				// crowd out later keys of open runs.
				fmt.Fprintf(cmd.ErrOrStderr(), "note: looked at the %d keys expiring first; more may exist\n", maxExpiring)
			}
			if asJSON {
				return writeJSON(out, list)
			}
			if len(list) == 0 {
				fmt.Fprintf(out, "no key of an open run expires within %s\n", within)
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TENANT\tRUN\tSTEP\tTOOL\tEXPIRES\tRUN STATE\tKEY")
			for _, k := range list {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", k.Tenant, k.RunID, k.Step, k.Tool, when(k.ExpiresAt), k.RunState, k.Key)
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.BoolVar(&expiring, "expiring", false, "list keys of open runs that expire soon")
	f.DurationVar(&within, "within", 24*time.Hour, "the horizon")
	f.StringVar(&tenant, "tenant", "", "only this tenant's keys")
	f.BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}
