// Package oncerun is oncerun's command line as a library. The oncerun
// binary is Main with no options; a deployment with tools of its own builds
// its own binary the same way, and every command of it (worker, dev, serve,
// demo, start's plan check, the approvals API's) knows those tools, from
// one registry:
//
//	func main() {
//		oncerun.Main(oncerun.Options{Tools: []tools.Tool{myTool}})
//	}
package oncerun

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/internal/cli"
	"github.com/oncerun/oncerun/internal/devstack"
	"github.com/oncerun/oncerun/internal/reconcile"
	"github.com/oncerun/oncerun/internal/sandbox/desk"
	sandboxpayments "github.com/oncerun/oncerun/internal/sandbox/payments"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/worker"
)

// Options is what a deployment adds to oncerun.
type Options struct {
	// Tools are the deployment's own tools, registered beside the built-in
	// ones in the registry of every command (worker.Config.Tools).
	Tools []tools.Tool
	// OmitBuiltinTools leaves the built-in tools out
	// (worker.Config.OmitBuiltinTools).
	OmitBuiltinTools bool
	// Setup creates the tables of the deployment's tools when a worker
	// starts (worker.Config.Setup).
	Setup func(ctx context.Context, pool *pgxpool.Pool) error
}

// configure adds o to a worker configuration.
func (o Options) configure(cfg *worker.Config) {
	cfg.Tools = append(cfg.Tools, o.Tools...)
	cfg.OmitBuiltinTools = cfg.OmitBuiltinTools || o.OmitBuiltinTools
	if o.Setup != nil {
		cfg.Setup = o.Setup
	}
}

// Command builds the command tree for the environment read by getenv
// (os.Getenv in a real process).
func Command(o Options, getenv func(string) string) *cobra.Command {
	env := cli.Env{
		DatabaseURL:     getenv(worker.EnvDatabaseURL),
		TemporalAddress: getenv(worker.EnvTemporalAddress),
		Namespace:       getenv(worker.EnvTemporalNamespace),
		TaskQueue:       getenv(worker.EnvTaskQueue),
		User:            getenv("USER"),
		APIURL:          getenv(cli.EnvAPI),
		Token:           getenv(cli.EnvToken),
		Getenv:          getenv,
		Configure:       o.configure,
		Reconcile: func() ([]reconcile.Source, error) {
			ext, err := worker.ExternalFromEnv(getenv)
			if err != nil {
				return nil, err
			}
			return worker.ReconcileSources(ext)
		},
	}
	root := cli.NewRoot(env)
	root.AddCommand(devstack.Commands(env, getenv)...)
	root.AddCommand(sandboxpayments.Command(), desk.Command())
	return root
}

// Main runs the command line on os.Args and exits with its status: 0, or 1
// when the command failed (it has printed why). The first Ctrl-C or SIGTERM
// asks the command to stop cleanly; a second one forces.
func Main(o Options) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		fmt.Fprintln(os.Stderr, "stopping (Ctrl-C again to force)")
		cancel()
		<-sigs
		fmt.Fprintln(os.Stderr, "forced")
		os.Exit(130)
	}()
	err := cli.Execute(ctx, Command(o, os.Getenv), os.Stdout, os.Stderr)
	cancel()
	if err != nil {
		// Cobra has printed the error and, for bad usage, the usage.
		os.Exit(1)
	}
}
