package cli

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/migrations"
	"github.com/oncerun/oncerun/worker"
)

func newMigrateCmd(env Env) *cobra.Command {
	var databaseURL string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply pending database migrations",
		Long: `Apply every pending migration to the database, each in its own transaction.

Safe to run from several processes at once: an advisory lock makes the others
wait, then find nothing left to do.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			cfg, err := pgx.ParseConfig(cmp.Or(databaseURL, env.databaseURL()))
			if err != nil {
				return fmt.Errorf("--database-url: %w", err)
			}
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				return fmt.Errorf("connect to %s:%d/%s: %w", cfg.Host, cfg.Port, cfg.Database, err)
			}
			defer conn.Close(ctx)
			res, err := migrations.Migrate(ctx, conn)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if len(res.Applied) == 0 {
				fmt.Fprintf(out, "schema is up to date at version %d\n", res.Version)
				return nil
			}
			fmt.Fprintf(out, "applied %s\nschema is at version %d\n", strings.Join(res.Applied, ", "), res.Version)
			return nil
		},
	}
	// No default shown: DATABASE_URL holds a password, which --help would
	// print.
	cmd.Flags().StringVar(&databaseURL, "database-url", "", "PostgreSQL URL (default: DATABASE_URL, else "+worker.DefaultDatabaseURL+")")
	return cmd
}
