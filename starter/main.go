// Command oncerun is oncerun's command line.
//
// Usage:
//
//	oncerun dev [--data-dir DIR] [--temporal-port 7233]
//	oncerun demo
//	oncerun migrate [--database-url URL]
//	oncerun start --tenant T --run-id R (--plan FILE | --goal TEXT) [--json]
//	oncerun status --tenant T --run-id R [--json]
//	oncerun approvals [--tenant T] [--json]
//	oncerun approve|reject --tenant T --run-id R --step N [--as NAME] [--comment TEXT]
//
// Environment: DATABASE_URL, TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
// TEMPORAL_TASK_QUEUE, USER (the default approver name), and for dev the
// worker's variables (see worker/main.go).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/oncerun/oncerun/internal/cli"
	"github.com/oncerun/oncerun/internal/devstack"
	"github.com/oncerun/oncerun/internal/host"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	env := cli.Env{
		DatabaseURL:     os.Getenv(host.EnvDatabaseURL),
		TemporalAddress: os.Getenv(host.EnvTemporalAddress),
		Namespace:       os.Getenv(host.EnvTemporalNamespace),
		TaskQueue:       os.Getenv(host.EnvTaskQueue),
		User:            os.Getenv("USER"),
	}
	worker, logLevel, err := host.ConfigFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "oncerun:", err)
		os.Exit(2)
	}
	root := cli.NewRoot(env)
	root.AddCommand(devstack.Commands(env, worker, logLevel)...)
	interrupt := make(chan os.Signal, 1)
	signal.Notify(interrupt, os.Interrupt)
	go func() {
		// Commands that handle Ctrl-C themselves (dev) reset this; for the
		// others the first Ctrl-C ends the command's context.
		<-interrupt
		stop()
	}()
	if err := root.ExecuteContext(ctx); err != nil {
		// Cobra has printed the error and, for bad usage, the usage.
		os.Exit(1)
	}
}
