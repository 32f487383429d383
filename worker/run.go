package worker

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/httpserver"
	"github.com/oncerun/oncerun/internal/mail"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/internal/telemetry"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/migrations"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// Defaults of [Config].
const (
	DefaultTemporalAddress = "127.0.0.1:7233"
	DefaultNamespace       = "default"
	DefaultDatabaseURL     = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	defaultHTTPAddr        = "127.0.0.1:9464"
	// defaultConnectTimeout bounds the making of each PostgreSQL connection
	// when DATABASE_URL sets no connect_timeout.
	defaultConnectTimeout = 10 * time.Second
	shutdownTimeout       = 30 * time.Second
)

// Config configures a worker process. main fills it from the environment.
type Config struct {
	// TemporalAddress is the Temporal frontend, host:port. Default
	// DefaultTemporalAddress (TEMPORAL_ADDRESS).
	TemporalAddress string
	// Namespace is the Temporal namespace. Default "default"
	// (TEMPORAL_NAMESPACE).
	Namespace string
	// TemporalOptions are the rest of how to reach Temporal: TLS, the API
	// key (as Credentials), gRPC headers. ConfigFromEnv reads them, with
	// TemporalAddress and Namespace, as the temporal CLI does
	// (TEMPORAL_API_KEY, TEMPORAL_TLS_*, TEMPORAL_GRPC_META_*, and the TOML
	// profile of TEMPORAL_PROFILE and TEMPORAL_CONFIG_FILE). Its HostPort,
	// Namespace and Logger are not used: TemporalAddress, Namespace and
	// Logger are.
	TemporalOptions client.Options
	// TemporalConnectWait is how long the process keeps trying to reach
	// Temporal at start. Default defaultTemporalConnectWait; negative tries
	// once (TEMPORAL_CONNECT_WAIT).
	TemporalConnectWait time.Duration
	// CutOffAfter is how long the worker may go without an answer from
	// PostgreSQL or from Temporal, each probed every second on a
	// connection of its own, before it counts itself cut off: it stops
	// polling, ends the attempts it runs (a local step's workflow task
	// fails, so that Temporal hands the run to another worker at once),
	// starts no effect, and says so on /readyz and in
	// oncerun_worker_cut_off; it polls again once both answer. Default
	// links.DefaultCutOffAfter (5 s); negative: never
	// (ONCERUN_CUT_OFF_AFTER, "off").
	CutOffAfter time.Duration
	// TaskQueue is the task queue to poll. Default
	// workflows.DefaultTaskQueue (TEMPORAL_TASK_QUEUE).
	TaskQueue string
	// Versioning places the worker in a Temporal Worker Deployment
	// (TEMPORAL_DEPLOYMENT_NAME, TEMPORAL_WORKER_BUILD_ID,
	// ONCERUN_VERSIONING_BEHAVIOR). Zero: unversioned.
	Versioning Versioning
	// DatabaseURL is the PostgreSQL URL. Default DefaultDatabaseURL
	// (DATABASE_URL).
	DatabaseURL string
	// HTTPAddr is where /healthz and /metrics are served. Default
	// defaultHTTPAddr (METRICS_ADDR).
	HTTPAddr string
	// Tools are the deployment's own tools, registered beside the built-in
	// ones (or instead of them, with OmitBuiltinTools) in the one registry
	// the worker, the approvals service and the plan checks share.
	Tools []tools.Tool
	// OmitBuiltinTools leaves the built-in tools out of the registry: the
	// demo shop's (lookup_order, get_credit, issue_credit, add_order_note)
	// and the external ones (refund_payment, get_refund, send_email).
	OmitBuiltinTools bool
	// Setup, when set, runs once at start, after oncerun's migrations and
	// before the worker polls: a deployment creates or migrates the tables
	// its own tools write. It must be safe to run by several processes at
	// once (CREATE TABLE IF NOT EXISTS, or a lock).
	Setup func(ctx context.Context, pool *pgxpool.Pool) error
	// Shop configures the built-in shop tools
	// (CREDIT_APPROVAL_THRESHOLD_CENTS).
	Shop ShopConfig
	// External configures refund_payment, get_refund and send_email.
	External ExternalConfig
	// OpenAI configures the openai planner; with no Model the planner is
	// not offered and runs that ask for it fail with a clear error
	// (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL).
	OpenAI OpenAIConfig
	// Watchdog configures the expiry watchdog (WATCHDOG_INTERVAL,
	// WATCHDOG_BATCH_SIZE, WATCHDOG_DUTY_CYCLE, EXPIRY_POLICY); zero fields
	// take its defaults.
	Watchdog WatchdogConfig
	// Reconcile configures the reconciliation schedule.
	Reconcile ReconcileConfig
	// Approvals configures the approvals service, served beside the worker
	// when its tokens file is set.
	Approvals ApprovalsConfig
	// AlertWebhookURL, when set, receives each expiry alert and each
	// approval deadline warning as a JSON POST (ALERT_WEBHOOK_URL).
	AlertWebhookURL string
	// ApprovalDeadlineWarnings are how long before its approval deadline a
	// step still waiting for a decision is warned about, once each: a log
	// line, oncerun_approval_deadline_warnings_total and a POST to
	// AlertWebhookURL. Nil: activities.DefaultDeadlineWarnings (24h and
	// 1h); empty and not nil: never (APPROVAL_DEADLINE_WARNINGS).
	ApprovalDeadlineWarnings []time.Duration
	// MCPConfig names the file that lists MCP servers and what oncerun
	// must know of their tools (ONCERUN_MCP_CONFIG). [WithMCP] connects to
	// the servers and adds their tools to Tools; Build does it at start.
	MCPConfig string
	// Agents are the deployment's sub-agents, beside those of the file
	// AgentsConfig names (ONCERUN_AGENTS_CONFIG, YAML or JSON, read
	// strictly). Build refuses a sub-agent that names a tool the worker
	// does not have.
	Agents       []Agent
	AgentsConfig string
	// mcp is what WithMCP found: where each MCP tool comes from, and the
	// optional servers left out.
	mcp *mcpFound
	// probeMCP makes WithMCP run the MCP tools' idempotency probes: set by
	// a worker's start alone.
	probeMCP bool
	// faults is fault injection for drills and tests, read from the
	// environment only (ConfigFromEnv): see settings.EnvCrashAt. Empty in
	// production.
	faults faultSpec
	// LogActivityAttempts logs, at info, each activity attempt as it starts
	// and as it returns (settings.EnvLogActivityAttempts). The chaos harness reads
	// these lines to measure how soon a dead worker's step runs again.
	LogActivityAttempts bool
	// Logger is the process's logger. Default: a production zap logger.
	Logger *zap.Logger
	// Ready, if set, is called with the HTTP server's address once the
	// worker polls.
	Ready func(httpAddr string)
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.TemporalAddress = cmp.Or(c.TemporalAddress, DefaultTemporalAddress)
	c.Namespace = cmp.Or(c.Namespace, DefaultNamespace)
	c.TaskQueue = cmp.Or(c.TaskQueue, workflows.DefaultTaskQueue)
	c.DatabaseURL = cmp.Or(c.DatabaseURL, DefaultDatabaseURL)
	c.HTTPAddr = cmp.Or(c.HTTPAddr, defaultHTTPAddr)
	if c.Logger == nil {
		c.Logger = zap.Must(zap.NewProduction())
	}
	return c
}

// ShopConfig configures the built-in tools of the demo shop.
type ShopConfig = shop.Config

// OpenAIConfig configures the openai planner: any OpenAI-compatible chat
// completions endpoint.
type OpenAIConfig = planner.OpenAIConfig

// Registry builds the one tool registry of a deployment configured by cfg:
// the built-in tools (unless cfg.OmitBuiltinTools) and cfg.Tools. The
// worker, the approvals service (`oncerun serve`, `oncerun-dev dev`) and the
// CLI's plan checks all build theirs with it, so a plan one accepts the
// others run. issue_credit tells customers of new credits by e-mail when
// cfg.External names an SMTP server. The deployment's sub-agents
// (cfg.Agents, cfg.AgentsConfig) are in it as the tools agent_<name>, so
// that a scripted plan may delegate; they never run as tools.
func Registry(cfg Config) (*tools.Registry, error) {
	reg, err := toolRegistry(cfg)
	if err != nil {
		return nil, err
	}
	set, err := agentSet(cfg, func(tool string) bool { _, ok := reg.Lookup(tool); return ok })
	if err != nil {
		return nil, err
	}
	return planRegistry(reg, set)
}

// toolRegistry is the registry of cfg's tools, without the sub-agents'.
func toolRegistry(cfg Config) (*tools.Registry, error) {
	if err := cfg.mcpDiscovered(); err != nil {
		return nil, err
	}
	all, err := allTools(cfg)
	if err != nil {
		return nil, err
	}
	return newRegistry(all)
}

// allTools lists the tools of cfg: the built-in ones, then cfg.Tools.
func allTools(cfg Config) ([]tools.Tool, error) {
	if cfg.OmitBuiltinTools {
		return slices.Clone(cfg.Tools), nil
	}
	shopCfg, ext := cfg.Shop, cfg.External
	if ext.SMTP.Addr != "" && shopCfg.NotifyTool == "" {
		shopCfg.NotifyTool = mail.SendEmail
	}
	externals, err := externalTools(shopCfg, ext)
	if err != nil {
		return nil, err
	}
	return slices.Concat(shop.Tools(shopCfg), externals, cfg.Tools), nil
}

// workerRegistry is the registry of a worker of cfg, with its fault
// injection, if any, and the faults.
func workerRegistry(cfg Config) (*tools.Registry, faults, error) {
	if err := cfg.mcpDiscovered(); err != nil {
		return nil, nil, err
	}
	all, err := allTools(cfg)
	if err != nil {
		return nil, nil, err
	}
	fs, err := parseFaults(cfg, all)
	if err != nil {
		return nil, nil, err
	}
	reg, err := newRegistry(fs.withFaults(all))
	return reg, fs, err
}

func newRegistry(all []tools.Tool) (*tools.Registry, error) {
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, all...)
	if err != nil {
		return nil, fmt.Errorf("tool registry: %w", err)
	}
	return reg, nil
}

// Planners returns the planners a worker offers: script always, openai when
// a model is configured.
func Planners(openai OpenAIConfig) (map[string]activities.Planner, error) {
	ps := map[string]activities.Planner{planner.NameScript: planner.Script{}}
	if openai.Model == "" {
		return ps, nil
	}
	p, err := planner.NewOpenAI(openai)
	if err != nil {
		return nil, err
	}
	ps[planner.NameOpenAI] = p
	return ps, nil
}

// Run runs a worker process until ctx is done, then stops it gracefully:
// the worker finishes its running activities (up to 30 seconds) and the
// HTTP server drains. It is [Build], [Process.Serve] and [Process.Close].
func Run(ctx context.Context, cfg Config) error {
	p, err := Build(ctx, cfg)
	if err != nil {
		return err
	}
	defer p.Close()
	return p.Serve(ctx)
}

// NewPool builds a process's PostgreSQL pool on url. Each new connection
// gives up after the URL's connect_timeout (in seconds, as libpq reads it)
// or defaultConnectTimeout; waiting for a pooled connection and every query
// are bounded by the caller's context: an activity's timeout, or an
// approvals request's APPROVALS_DB_TIMEOUT. Every connection is bounded
// besides, unless the URL sets the setting itself: a statement timeout of
// 60 s, an idle-in-transaction timeout of 15 s, TCP keepalives and a TCP
// user timeout of 15 s on both sides (docs/reliability.md, "Timeouts"); a
// setting of the server's configuration, the database or the role is
// kept too.
func NewPool(ctx context.Context, url string) (*pgxpool.Pool, error) { return newPool(ctx, url, nil) }

// newPool is NewPool with change applied to the configuration first.
func newPool(ctx context.Context, url string, change func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if change != nil {
		change(cfg)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	boundPool(cfg)
	if t := telemetry.QueryTracer(); t != nil {
		cfg.ConnConfig.Tracer = t
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL %s: %w", untrusted.Redact(url), err)
	}
	return pool, nil
}

func migrate(ctx context.Context, pool *pgxpool.Pool, log *zap.Logger) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Release()
	// A migration may rewrite a large table: no statement timeout for it,
	// and the pool's bound again once it is done.
	var bound string
	if err := conn.QueryRow(ctx, "SELECT current_setting('statement_timeout')").Scan(&bound); err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	if _, err := conn.Exec(ctx, "SET statement_timeout = 0"); err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(rctx, "SELECT set_config('statement_timeout', $1, false)", bound); err != nil {
			// A connection whose bound is unknown is not given back.
			_ = conn.Conn().Close(rctx)
		}
	}()
	res, err := migrations.Migrate(ctx, conn.Conn())
	if err != nil {
		return err
	}
	log.Info("schema migrated", zap.Strings("applied", res.Applied), zap.Int32("version", res.Version))
	return nil
}

// httpServer is the server of /metrics and /healthz, with the limits of
// every server of oncerun (internal/httpserver).
func httpServer(h http.Handler, log *zap.Logger) *httpserver.Server {
	return httpserver.New(h, httpserver.Config{ErrorLog: zap.NewStdLog(log)})
}

// Handler serves /healthz (200 while PostgreSQL answers) and /metrics.
func Handler(pool *pgxpool.Pool, gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := pool.Ping(ctx); err != nil {
			http.Error(w, "database unreachable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}
