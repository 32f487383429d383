package devstack

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/internal/devserver"
)

// newTemporalServerCmd runs the embedded Temporal server alone, as its own
// process: the chaos harness kills and restarts it apart from the workers.
// With --postgres it runs a node of a Temporal cluster whose state is in
// PostgreSQL; the chaos harness runs two.
func newTemporalServerCmd() *cobra.Command {
	var (
		cfg devserver.Config
		cl  devserver.Cluster
	)
	cmd := &cobra.Command{
		Use:   "temporal-server [--data-dir D] [--port P] [--postgres URL [--databases PREFIX] [--cluster-address HOST:PORT]]",
		Short: "Run only the embedded Temporal server that `oncerun dev` runs, or a node of a Temporal cluster on PostgreSQL",
		Long: `Run the embedded Temporal server alone: every service in this process, its
state in a SQLite file in --data-dir.

With --postgres, run a node of a Temporal cluster instead: its state is in two
databases on that PostgreSQL server, PREFIX_temporal and PREFIX_visibility
(created if missing; their schema set up or updated by Temporal's own schema
tool), and nodes given the same --postgres and --databases find each other
through the cluster_membership table. Each node runs every service on 127.0.0.1:
the frontend on --port, history, matching and worker on --port+1, +2 and +6,
their membership ports 300 below; a node started again must get the same
ports. Give every node the same --cluster-address: where clients reach the
cluster, the load balancer in front of the frontends. --data-dir then holds
only the node's log.`,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cl.PostgresURL == "" {
				srv, err := devserver.Start(cfg)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Temporal %s, namespace %s, state in %s\n", srv.Address(), srv.Namespace(), srv.DBPath())
				<-cmd.Context().Done()
				return srv.Stop()
			}
			srv, err := devserver.StartNode(cfg, cl)
			if err != nil {
				return err
			}
			mainDB, visibilityDB := cl.Databases()
			fmt.Fprintf(cmd.OutOrStdout(), "Temporal node %s, namespace %s, state in PostgreSQL databases %s and %s\n",
				srv.Address(), srv.Namespace(), mainDB, visibilityDB)
			<-cmd.Context().Done()
			return srv.Stop()
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", devserver.DefaultDataDir, "directory of the server's state (with --postgres, of its log)")
	f.IntVar(&cfg.Port, "port", devserver.DefaultPort, "frontend port")
	f.StringVar(&cl.PostgresURL, "postgres", "", "run a node of a cluster whose state is on this PostgreSQL server (postgres://...)")
	f.StringVar(&cl.DatabasePrefix, "databases", devserver.DefaultDatabasePrefix, "with --postgres: prefix of the cluster's databases' names")
	f.StringVar(&cl.Address, "cluster-address", "", "with --postgres: where clients reach the cluster (default: this node's frontend)")
	f.Int32Var(&cl.HistoryShards, "history-shards", devserver.DefaultHistoryShards, "with --postgres: history shards, fixed at the cluster's first start")
	return cmd
}
