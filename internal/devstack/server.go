package devstack

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/internal/devserver"
)

// newTemporalServerCmd runs the embedded Temporal server alone, as its own
// process: the chaos harness kills and restarts it apart from the workers.
func newTemporalServerCmd() *cobra.Command {
	var cfg devserver.Config
	cmd := &cobra.Command{
		Use:    "temporal-server [--data-dir D] [--port P]",
		Short:  "Run only the embedded Temporal server that `oncerun dev` runs",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			srv, err := devserver.Start(cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Temporal %s, namespace %s, state in %s\n", srv.Address(), srv.Namespace(), srv.DBPath())
			<-cmd.Context().Done()
			return srv.Stop()
		},
	}
	cmd.Flags().StringVar(&cfg.DataDir, "data-dir", devserver.DefaultDataDir, "directory of the server's state")
	cmd.Flags().IntVar(&cfg.Port, "port", devserver.DefaultPort, "frontend port")
	return cmd
}
