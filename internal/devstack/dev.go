package devstack

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/internal/cli"
	"github.com/oncerun/oncerun/internal/devserver"
	"github.com/oncerun/oncerun/internal/host"
	"github.com/oncerun/oncerun/workflows"
)

// Commands returns the commands that need Temporal's server code: dev, demo
// and worker. getenv is how main reads the environment (os.Getenv); the
// worker's variables are read when dev or worker runs, so a bad one does not
// break the other commands.
func Commands(env cli.Env, getenv func(string) string) []*cobra.Command {
	return []*cobra.Command{newDevCmd(getenv), newDemoCmd(env), newWorkerCmd(getenv)}
}

// DevConfig configures [Dev].
type DevConfig struct {
	// DataDir holds the embedded server's SQLite file and log. Default
	// devserver.DefaultDataDir.
	DataDir string
	// TemporalPort is the embedded frontend's port. Default 7233.
	TemporalPort int
	// Worker configures the worker; a TemporalAddress in it means "use
	// that server, embed none".
	Worker host.Config
	// Out receives the banner.
	Out io.Writer
}

// Dev runs the dev stack until ctx is done.
func Dev(ctx context.Context, cfg DevConfig) error {
	w := cfg.Worker
	temporalLine := fmt.Sprintf("Temporal    %s, namespace %s (TEMPORAL_ADDRESS)", w.TemporalAddress, cmp.Or(w.Namespace, host.DefaultNamespace))
	if w.TemporalAddress == "" {
		srv, err := devserver.Start(devserver.Config{DataDir: cfg.DataDir, Port: cfg.TemporalPort, Namespace: w.Namespace})
		if err != nil {
			return err
		}
		defer func() { _ = srv.Stop() }()
		w.TemporalAddress, w.Namespace = srv.Address(), srv.Namespace()
		temporalLine = fmt.Sprintf("Temporal    %s, namespace %s (embedded; state in %s, log in %s)",
			srv.Address(), srv.Namespace(), srv.DBPath(), filepath.Join(filepath.Dir(srv.DBPath()), "temporal.log"))
	}
	w = w.WithDefaults()
	w.Ready = func(httpAddr string) {
		fmt.Fprintf(cfg.Out, `
oncerun dev is running
  %s
  PostgreSQL  %s (migrated)
  worker      task queue %s; http://%s/healthz and /metrics

Start a run in another terminal:%s
  go run ./starter start --tenant acme --run-id r1 --plan examples/refund.json
  go run ./starter approvals
  go run ./starter approve --tenant acme --run-id r1 --step 3
  go run ./starter status --tenant acme --run-id r1

Ctrl-C stops everything; a second Ctrl-C forces.

`, temporalLine, redact(w.DatabaseURL), w.TaskQueue, httpAddr, exports(w))
	}
	return host.Run(ctx, w)
}

func newDevCmd(getenv func(string) string) *cobra.Command {
	var cfg DevConfig
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run oncerun on this machine: an embedded Temporal server, migrations and a worker",
		Long: `Run oncerun on a laptop in one process: an embedded Temporal server (Temporal's
own server code, state in a SQLite file under --data-dir, so runs survive a
restart), the migrations on DATABASE_URL and a worker. With TEMPORAL_ADDRESS
set, that server is used and none is embedded.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			worker, logLevel, err := host.ConfigFromEnv(getenv)
			if err != nil {
				return err
			}
			if worker.Logger, err = host.NewLogger(logLevel, true); err != nil {
				return err
			}
			cfg.Worker = worker
			cfg.Out = cmd.OutOrStdout()
			return Dev(cmd.Context(), cfg)
		},
	}
	cmd.Flags().StringVar(&cfg.DataDir, "data-dir", devserver.DefaultDataDir, "directory of the embedded Temporal server's state")
	cmd.Flags().IntVar(&cfg.TemporalPort, "temporal-port", devserver.DefaultPort, "port of the embedded Temporal frontend")
	return cmd
}

func newWorkerCmd(getenv func(string) string) *cobra.Command {
	return &cobra.Command{
		Use:    "worker",
		Short:  "Run a worker (as `go run ./worker` does)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			worker, logLevel, err := host.ConfigFromEnv(getenv)
			if err != nil {
				return err
			}
			if worker.Logger, err = host.NewLogger(logLevel, false); err != nil {
				return err
			}
			return host.Run(cmd.Context(), worker)
		},
	}
}

// exports are the variables the CLI needs to reach this stack when it is
// not on the defaults.
func exports(w host.Config) string {
	var vars []string
	if w.TemporalAddress != host.DefaultTemporalAddress {
		vars = append(vars, host.EnvTemporalAddress+"="+w.TemporalAddress)
	}
	if w.Namespace != host.DefaultNamespace {
		vars = append(vars, host.EnvTemporalNamespace+"="+w.Namespace)
	}
	if w.TaskQueue != workflows.DefaultTaskQueue {
		vars = append(vars, host.EnvTaskQueue+"="+w.TaskQueue)
	}
	if len(vars) == 0 {
		return ""
	}
	return "\n  export " + strings.Join(vars, " ")
}

// redact hides a URL's password.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Redacted()
}
