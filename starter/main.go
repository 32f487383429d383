// Command oncerun is the command-line interface of oncerun: it migrates the
// database today, and starts, inspects and approves agent runs as those
// features land.
//
// Usage:
//
//	oncerun migrate [--database-url URL]
//
// DATABASE_URL sets the default database URL.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// defaultDatabaseURL is the database used when neither --database-url nor
// DATABASE_URL is given: the local server of a laptop or of docker-compose.yml.
const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env := environment{DatabaseURL: os.Getenv("DATABASE_URL")}
	if err := newRootCmd(env).ExecuteContext(ctx); err != nil {
		// Cobra has printed the error and, for bad usage, the usage.
		os.Exit(1)
	}
}

// environment holds what the process environment says; main reads it once.
type environment struct {
	DatabaseURL string
}

func (e environment) databaseURL() string {
	if e.DatabaseURL != "" {
		return e.DatabaseURL
	}
	return defaultDatabaseURL
}
