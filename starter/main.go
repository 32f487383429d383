// Command oncerun is oncerun's command line.
//
// Usage:
//
//	oncerun dev [--data-dir DIR] [--temporal-port 7233]
//	oncerun demo
//	oncerun migrate [--database-url URL]
//	oncerun start --tenant T --run-id R (--plan FILE | --goal TEXT) [--json]
//	oncerun status --tenant T --run-id R [--json]
//	oncerun approvals [--tenant T] [--state S] [--json]
//	oncerun approve|reject [--tenant T] --run-id R --step N [--as NAME] [--comment TEXT]
//	oncerun serve
//	oncerun token new --name N --tenant T --role R [--add-to FILE]
//	oncerun resolve [--tenant T] --run-id R --step N --outcome applied|not_applied [--result JSON] [--note TEXT]
//	oncerun reconcile [--json] | --ack ID --note TEXT
//	oncerun sandbox-payments --addr 127.0.0.1:8099 --data-dir DIR [--key-retention 24h] [--payments FILE]
//
// Environment: DATABASE_URL, TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
// TEMPORAL_TASK_QUEUE, USER (the default approver name), ONCERUN_API and
// ONCERUN_TOKEN (start, status, approvals, approve and reject through the
// approvals service), and for dev and serve the worker's variables (see
// worker/main.go).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/oncerun/oncerun/internal/cli"
	"github.com/oncerun/oncerun/internal/devstack"
	"github.com/oncerun/oncerun/internal/reconcile"
	sandboxpayments "github.com/oncerun/oncerun/internal/sandbox/payments"
	"github.com/oncerun/oncerun/worker"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The first Ctrl-C or SIGTERM asks the command to stop cleanly; a second
	// one forces.
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
	env := cli.Env{
		DatabaseURL:     os.Getenv(worker.EnvDatabaseURL),
		TemporalAddress: os.Getenv(worker.EnvTemporalAddress),
		Namespace:       os.Getenv(worker.EnvTemporalNamespace),
		TaskQueue:       os.Getenv(worker.EnvTaskQueue),
		User:            os.Getenv("USER"),
		APIURL:          os.Getenv(cli.EnvAPI),
		Token:           os.Getenv(cli.EnvToken),
		Getenv:          os.Getenv,
		Reconcile: func() ([]reconcile.Source, error) {
			ext, err := worker.ExternalFromEnv(os.Getenv)
			if err != nil {
				return nil, err
			}
			return worker.ReconcileSources(ext)
		},
	}
	root := cli.NewRoot(env)
	root.AddCommand(devstack.Commands(env, os.Getenv)...)
	root.AddCommand(sandboxpayments.Command())
	if err := cli.Execute(ctx, root, os.Stdout, os.Stderr); err != nil {
		// Cobra has printed the error and, for bad usage, the usage.
		os.Exit(1)
	}
}
