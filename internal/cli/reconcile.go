package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/internal/reconcile"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/worker"
)

func newReconcileCmd(conn *connections) *cobra.Command {
	var (
		asJSON     bool
		ack        int64
		note       string
		as         string
		settlement time.Duration
		lookback   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "reconcile [--json] | reconcile --ack ID --note TEXT [--as NAME]",
		Short: "Compare oncerun's record of external effects with the providers' ledgers now",
		Long: `Run a reconciliation pass now, as the worker's schedule does: compare each
reconciled tool's effects older than --settlement with its provider's
ledger, by idempotency key, look for outbox messages never delivered, record
what is new, and print every open finding. A finding stays open until
acknowledged with --ack.

Amounts are in integer minor units of their currency (cents), signed as the
provider's amount minus ours.

--json prints an object with drift_count, drift_amount (absolute amounts by
currency), oldest_unreconciled_age_seconds, findings (the open findings,
oldest first), checked, recorded and skipped.

--ack ID --note TEXT acknowledges finding ID as --as (default: $USER): the
note says why the drift is accepted or how it was repaired.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			if cmd.Flags().Changed("ack") {
				if cmd.Flags().Changed("settlement") || cmd.Flags().Changed("lookback") {
					return errors.New("--settlement and --lookback configure a pass; --ack runs none")
				}
				return ackFinding(ctx, conn, out, ack, as, note, asJSON)
			}
			if cmd.Flags().Changed("note") || cmd.Flags().Changed("as") {
				return errors.New("--note and --as go with --ack ID")
			}
			var sources []reconcile.Source
			if conn.env.Reconcile != nil {
				var err error
				if sources, err = conn.env.Reconcile(); err != nil {
					return fmt.Errorf("reconciliation sources: %w", err)
				}
			}
			pool, err := conn.database(ctx)
			if err != nil {
				return err
			}
			rep, err := reconcile.Pass(ctx, reconcile.Config{
				Pool: pool, Sources: sources, Settlement: settlement, Lookback: lookback, RunOpen: conn.runOpen(),
			})
			if rep.DriftAmount == nil {
				return err
			}
			warn := cmd.ErrOrStderr()
			if len(sources) == 0 {
				fmt.Fprintln(warn, "note: no provider ledger is configured; only the outbox was checked")
			}
			if rep.Skipped > 0 {
				fmt.Fprintf(warn, "note: %d undelivered messages wait for a later pass: it could not be told whether their runs are open (is Temporal reachable?)\n", rep.Skipped)
			}
			if asJSON {
				return errors.Join(writeJSON(out, rep), err)
			}
			return errors.Join(printReport(out, rep), err)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the report (or the acknowledged finding) as JSON")
	f.Int64Var(&ack, "ack", 0, "acknowledge the finding with this id")
	f.StringVar(&note, "note", "", "with --ack: why the drift is accepted or how it was repaired (required)")
	f.StringVar(&as, "as", "", "with --ack: who acknowledges (default $USER)")
	f.DurationVar(&settlement, "settlement", reconcile.DefaultSettlement, "compare only effects older than this")
	f.DurationVar(&lookback, "lookback", reconcile.DefaultLookback, "how far back to look")
	return cmd
}

func ackFinding(ctx context.Context, conn *connections, out io.Writer, id int64, by, note string, asJSON bool) error {
	if id < 1 {
		return fmt.Errorf("--ack %d: finding ids start at 1", id)
	}
	if note == "" {
		return errors.New("give --note TEXT: say why the drift is accepted or how it was repaired")
	}
	if by == "" {
		by = conn.env.User
	}
	if by == "" {
		return errors.New("give --as NAME: the acknowledgement needs a name")
	}
	pool, err := conn.database(ctx)
	if err != nil {
		return err
	}
	f, err := reconcile.Ack(ctx, pool, id, by, note)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(out, f)
	}
	fmt.Fprintf(out, "acknowledged finding %d (%s, tenant %s, %s, key %s) as %s\n", f.ID, f.Kind, f.Tenant, f.Tool, f.Key, f.AckedBy)
	return nil
}

func printReport(out io.Writer, rep reconcile.Report) error {
	fmt.Fprintf(out, "checked %d effects and messages; %d new findings\n", rep.Checked, rep.Recorded)
	if rep.DriftCount == 0 {
		fmt.Fprintln(out, "no open finding: oncerun's record and the ledgers agree")
		return nil
	}
	var amounts []string
	for _, cur := range slices.Sorted(maps.Keys(rep.DriftAmount)) {
		amounts = append(amounts, fmt.Sprintf("%d %s", rep.DriftAmount[cur], cur))
	}
	fmt.Fprintf(out, "open findings: %d; drift: %s; oldest unreconciled: %s\n", rep.DriftCount,
		cmp.Or(strings.Join(amounts, ", "), "no amount"), (time.Duration(rep.OldestUnreconciledAgeSeconds) * time.Second).String())
	if len(rep.Findings) < rep.DriftCount {
		fmt.Fprintf(out, "listing the oldest %d\n", len(rep.Findings))
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tTENANT\tTOOL\tAMOUNT\tEFFECT AT\tKEY\tDETAIL")
	for _, f := range rep.Findings {
		amount := "-"
		if f.Currency != "" {
			amount = fmt.Sprintf("%+d %s", f.Amount, f.Currency)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.ID, f.Kind, cmp.Or(f.Tenant, "-"), f.Tool, amount,
			when(f.EffectAt), f.Key, oneLine(f.Detail))
	}
	return tw.Flush()
}

// database opens the PostgreSQL pool on first use, without Temporal.
func (c *connections) database(ctx context.Context) (*pgxpool.Pool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pool == nil {
		pool, err := worker.NewPool(ctx, c.env.databaseURL())
		if err != nil {
			return nil, err
		}
		c.pool = pool
	}
	return c.pool, nil
}

// runOpen asks Temporal whether a run is open, dialing it on first use; a
// failed dial is not retried within the command.
func (c *connections) runOpen() func(ctx context.Context, tenant, runID string) (bool, error) {
	var (
		once sync.Once
		rc   *runs.Client
		err  error
	)
	return func(ctx context.Context, tenant, runID string) (bool, error) {
		once.Do(func() { rc, err = c.client(ctx, false) })
		if err != nil {
			return false, err
		}
		open, _, err := rc.RunState(ctx, tenant, runID)
		return open, err
	}
}
