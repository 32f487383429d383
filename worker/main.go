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
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/host"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/tools"
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
	level, err := zap.ParseAtomicLevel(envOr("LOG_LEVEL", "info"))
	if err != nil {
		return fmt.Errorf("LOG_LEVEL: %w", err)
	}
	zcfg := zap.NewProductionConfig()
	zcfg.Level = level
	log, err := zcfg.Build()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	var threshold int64
	if s := os.Getenv("CREDIT_APPROVAL_THRESHOLD_CENTS"); s != "" {
		if threshold, err = strconv.ParseInt(s, 10, 64); err != nil {
			return fmt.Errorf("CREDIT_APPROVAL_THRESHOLD_CENTS %q is not an integer", s)
		}
	}
	return host.Run(ctx, host.Config{
		TemporalAddress: os.Getenv("TEMPORAL_ADDRESS"),
		Namespace:       os.Getenv("TEMPORAL_NAMESPACE"),
		TaskQueue:       os.Getenv("TEMPORAL_TASK_QUEUE"),
		DatabaseURL:     os.Getenv("DATABASE_URL"),
		HTTPAddr:        os.Getenv("METRICS_ADDR"),
		Shop:            tools.ShopConfig{CreditApprovalThresholdCents: threshold},
		OpenAI: planner.OpenAIConfig{
			BaseURL: os.Getenv("OPENAI_BASE_URL"),
			APIKey:  os.Getenv("OPENAI_API_KEY"),
			Model:   os.Getenv("OPENAI_MODEL"),
		},
		Logger: log,
	})
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
