package worker_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/worker"
)

// lookupPoints stands for a deployment's own tool.
var lookupPoints = tools.Tool{
	Name:        "lookup_points",
	Description: "Read a customer's loyalty points.",
	Class:       tools.ClassRead,
	Schema:      json.RawMessage(`{"type":"object","properties":{"customer":{"type":"string"}},"required":["customer"]}`),
	Run:         func(context.Context, tools.Call) (any, error) { return map[string]int{"points": 120}, nil },
}

// A deployment's main runs a worker with its own tools beside the built-in
// ones, configured by the environment as `oncerun worker` is, until
// SIGINT or SIGTERM.
func ExampleRun() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, logLevel, err := worker.ConfigFromEnv(os.Getenv)
	if err != nil {
		log.Fatal(err)
	}
	if cfg.Logger, err = worker.NewLogger(logLevel, false); err != nil {
		log.Fatal(err)
	}
	cfg.Tools = append(cfg.Tools, lookupPoints)
	if err := worker.Run(ctx, cfg); err != nil {
		log.Fatal(err)
	}
}

// Build and Serve are Run in two steps, for a main that must know the
// worker can start (Temporal reached, the schema migrated, the metrics
// address bound) before it does anything else, such as telling its
// supervisor. Close releases what Build acquired, whether or not the
// process served.
func ExampleBuild() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, _, err := worker.ConfigFromEnv(os.Getenv)
	if err != nil {
		log.Fatal(err)
	}
	cfg.Tools = append(cfg.Tools, lookupPoints)
	p, err := worker.Build(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	fmt.Println("worker built; serving until SIGINT or SIGTERM")
	if err := p.Serve(ctx); err != nil {
		log.Print(err)
	}
}

// ConfigFromEnv reads the variables of the README's configuration table
// through the function it is given, os.Getenv in a main; an invalid value
// is refused with the variable's name.
func ExampleConfigFromEnv() {
	env := map[string]string{
		"TEMPORAL_ADDRESS":   "temporal.internal:7233",
		"TEMPORAL_NAMESPACE": "shop",
		"WATCHDOG_INTERVAL":  "10m",
		"LOG_LEVEL":          "debug",
	}
	cfg, logLevel, err := worker.ConfigFromEnv(func(name string) string { return env[name] })
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cfg.TemporalAddress, cfg.Namespace, cfg.Watchdog.Interval, logLevel)

	env["WATCHDOG_INTERVAL"] = "soon"
	_, _, err = worker.ConfigFromEnv(func(name string) string { return env[name] })
	fmt.Println(err)
	// Output:
	// temporal.internal:7233 shop 10m0s debug
	// WATCHDOG_INTERVAL "soon" is not a duration such as 5m0s
}

// WithDefaults fills what a configuration leaves empty.
func ExampleConfig_WithDefaults() {
	cfg := worker.Config{Logger: zap.NewNop()}.WithDefaults()
	fmt.Println(cfg.TemporalAddress, cfg.Namespace, cfg.TaskQueue)
	fmt.Println(cfg.DatabaseURL)
	fmt.Println(cfg.HTTPAddr)
	// Output:
	// 127.0.0.1:7233 default oncerun
	// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
	// 127.0.0.1:9464
}

// Registry is the one registry of a deployment: its own tools beside the
// built-in ones, or alone with OmitBuiltinTools.
func ExampleRegistry() {
	reg, err := worker.Registry(worker.Config{Tools: []tools.Tool{lookupPoints}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(reg.Names())

	reg, err = worker.Registry(worker.Config{Tools: []tools.Tool{lookupPoints}, OmitBuiltinTools: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(reg.Names())
	// Output:
	// [add_order_note get_credit get_refund issue_credit lookup_order lookup_points refund_payment send_email]
	// [lookup_points]
}

// Describe says of each tool where it comes from and what oncerun promises
// of its effect, as `oncerun tools` prints it.
func ExampleDescribe() {
	list, err := worker.Describe(worker.Config{Tools: []tools.Tool{lookupPoints}})
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range list {
		fmt.Printf("%s %s %s %s\n", t.Name, t.Source, t.Class, cmp.Or(t.Guarantee, "-"))
	}
	// Output:
	// add_order_note built-in keyed once
	// get_credit built-in read -
	// get_refund built-in read -
	// issue_credit built-in natural once
	// lookup_order built-in read -
	// lookup_points deployment read -
	// refund_payment built-in external once
	// send_email built-in external at-least-once
}

// WithMCP connects to the MCP servers a configuration lists and adds their
// tools; the sessions stay open for the tools' calls until closed.
func ExampleWithMCP() {
	cfg := worker.Config{MCPConfig: "/etc/oncerun/mcp.yaml"}
	cfg, closeMCP, err := worker.WithMCP(context.Background(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer closeMCP()
	list, err := worker.Describe(cfg)
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range list {
		if t.Source == "mcp" {
			fmt.Println(t.Name, "is", t.ServerTool, "of", t.Server)
		}
	}
}

// NewPool opens the one pool a process passes down.
func ExampleNewPool() {
	ctx := context.Background()
	pool, err := worker.NewPool(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	var keys int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&keys); err != nil {
		log.Fatal(err)
	}
	fmt.Println(keys, "keys")
}

// Handler serves /healthz, which pings the pool, and /metrics, here with a
// deployment's own counter. The pool connects on first use: this scrape
// never reaches the database.
func ExampleHandler() {
	pool, err := worker.NewPool(context.Background(), worker.DefaultDatabaseURL)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	reg := prometheus.NewRegistry()
	awarded := prometheus.NewCounter(prometheus.CounterOpts{Name: "loyalty_points_awarded_total", Help: "Loyalty points awarded."})
	reg.MustRegister(awarded)
	awarded.Add(40)

	rec := httptest.NewRecorder()
	worker.Handler(pool, reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	fmt.Println(rec.Code)
	for line := range strings.Lines(rec.Body.String()) {
		if strings.HasPrefix(line, "loyalty_") {
			fmt.Print(line)
		}
	}
	// Output:
	// 200
	// loyalty_points_awarded_total 40
}

// NewWorker is for a deployment that assembles its own Temporal worker: it
// registers oncerun's workflows and the activities it is given. This one
// leaves the watchdog and reconciliation to another worker on the queue,
// and expects the schema migrated (`oncerun migrate`).
func ExampleNewWorker() {
	ctx := context.Background()
	logger, err := worker.NewLogger("info", false)
	if err != nil {
		log.Fatal(err)
	}
	cfg := worker.Config{Logger: logger}.WithDefaults()
	c, err := worker.DialTemporal(ctx, cfg.TemporalClientOptions(logger), cfg.TemporalConnectWait, logger)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	pool, err := worker.NewPool(ctx, cfg.DatabaseURL)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	reg, err := worker.Registry(cfg)
	if err != nil {
		log.Fatal(err)
	}
	planners, err := worker.Planners(cfg.OpenAI)
	if err != nil {
		log.Fatal(err)
	}
	store, err := activities.NewStore(pool, activities.StoreConfig{Logger: logger})
	if err != nil {
		log.Fatal(err)
	}
	acts := &activities.Activities{
		Pool: pool, Store: store, Tools: reg, Planners: planners, Log: logger,
		Metrics: activities.NewMetrics(prometheus.NewRegistry()),
	}
	w := worker.NewWorker(c, cfg.TaskQueue, acts, nil, nil, sdkworker.Options{})
	if err := w.Run(sdkworker.InterruptCh()); err != nil {
		log.Print(err)
	}
}

// NewLogger builds the logger a main passes in Config.Logger, at the level
// of LOG_LEVEL.
func ExampleNewLogger() {
	logger, err := worker.NewLogger("warn", false)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(logger.Core().Enabled(zap.InfoLevel), logger.Core().Enabled(zap.WarnLevel))

	_, err = worker.NewLogger("loud", false)
	fmt.Println(err)
	// Output:
	// false true
	// LOG_LEVEL: unrecognized level: "loud"
}

// DialTemporal connects as the worker does, from the same variables and
// profiles as the temporal CLI, waiting for a server that is still
// starting.
func ExampleDialTemporal() {
	ctx := context.Background()
	cfg, _, err := worker.ConfigFromEnv(os.Getenv)
	if err != nil {
		log.Fatal(err)
	}
	cfg = cfg.WithDefaults()
	c, err := worker.DialTemporal(ctx, cfg.TemporalClientOptions(cfg.Logger), cfg.TemporalConnectWait, cfg.Logger)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		log.Print(err)
	}
}

// Planners offers the script planner always, and the openai one once a
// model is configured.
func ExamplePlanners() {
	ps, err := worker.Planners(worker.OpenAIConfig{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(slices.Sorted(maps.Keys(ps)))

	ps, err = worker.Planners(worker.OpenAIConfig{BaseURL: "http://127.0.0.1:11434/v1", Model: "llama3"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(slices.Sorted(maps.Keys(ps)))
	// Output:
	// [script]
	// [openai script]
}

// Serve runs the approvals service on its own, as `oncerun serve` does;
// it needs a tokens file.
func ExampleServe() {
	cfg, _, err := worker.ConfigFromEnv(os.Getenv)
	if err != nil {
		log.Fatal(err)
	}
	cfg.Approvals.TokensFile = cmp.Or(cfg.Approvals.TokensFile, "/etc/oncerun/tokens.json")
	cfg.Tools = append(cfg.Tools, lookupPoints)
	if err := worker.Serve(context.Background(), cfg); err != nil {
		log.Fatal(err)
	}
}

// ExternalFromEnv reads the providers of the external tools; a provider's
// address without its key is refused.
func ExampleExternalFromEnv() {
	env := map[string]string{"PAYMENTS_BASE_URL": "https://payments.internal"}
	_, err := worker.ExternalFromEnv(func(name string) string { return env[name] })
	fmt.Println(err)

	env["PAYMENTS_API_KEY"] = "sk_test"
	ext, err := worker.ExternalFromEnv(func(name string) string { return env[name] })
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ext.Payments.BaseURL)
	// Output:
	// PAYMENTS_BASE_URL is set but PAYMENTS_API_KEY is empty
	// https://payments.internal
}

// ReconcileSources are the ledgers reconciliation compares: none without a
// payment provider, its refunds with one.
func ExampleReconcileSources() {
	none, err := worker.ReconcileSources(worker.ExternalConfig{})
	if err != nil {
		log.Fatal(err)
	}
	some, err := worker.ReconcileSources(worker.ExternalConfig{
		Payments: worker.PaymentsConfig{BaseURL: "https://payments.internal", APIKey: "sk_test"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(none), len(some))
	// Output:
	// 0 1
}
