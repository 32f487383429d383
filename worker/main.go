// Command worker hosts oncerun's agent-run workflow and its activities. It
// connects to Temporal and PostgreSQL, applies pending migrations, serves
// /healthz and Prometheus /metrics, and stops gracefully on SIGTERM or
// Ctrl-C.
//
// Environment:
//
//	TEMPORAL_ADDRESS                 Temporal frontend (127.0.0.1:7233)
//	TEMPORAL_NAMESPACE               namespace (default)
//	TEMPORAL_TASK_QUEUE              task queue (oncerun)
//	DATABASE_URL                     PostgreSQL (postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)
//	METRICS_ADDR                     /healthz and /metrics (127.0.0.1:9464)
//	CREDIT_APPROVAL_THRESHOLD_CENTS  credits above it need approval (10000)
//	OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL   the openai planner (off without a model)
//	LOG_LEVEL                        debug, info, warn or error (info)
//	APPROVALS_TOKENS_FILE            serve the approvals API and inbox for these tokens (off when unset)
//	APPROVALS_ADDR                   where the approvals service listens (127.0.0.1:8088)
//	APPROVALS_SECURE_COOKIES         mark the inbox's cookies Secure behind a TLS proxy (false)
//	APPROVALS_DB_TIMEOUT             deadline of each approvals request's database work (5s)
//	APPROVALS_TOKENS_FILE_INSECURE   load a tokens file others may write (false)
//
// The README's configuration reference lists every variable.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/oncerun/oncerun/internal/host"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, level, err := host.ConfigFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	if cfg.Logger, err = host.NewLogger(level, false); err != nil {
		return err
	}
	defer func() { _ = cfg.Logger.Sync() }()
	return host.Run(ctx, cfg)
}
