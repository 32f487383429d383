package devstack

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/internal/cli"
	"github.com/oncerun/oncerun/internal/devserver"
	"github.com/oncerun/oncerun/internal/host"
)

// Commands returns the commands that need Temporal's server code: dev, demo
// and worker. worker is the worker configuration main read from the
// environment, logLevel its LOG_LEVEL.
func Commands(env cli.Env, worker host.Config, logLevel string) []*cobra.Command {
	return []*cobra.Command{newDevCmd(env, worker, logLevel), newDemoCmd(env), newWorkerCmd(worker, logLevel)}
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

Start a run in another terminal:
  go run ./starter start --tenant acme --run-id r1 --plan examples/refund.json
  go run ./starter approvals
  go run ./starter approve --tenant acme --run-id r1 --step 3
  go run ./starter status --tenant acme --run-id r1

Ctrl-C stops everything; a second Ctrl-C forces.

`, temporalLine, redact(w.DatabaseURL), w.TaskQueue, httpAddr)
	}
	return host.Run(ctx, w)
}

func newDevCmd(env cli.Env, worker host.Config, logLevel string) *cobra.Command {
	cfg := DevConfig{Worker: worker}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run oncerun on this machine: an embedded Temporal server, migrations and a worker",
		Long: `Run oncerun on a laptop in one process: an embedded Temporal server (Temporal's
own server code, state in a SQLite file under --data-dir, so runs survive a
restart), the migrations on DATABASE_URL and a worker. With TEMPORAL_ADDRESS
set, that server is used and none is embedded.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := interruptible(cmd.Context(), cmd.ErrOrStderr())
			defer stop()
			log, err := host.NewLogger(cmp.Or(logLevel, "info"), true)
			if err != nil {
				return err
			}
			cfg.Worker.Logger = log
			cfg.Out = cmd.OutOrStdout()
			return Dev(ctx, cfg)
		},
	}
	cmd.Flags().StringVar(&cfg.DataDir, "data-dir", devserver.DefaultDataDir, "directory of the embedded Temporal server's state")
	cmd.Flags().IntVar(&cfg.TemporalPort, "temporal-port", devserver.DefaultPort, "port of the embedded Temporal frontend")
	_ = env
	return cmd
}

func newWorkerCmd(worker host.Config, logLevel string) *cobra.Command {
	return &cobra.Command{
		Use:    "worker",
		Short:  "Run a worker (as `go run ./worker` does)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log, err := host.NewLogger(logLevel, false)
			if err != nil {
				return err
			}
			worker.Logger = log
			return host.Run(ctx, worker)
		},
	}
}

// interruptible cancels its context on the first SIGINT or SIGTERM and
// exits the process on the second.
func interruptible(parent context.Context, errOut io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case <-sigs:
		case <-ctx.Done():
			return
		}
		fmt.Fprintln(errOut, "stopping (Ctrl-C again to force)")
		cancel()
		if _, ok := <-sigs; ok {
			fmt.Fprintln(errOut, "forced")
			os.Exit(130)
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		cancel()
	}
}

// redact hides a URL's password.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Redacted()
}
