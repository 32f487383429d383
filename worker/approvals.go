package worker

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/approvals/inbox"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/telemetry"
	"github.com/oncerun/oncerun/tools"
)

// ApprovalsConfig configures the approvals service a process serves.
type ApprovalsConfig struct {
	// Addr is where the service listens. Default approvals.DefaultAddr
	// (APPROVALS_ADDR).
	Addr string
	// TokensFile is the tokens file (APPROVALS_TOKENS_FILE). A worker
	// serves the approvals service only when it is set; `oncerun serve`
	// requires it.
	TokensFile string
	// SecureCookies marks the inbox's cookies Secure behind a TLS proxy
	// (APPROVALS_SECURE_COOKIES=true).
	SecureCookies bool
	// DBTimeout bounds each request's database work. Default
	// approvals.DefaultDBTimeout (APPROVALS_DB_TIMEOUT).
	DBTimeout time.Duration
	// TraceTrustedNetworks are the networks whose callers' trace context
	// the service's requests continue (ONCERUN_TRACE_TRUSTED_NETWORKS).
	// Default none: every request starts a trace of its own, linked to
	// the caller's (telemetry.Handler).
	TraceTrustedNetworks []netip.Prefix
	// AllowWritableTokensFile loads a tokens file users other than its
	// owner may write, which is refused otherwise
	// (APPROVALS_TOKENS_FILE_INSECURE=true).
	AllowWritableTokensFile bool
	// Ready, if set, is called with the bound address once the service
	// listens.
	Ready func(addr string)
}

// Enabled reports whether a worker serves the approvals service.
func (c ApprovalsConfig) Enabled() bool { return c.TokensFile != "" }

// serveApprovals serves the approvals service until ctx ends.
func serveApprovals(ctx context.Context, cfg ApprovalsConfig, pool *pgxpool.Pool, tc client.Client, taskQueue string,
	reg *tools.Registry, log *zap.Logger) error {
	if cfg.TokensFile == "" {
		return fmt.Errorf("the approvals service needs a tokens file (%s); make one with `oncerun token new`", settings.EnvApprovalsTokensFile)
	}
	log = log.Named("approvals")
	tokens, err := approvals.OpenTokenFile(cfg.TokensFile, approvals.TokenFileConfig{Log: log, AllowWritable: cfg.AllowWritableTokensFile})
	if err != nil {
		return fmt.Errorf("%s: %w", settings.EnvApprovalsTokensFile, err)
	}
	if tokens.Len() == 0 {
		log.Warn("the tokens file lists no token: nobody can sign in", zap.String("path", cfg.TokensFile))
	}
	srv, err := approvals.New(approvals.Config{
		Runs: &runs.Client{Temporal: tc, TaskQueue: taskQueue, Pool: pool},
		Pool: pool, Tokens: tokens, Tools: reg, Log: log, DBTimeout: cfg.DBTimeout,
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	ib, err := inbox.New(inbox.Config{API: srv, SecureCookies: cfg.SecureCookies, Log: log.Named("inbox")})
	if err != nil {
		return err
	}
	addr := cmp.Or(cfg.Addr, approvals.DefaultAddr)
	return approvals.ListenAndServe(ctx, addr, telemetry.Handler(ib.Handler(),
		telemetry.ServerConfig{Operation: "approvals", Trusted: cfg.TraceTrustedNetworks}), log, func(a net.Addr) {
		log.Info("approvals service listening", zap.String("addr", a.String()), zap.String("tokens_file", cfg.TokensFile),
			zap.Int("tokens", tokens.Len()))
		if cfg.Ready != nil {
			cfg.Ready(a.String())
		}
	})
}

// Serve runs the approvals service on its own (`oncerun serve`) until ctx
// ends: it connects to Temporal (a refusal stops it before it touches the
// database), applies the migrations and serves.
func Serve(ctx context.Context, cfg Config) error {
	cfg = cfg.WithDefaults()
	if !cfg.Approvals.Enabled() {
		return fmt.Errorf("oncerun serve needs %s, a tokens file; make one with `oncerun token new --add-to FILE`", settings.EnvApprovalsTokensFile)
	}
	tracing, err := telemetry.Start(ctx, os.Getenv, "oncerun-approvals")
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), webhookWait)
		defer cancel()
		_ = tracing.Shutdown(sctx)
	}()
	// The service checks plans and edits against the MCP servers' tools
	// too, and runs a paired read when a person asks the provider again
	// about a step whose outcome is unknown; it calls no other tool.
	cfg, closeMCP, err := WithMCP(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeMCP()
	reg, err := Registry(cfg)
	if err != nil {
		return err
	}
	tc, err := DialTemporal(ctx, cfg.TemporalClientOptions(cfg.Logger), cfg.TemporalConnectWait, cfg.Logger)
	if err != nil {
		return err
	}
	defer tc.Close()
	pool, err := NewPool(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrate(ctx, pool, cfg.Logger); err != nil {
		return err
	}
	return serveApprovals(ctx, cfg.Approvals, pool, tc, cfg.TaskQueue, reg, cfg.Logger)
}
