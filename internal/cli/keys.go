package cli

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/internal/watchdog"
)

// ExpiringKey is a key that will expire soon while its run is open, as
// `keys --expiring --json` prints it.
type ExpiringKey struct {
	Tenant    string    `json:"tenant"`
	Key       string    `json:"key"`
	RunID     string    `json:"run_id"`
	Step      int64     `json:"step"`
	Tool      string    `json:"tool"`
	State     string    `json:"state"`
	ExpiresAt time.Time `json:"expires_at"`
	RunState  string    `json:"run_state"`
}

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
			found, complete, err := watchdog.Expiring(ctx, rc.Pool, rc, within, tenant)
			if err != nil {
				return err
			}
			list := make([]ExpiringKey, len(found))
			for i, k := range found {
				list[i] = ExpiringKey{Tenant: k.Tenant, Key: k.Key, RunID: k.RunID, Step: k.Step, Tool: k.Tool,
					State: string(k.State), ExpiresAt: k.ExpiresAt, RunState: k.RunState}
			}
			out := cmd.OutOrStdout()
			if !complete {
				// Keys of closed runs that the watchdog has not pruned yet may
				// crowd out later keys of open runs.
				fmt.Fprintf(cmd.ErrOrStderr(), "note: looked at the %d keys expiring first; more may exist\n", watchdog.MaxExpiring)
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
