// Command oncerun is oncerun's command line.
//
// Usage:
//
//	oncerun migrate [--database-url URL]
//	oncerun start --tenant T --run-id R (--plan FILE | --goal TEXT) [--json]
//	oncerun status --tenant T --run-id R [--json]
//	oncerun approvals [--tenant T] [--json]
//	oncerun approve|reject --tenant T --run-id R --step N [--as NAME] [--comment TEXT]
//
// Environment: DATABASE_URL, TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
// TEMPORAL_TASK_QUEUE and USER (the default approver name).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/oncerun/oncerun/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env := cli.Env{
		DatabaseURL:     os.Getenv("DATABASE_URL"),
		TemporalAddress: os.Getenv("TEMPORAL_ADDRESS"),
		Namespace:       os.Getenv("TEMPORAL_NAMESPACE"),
		TaskQueue:       os.Getenv("TEMPORAL_TASK_QUEUE"),
		User:            os.Getenv("USER"),
	}
	if err := cli.NewRoot(env).ExecuteContext(ctx); err != nil {
		// Cobra has printed the error and, for bad usage, the usage.
		os.Exit(1)
	}
}
