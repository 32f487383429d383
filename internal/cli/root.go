package cli

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/reconcile"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/internal/temporalconn"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/worker"
)

// Env is what the process environment says; main reads it once.
type Env struct {
	// DatabaseURL is DATABASE_URL. Default worker.DefaultDatabaseURL.
	DatabaseURL string
	// TemporalAddress is TEMPORAL_ADDRESS. Default worker.DefaultTemporalAddress.
	TemporalAddress string
	// Namespace is TEMPORAL_NAMESPACE. Default "default".
	Namespace string
	// TaskQueue is TEMPORAL_TASK_QUEUE. Default "oncerun".
	TaskQueue string
	// User names the approver when --as is not given (USER).
	User string
	// Temporal, when set, is used instead of dialing TemporalAddress.
	Temporal client.Client
	// APIURL is ONCERUN_API: when set, start, status, approvals, approve,
	// reject, resolve, answer, cancel, pause, resume, message and limits go
	// through the approvals service instead.
	APIURL string
	// Token is ONCERUN_TOKEN, the bearer token for APIURL.
	Token string
	// Getenv reads the environment for commands that take a worker's
	// variables (serve) and for reaching Temporal. Default: every variable
	// is empty (the temporal CLI's default profile file is still read).
	Getenv func(string) string
	// Reconcile returns the ledgers `oncerun reconcile` compares, as main
	// configures them. Nil: no ledger; the command checks the outbox only.
	Reconcile func() ([]reconcile.Source, error)
	// Configure adds the deployment's part to every worker configuration
	// the commands build (its tools, its tables' setup), so that the
	// worker, `serve`, `dev` and the plan check of `start` share one
	// registry. Nil: the built-in tools only.
	Configure func(*worker.Config)
}

// WorkerConfig is the worker configuration of this environment: what
// Getenv says (see worker.ConfigFromEnv), with the deployment's part
// (Configure) added. It also returns LOG_LEVEL.
func (e Env) WorkerConfig() (worker.Config, string, error) {
	getenv := e.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	cfg, level, err := worker.ConfigFromEnv(getenv)
	if err != nil {
		return worker.Config{}, "", err
	}
	if e.Configure != nil {
		e.Configure(&cfg)
	}
	return cfg, level, nil
}

// Registry is the deployment's tool registry, as its workers build it
// (worker.Registry of [Env.WorkerConfig]): the one plans are checked
// against.
func (e Env) Registry() (*tools.Registry, error) {
	cfg, _, err := e.WorkerConfig()
	if err != nil {
		return nil, err
	}
	// The MCP servers are asked for their tools, and let go: a plan check
	// calls no tool.
	ctx, cancel := context.WithTimeout(context.Background(), mcpListTimeout)
	defer cancel()
	cfg, closeMCP, err := worker.WithMCP(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer closeMCP()
	return worker.Registry(cfg)
}

// mcpListTimeout bounds asking every MCP server for its tools from the CLI.
const mcpListTimeout = time.Minute

func (e Env) databaseURL() string { return cmp.Or(e.DatabaseURL, worker.DefaultDatabaseURL) }

// NewRoot builds the oncerun command tree.
func NewRoot(env Env) *cobra.Command {
	root := &cobra.Command{
		Use:           "oncerun",
		Short:         "oncerun runs AI agent runs whose side effects happen once",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	conn := &connections{env: env}
	root.PersistentPostRun = func(*cobra.Command, []string) { conn.close() }
	root.AddCommand(
		newMigrateCmd(env),
		newStartCmd(conn),
		newStatusCmd(conn),
		newWatchCmd(conn),
		newToolsCmd(env),
		newApprovalsCmd(conn),
		newDecideCmd(conn, "approve"),
		newDecideCmd(conn, "reject"),
		newResolveCmd(conn),
		newAnswerCmd(conn),
		newControlCmd(conn, approvalstore.ActionCancel),
		newControlCmd(conn, approvalstore.ActionPause),
		newControlCmd(conn, approvalstore.ActionResume),
		newControlCmd(conn, approvalstore.ActionMessage),
		newKeysCmd(conn),
		newLimitsCmd(conn),
		newReconcileCmd(conn),
		newReplayCmd(conn),
		newDeploymentCmd(conn),
		newServeCmd(env),
		newWorkerCmd(env),
		newTokenCmd(),
	)
	return root
}

// Execute runs root with what it prints escaped for a terminal (see
// untrusted.TerminalWriter), so that no text from a run, a planner or a server
// (a goal, a tool's result, an error) can move the cursor, change colours or
// hide what is shown; JSON output stays valid JSON. main runs the CLI
// through it.
func Execute(ctx context.Context, root *cobra.Command, stdout, stderr io.Writer) error {
	out, errOut := untrusted.NewTerminalWriter(stdout), untrusted.NewTerminalWriter(stderr)
	root.SetOut(out)
	root.SetErr(errOut)
	err := root.ExecuteContext(ctx)
	return errors.Join(err, out.Flush(), errOut.Flush())
}

// connections dials Temporal and PostgreSQL on first use.
type connections struct {
	env  Env
	mu   sync.Mutex
	tc   client.Client
	own  bool
	pool *pgxpool.Pool
}

func (c *connections) client(ctx context.Context, withDB bool) (*runs.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tc == nil {
		if c.env.Temporal != nil {
			c.tc = c.env.Temporal
		} else {
			opts, err := c.env.temporalOptions()
			if err != nil {
				return nil, err
			}
			// One try: a command is run again by its caller, and a server
			// that refuses us says why at once.
			tc, err := worker.DialTemporal(ctx, opts, -1, zap.NewNop())
			if err != nil {
				return nil, err
			}
			c.tc, c.own = tc, true
		}
	}
	if withDB && c.pool == nil {
		pool, err := worker.NewPool(ctx, c.env.databaseURL())
		if err != nil {
			return nil, err
		}
		c.pool = pool
	}
	return &runs.Client{Temporal: c.tc, TaskQueue: c.env.TaskQueue, Pool: c.pool}, nil
}

// temporalOptions are the Temporal client's options of this environment,
// read as the temporal CLI reads them (temporalconn.Load), with
// TemporalAddress and Namespace, when set, in place of the address and
// namespace they name.
func (e Env) temporalOptions() (client.Options, error) {
	getenv := e.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	opts, err := temporalconn.Load(getenv)
	if err != nil {
		return client.Options{}, err
	}
	opts.HostPort = cmp.Or(e.TemporalAddress, opts.HostPort, worker.DefaultTemporalAddress)
	opts.Namespace = cmp.Or(e.Namespace, opts.Namespace, worker.DefaultNamespace)
	opts.Logger = quietLogger()
	return opts, nil
}

func (c *connections) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.own && c.tc != nil {
		c.tc.Close()
	}
	if c.pool != nil {
		c.pool.Close()
	}
}

// quietLogger keeps the SDK's own log lines out of a command's output.
func quietLogger() sdklog.Logger { return sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)) }
