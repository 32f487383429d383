package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/alerts"
	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/links"
	"github.com/oncerun/oncerun/internal/metrics"
	"github.com/oncerun/oncerun/internal/reconcile"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/internal/telemetry"
	"github.com/oncerun/oncerun/internal/watchdog"
	"github.com/oncerun/oncerun/tools"
)

// webhookWait is how long Close waits for alert deliveries in progress.
const webhookWait = 5 * time.Second

// errServed refuses a second Serve, or a Serve after Close.
var errServed = errors.New("the worker process was served or closed already; Build another")

// Process is a worker process as [Build] returns it: its connections to
// Temporal, PostgreSQL and the MCP servers are open, the schema is
// migrated, the Temporal worker is built with every workflow and activity
// registered, and the address of /healthz and /metrics is bound; nothing
// polls or serves yet. [Process.Serve] runs it, once; [Process.Close]
// releases it.
type Process struct {
	cfg      Config
	log      *zap.Logger
	closeMCP func() error
	tc       client.Client
	pool     *pgxpool.Pool
	reg      *tools.Registry
	// planReg is reg with the sub-agents' tools, for the approvals service.
	planReg *tools.Registry
	// digest is planReg's registry digest; version the worker's Worker
	// Deployment version, its defaults resolved (zero: unversioned);
	// identity its Temporal identity.
	digest   tools.Digest
	version  Versioning
	identity string
	promReg  *prometheus.Registry
	webhook  *alerts.Webhook
	drift    *reconcile.Metrics
	fatal    chan error
	// workers builds the Temporal worker, the first and each one that
	// polls again after a cut; links says when the process is cut off, and
	// gate stops its attempts then (see supervise).
	workers func() sdkworker.Worker
	links   *links.Monitor
	gate    *gate
	polling prometheus.Gauge
	// mu guards worker, the Temporal worker polling now (nil while cut
	// off).
	mu     sync.Mutex
	worker sdkworker.Worker
	// stopping holds the stops of the workers given back.
	stopping sync.WaitGroup
	// ln is the HTTP listener until Serve takes it (or Close closes it).
	ln        net.Listener
	closeOnce sync.Once
	// tracing exports the process's spans while OTEL_* configure it.
	tracing *telemetry.Tracing
}

// Build builds the worker process cfg describes, in the order that fails
// soonest: the MCP servers' tools and the tool registry (with its digest
// and, for a versioned worker, its build ID), the planners, the
// Temporal client (a server that refuses us stops the process before it has
// touched the database), the PostgreSQL pool, oncerun's migrations and
// cfg.Setup, then the dedup store, the metrics, the activities, the HTTP
// listener (METRICS_ADDR) and the Temporal worker. Nothing polls or serves
// yet. When a step fails, Build releases what it acquired before returning
// the error.
func Build(ctx context.Context, cfg Config) (*Process, error) {
	cfg = cfg.WithDefaults()
	p := &Process{log: cfg.Logger}
	if err := p.build(ctx, cfg); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// build does Build's steps, keeping in p what each acquires, so that Close
// releases it.
func (p *Process) build(ctx context.Context, cfg Config) error {
	if err := cfg.Versioning.validate(); err != nil {
		return err
	}
	var err error
	// Tracing first: the clients built below carry its instrumentation.
	if p.tracing, err = telemetry.Start(ctx, os.Getenv, "oncerun-worker"); err != nil {
		return err
	}
	// A worker's start, alone, probes the MCP tools' idempotency claims.
	cfg.probeMCP = true
	cfg, p.closeMCP, err = WithMCP(ctx, cfg)
	if err != nil {
		return err
	}
	p.cfg = cfg
	log := cfg.Logger
	reg, fs, err := workerRegistry(cfg)
	if err != nil {
		return err
	}
	p.reg = reg
	subAgents, err := agentSet(cfg, func(tool string) bool { _, ok := reg.Lookup(tool); return ok })
	if err != nil {
		return err
	}
	if p.planReg, err = planRegistry(reg, subAgents); err != nil {
		return err
	}
	if p.digest, err = registryDigest(p.planReg, subAgents, cfg.mcp); err != nil {
		return err
	}
	if p.version, err = cfg.Versioning.resolve(p.digest); err != nil {
		return err
	}
	planners, err := Planners(cfg.OpenAI)
	if err != nil {
		return err
	}
	// Temporal first: a server that refuses us stops the process before it
	// has touched the database.
	copts := cfg.TemporalClientOptions(log)
	// Temporal's usual identity, with the registry's digest: the pollers
	// of a task queue say what each worker offers.
	copts.Identity = cmp.Or(copts.Identity, workerIdentity(p.digest))
	p.identity = copts.Identity
	if p.tc, err = DialTemporal(ctx, copts, cfg.TemporalConnectWait, log); err != nil {
		return err
	}
	if p.pool, err = NewPool(ctx, cfg.DatabaseURL); err != nil {
		return err
	}
	pool := p.pool
	if err := migrate(ctx, pool, log); err != nil {
		return err
	}
	if cfg.Setup != nil {
		if err := setup(ctx, cfg); err != nil {
			return fmt.Errorf("setup of the deployment's tables: %w", err)
		}
	}
	store, err := idempotency.New(pool, idempotency.Config{Logger: log})
	if err != nil {
		return err
	}

	p.promReg = prometheus.NewRegistry()
	p.promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p.webhook = &alerts.Webhook{URL: cfg.AlertWebhookURL, Log: log}
	sources, err := ReconcileSources(cfg.External)
	if err != nil {
		return err
	}
	runStates := &runs.Client{Temporal: p.tc}
	rc := newReconcile(cfg.Reconcile, pool, sources, runStates, log, p.promReg)
	p.drift = rc.Metrics
	m := metrics.New(p.promReg)
	p.promReg.MustRegister(metrics.NewPendingApprovals(pool, 0, log))
	p.promReg.MustRegister(cfg.mcp.skippedGauge(), cfg.mcp.leftOutCounter())
	p.promReg.MustRegister(registryInfo(p.digest, p.version))
	acts := &activities.Activities{
		Pool: pool, Store: store, Tools: reg, Planners: planners, Agents: subAgents, Log: log, Metrics: m,
		DeadlineWarnings: cfg.ApprovalDeadlineWarnings,
		Warner:           &alerts.DeadlineWarner{Webhook: p.webhook, Metrics: m},
		SpendAlerts:      &alerts.SpendAlerts{Webhook: p.webhook, Pool: pool},
	}
	wd := &WatchdogActivities{Pool: pool, Tools: reg, Runs: runStates, Alerts: p.webhook, Metrics: m, Log: log}
	if p.ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return fmt.Errorf("METRICS_ADDR %s: %w", cfg.HTTPAddr, err)
	}
	p.fatal = make(chan error, 1)
	opts := sdkworker.Options{
		WorkerStopTimeout: shutdownTimeout,
		OnFatalError: func(err error) {
			// The first is enough; a worker given back may report one too.
			select {
			case p.fatal <- err:
			default:
			}
		},
		DeploymentOptions: p.version.deploymentOptions(),
	}
	if cfg.LogActivityAttempts {
		opts.Interceptors = append(opts.Interceptors, newActivityLog(log))
	}
	if len(fs) > 0 {
		fs.announce()
		opts.Interceptors = append(opts.Interceptors, &faultInterceptor{fs: fs})
	}
	p.gate = newGate()
	opts.Interceptors = append(opts.Interceptors, &cutOffInterceptor{gate: p.gate})
	p.workers = func() sdkworker.Worker { return NewWorker(p.tc, cfg.TaskQueue, acts, wd, rc, opts) }
	p.worker = p.workers()
	p.polling = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "oncerun_worker_polling",
		Help: "1 while the worker polls its task queue, 0 while it is cut off from PostgreSQL or Temporal and has given its work back.",
	})
	p.promReg.MustRegister(p.polling)
	if cfg.CutOffAfter >= 0 {
		cfg.CutOffAfter = cmp.Or(cfg.CutOffAfter, links.DefaultCutOffAfter)
		p.cfg.CutOffAfter = cfg.CutOffAfter
		p.links, err = links.New(links.Config{CutOffAfter: cfg.CutOffAfter, Logger: log},
			links.Postgres(pool.Config().ConnConfig), links.Temporal(p.tc))
		if err != nil {
			return fmt.Errorf("ONCERUN_CUT_OFF_AFTER: %w", err)
		}
		p.promReg.MustRegister(p.links.Collectors()...)
	}
	return nil
}

// setup runs cfg.Setup on a pool of its own whose statements have no
// timeout: like a migration, a deployment's setup may rewrite a large
// table.
func setup(ctx context.Context, cfg Config) error {
	pool, err := newPool(ctx, cfg.DatabaseURL, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["statement_timeout"] = "0"
		c.MaxConns = 2
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	return cfg.Setup(ctx, pool)
}

// Serve runs the process until ctx is done, then stops it gracefully: it
// starts the Temporal worker, creates or updates the expiry watchdog's and
// reconciliation's schedules, serves /healthz and /metrics and, when
// [ApprovalsConfig.Enabled], the approvals service, and calls cfg.Ready.
// When ctx is done the worker finishes its running activities (up to 30
// seconds) and the HTTP server drains. It returns early with the error of
// the HTTP server, the approvals service or a worker that stopped. A
// Process serves once; call [Process.Close] after Serve returns.
func (p *Process) Serve(ctx context.Context) error {
	ln := p.ln
	if ln == nil {
		return errServed
	}
	p.ln = nil // Serve closes it from here on.
	cfg, log := p.cfg, p.log
	if err := p.worker.Start(); err != nil {
		ln.Close()
		return fmt.Errorf("start worker: %w", err)
	}
	p.polling.Set(1)
	defer p.stopWorker()
	if err := watchdog.EnsureSchedule(ctx, p.tc, cfg.TaskQueue, cfg.Watchdog); err != nil {
		ln.Close()
		return err
	}
	if err := reconcile.EnsureSchedule(ctx, p.tc, cfg.TaskQueue, cfg.Reconcile); err != nil {
		ln.Close()
		return err
	}
	driftCtx, stopDrift := context.WithCancel(ctx)
	defer stopDrift()
	go refreshDrift(driftCtx, p.pool, p.drift, time.Minute, log)

	if p.links != nil {
		// The supervisor is done before the worker stops (deferred
		// above, so it runs after this).
		supCtx, stopSupervising := context.WithCancel(ctx)
		var supervising sync.WaitGroup
		supervising.Go(func() { p.links.Run(supCtx) })
		supervising.Go(func() { p.supervise(supCtx) })
		defer func() { stopSupervising(); supervising.Wait() }()
	}

	srv := httpServer(p.handler(), log)
	serveErr := make(chan error, 2)
	go func() { serveErr <- srv.Serve(ln) }()
	apCtx, stopApprovals := context.WithCancel(context.WithoutCancel(ctx))
	apDone := make(chan struct{})
	if cfg.Approvals.Enabled() {
		go func() {
			defer close(apDone)
			if err := serveApprovals(apCtx, cfg.Approvals, p.pool, p.tc, cfg.TaskQueue, p.planReg, log); err != nil {
				serveErr <- err
			}
		}()
	} else {
		close(apDone)
	}
	defer func() { stopApprovals(); <-apDone }()
	fields := []zap.Field{zap.String("temporal", cfg.TemporalAddress), zap.String("namespace", cfg.Namespace),
		zap.String("task_queue", cfg.TaskQueue), zap.String("http", ln.Addr().String()),
		zap.Strings("tools", p.reg.Names()), zap.Int("tools_count", len(p.digest.Tools)),
		zap.String("registry_digest", p.digest.Registry), zap.String("registry_digest_short", p.digest.Short()),
		zap.String("identity", p.identity)}
	if v := p.version; v.Enabled() {
		fields = append(fields, zap.String("deployment", v.DeploymentName), zap.String("build_id", v.BuildID),
			zap.String("versioning_behavior", behaviorName(v.Behavior)))
	}
	log.Info("worker started", fields...)
	go checkPollers(driftCtx, p.tc, cfg.TaskQueue, p.identity, p.digest, log)
	if cfg.Ready != nil {
		cfg.Ready(ln.Addr().String())
	}

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		_ = srv.Close()
		return fmt.Errorf("http server: %w", err)
	case err := <-p.fatal:
		_ = srv.Close()
		return fmt.Errorf("worker stopped: %w", err)
	}
	log.Info("worker stopping")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("stop http server: %w", err)
	}
	return nil
}

// Version is the worker's Worker Deployment version, with its defaults
// (the build ID, the behaviour) resolved; zero for an unversioned worker.
func (p *Process) Version() Versioning { return p.version }

// Close releases what [Build] acquired: the HTTP listener if Serve never
// took it, then, after waiting up to 5 seconds for alert webhook
// deliveries in progress, the PostgreSQL pool, the Temporal client and the
// MCP servers' sessions. Call it once Serve has returned, or instead of
// Serve; calls after the first do nothing.
func (p *Process) Close() {
	p.closeOnce.Do(func() {
		if p.ln != nil {
			_ = p.ln.Close()
			p.ln = nil
		}
		if !p.webhook.WaitFor(webhookWait) {
			p.log.Warn("stopping with alert webhook deliveries still in progress; the alerts stay in key_expiry_alerts")
		}
		if p.pool != nil {
			p.pool.Close()
		}
		if p.tc != nil {
			p.tc.Close()
		}
		if p.closeMCP != nil {
			_ = p.closeMCP()
		}
		// The spans of the process's last moments are exported too.
		tctx, cancel := context.WithTimeout(context.Background(), webhookWait)
		defer cancel()
		if err := p.tracing.Shutdown(tctx); err != nil {
			p.log.Warn("traces not exported at shutdown", zap.Error(err))
		}
	})
}
