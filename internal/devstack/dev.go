package devstack

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/cli"
	"github.com/oncerun/oncerun/internal/deployment"
	"github.com/oncerun/oncerun/internal/devserver"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/temporalconn"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/worker"
	"github.com/oncerun/oncerun/workflows"
)

// Commands returns the development commands: those that need Temporal's
// server code (dev, demo, temporal-server) and the chaos harness, which
// runs them. getenv is how main reads the environment (os.Getenv); the
// worker's variables are read when dev runs, so a bad one does not break the
// other commands.
func Commands(env cli.Env, getenv func(string) string) []*cobra.Command {
	return []*cobra.Command{newDevCmd(env), newDemoCmd(env, getenv), newTemporalServerCmd(), newChaosCmd(env)}
}

// DevConfig configures [Dev].
type DevConfig struct {
	// DataDir holds the embedded server's SQLite file and log. Default
	// devserver.DefaultDataDir.
	DataDir string
	// TemporalPort is the embedded frontend's port. Default 7233.
	TemporalPort int
	// Worker configures the worker; a TemporalAddress in it means "use
	// that server, embed none".
	Worker worker.Config
	// TemporalFrom says where Worker's TemporalAddress came from, for the
	// banner (temporalconn.AddressSource). Default TEMPORAL_ADDRESS.
	TemporalFrom string
	// Out receives the banner.
	Out io.Writer
}

// Dev runs the dev stack until ctx is done.
func Dev(ctx context.Context, cfg DevConfig) error {
	w := cfg.Worker
	outside := w.TemporalOptions
	outside.HostPort, outside.Namespace = w.TemporalAddress, cmp.Or(w.Namespace, worker.DefaultNamespace)
	from := cmp.Or(cfg.TemporalFrom, settings.EnvTemporalAddress)
	temporalLine := "Temporal    " + temporalconn.Describe(outside) + " (" + from + ")"
	if w.TemporalAddress != "" {
		// Said before anything else: the flags of the embedded server are
		// ignored, and a server that is not up yet is waited for.
		fmt.Fprintf(cfg.Out, "oncerun dev: using the Temporal server at %s (%s); none is embedded, so --temporal-port and --data-dir do not apply to Temporal (--data-dir keeps only the development token and the sandboxes' data)\n",
			temporalconn.Describe(outside), from)
	} else {
		// The embedded server is plain and local: TLS and an API key meant
		// for another Temporal do not apply to it.
		w.TemporalOptions = client.Options{}
		srv, err := devserver.Start(devserver.Config{DataDir: cfg.DataDir, Port: cfg.TemporalPort, Namespace: w.Namespace})
		if err != nil {
			return err
		}
		defer func() { _ = srv.Stop() }()
		w.TemporalAddress, w.Namespace = srv.Address(), srv.Namespace()
		temporalLine = fmt.Sprintf("Temporal    %s, namespace %s (embedded; state in %s, log in %s)",
			srv.Address(), srv.Namespace(), srv.DBPath(), filepath.Join(filepath.Dir(srv.DBPath()), "temporal.log"))
	}
	// A versioned worker, made current at start: the deploy commands can
	// be tried here, and runs behave as on an unversioned worker.
	w = w.WithDefaults()
	w.Versioning.DeploymentName = cmp.Or(w.Versioning.DeploymentName, devDeployment(w.TaskQueue))
	prov, err := startProviders(ctx, cmp.Or(cfg.DataDir, devserver.DefaultDataDir), &w.External)
	if err != nil {
		return err
	}
	defer prov.close()
	tokenLine, err := devToken(cfg.DataDir, &w.Approvals)
	if err != nil {
		return err
	}
	// The banner waits for the worker, its version made current, and the
	// approvals service.
	var (
		mu                     sync.Mutex
		httpAddr, approvalsURL string
		proc                   *worker.Process
		versionLine            string
	)
	self := cli.ThisBinary()
	plan, step := bannerPlan()
	banner := func() {
		if httpAddr == "" || approvalsURL == "" {
			return
		}
		fmt.Fprintf(cfg.Out, `
oncerun dev is running
  %s
  PostgreSQL  %s (migrated)
  worker      task queue %s%s; http://%s/healthz and /metrics
  approvals   %s (inbox; API under /v1; tokens in %s)
  %s
  %s

Start a run in another terminal:%[10]s
  %[12]s start --tenant acme --run-id r1 --plan %[13]s
  %[12]s approvals
  %[12]s approve --tenant acme --run-id r1 --step %[14]s
  %[12]s status --tenant acme --run-id r1
or through the approvals service, as an approver on another machine would:
  export ONCERUN_API=%[11]s ONCERUN_TOKEN=<the token>
  %[12]s approvals
  %[12]s approve --run-id r1 --step %[14]s

Ctrl-C stops everything; a second Ctrl-C forces.

`, temporalLine, untrusted.Redact(w.DatabaseURL), w.TaskQueue, versionLine, httpAddr, approvalsURL, w.Approvals.TokensFile,
			strings.Join(prov.lines, "\n  "), tokenLine,
			exports(w)+providerExports(prov.env), approvalsURL, self, plan, step)
	}
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	w.Ready = func(addr string) {
		v := proc.Version()
		if err := makeCurrent(runCtx, w, v); err != nil {
			stop(err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		httpAddr = addr
		versionLine = fmt.Sprintf(", version %s of deployment %s (current)", v.BuildID, v.DeploymentName)
		banner()
	}
	w.Approvals.Ready = func(addr string) {
		mu.Lock()
		defer mu.Unlock()
		approvalsURL = "http://" + addr + "/"
		banner()
	}
	if proc, err = worker.Build(ctx, w); err != nil {
		return err
	}
	defer proc.Close()
	if err := proc.Serve(runCtx); err != nil {
		return err
	}
	if ctx.Err() == nil {
		return context.Cause(runCtx)
	}
	return nil
}

func newDevCmd(env cli.Env) *cobra.Command {
	var cfg DevConfig
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run oncerun on this machine: an embedded Temporal server, migrations, a worker and the approvals service",
		Long: `Run oncerun on a laptop in one process: an embedded Temporal server (Temporal's
own server code, state in a SQLite file under --data-dir, so runs survive a
restart), the migrations on DATABASE_URL, a worker and the approvals service
(inbox and API on APPROVALS_ADDR). With TEMPORAL_ADDRESS set, that server is
used and none is embedded. Without APPROVALS_TOKENS_FILE, the first start
makes a development token for tenant acme and prints it. With
ONCERUN_LIMITS_FILE set, the file's spend limits are set at start; a file
that is not valid stops it, naming the limit and the field.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			wcfg, logLevel, err := env.WorkerConfig()
			if err != nil {
				return err
			}
			if wcfg.Logger, err = worker.NewLogger(logLevel, true); err != nil {
				return err
			}
			// Checked before anything starts; set once the worker has
			// migrated the schema.
			limits, err := env.LimitsFile()
			if err != nil {
				return err
			}
			if limits != nil {
				wcfg.Setup = limits.Setup(wcfg.Setup, wcfg.Logger)
			}
			cfg.Worker = wcfg
			cfg.Out = cmd.OutOrStdout()
			if env.Getenv != nil {
				cfg.TemporalFrom = temporalconn.AddressSource(env.Getenv)
			}
			return Dev(cmd.Context(), cfg)
		},
	}
	cmd.Flags().StringVar(&cfg.DataDir, "data-dir", devserver.DefaultDataDir, "directory of the embedded Temporal server's state")
	cmd.Flags().IntVar(&cfg.TemporalPort, "temporal-port", devserver.DefaultPort, "port of the embedded Temporal frontend")
	return cmd
}

// devToken makes sure the dev stack has a tokens file. With
// APPROVALS_TOKENS_FILE set, that file is used as it is. Otherwise the data
// directory's tokens.json is used, created on the first start with one
// operator token for tenant acme; the token is printed that once and kept in
// dev-token beside it. It returns the banner's line about the token.
func devToken(dataDir string, ap *worker.ApprovalsConfig) (string, error) {
	if ap.TokensFile != "" {
		return "token       from " + settings.EnvApprovalsTokensFile, nil
	}
	dataDir = cmp.Or(dataDir, devserver.DefaultDataDir)
	ap.TokensFile = filepath.Join(dataDir, "tokens.json")
	tokenPath := filepath.Join(dataDir, "dev-token")
	if _, err := os.Stat(ap.TokensFile); err == nil {
		return "token       the development token is in " + tokenPath, nil
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("dev data dir: %w", err)
	}
	tok, entry, err := approvals.NewToken(approvals.Identity{Name: "dev", Tenant: "acme", Role: approvals.RoleOperator})
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(tokenPath, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("dev token: %w", err)
	}
	if err := approvals.AppendToken(ap.TokensFile, entry); err != nil {
		return "", err
	}
	return "token       " + tok + "\n              (development operator token of tenant acme, shown once; kept in " + tokenPath + ")", nil
}

// DevDeployment is the Worker Deployment of the dev stack's worker on the
// default task queue, when TEMPORAL_DEPLOYMENT_NAME names none.
const DevDeployment = "oncerun-dev"

// devDeployment is the Worker Deployment of a dev stack on the task queue
// queue: DevDeployment, and on another queue than the default the queue's
// name after it, so that two dev stacks on one Temporal server, each on
// its own queue, never make the other's version current.
func devDeployment(queue string) string {
	if queue == workflows.DefaultTaskQueue {
		return DevDeployment
	}
	suffix := strings.Map(func(r rune) rune {
		if r == '.' || r == ':' {
			return '-'
		}
		return r
	}, queue)
	return DevDeployment + "-" + suffix
}

// makeCurrentWait bounds making the dev worker's version current.
const makeCurrentWait = time.Minute

// makeCurrent makes the version v of the dev stack's worker w the current
// one of its deployment, once Temporal has registered it (the worker's
// first poll does, a moment after it starts): new runs start on it, and
// the runs of an earlier build move to it.
func makeCurrent(ctx context.Context, w worker.Config, v worker.Versioning) error {
	ctx, cancel := context.WithTimeout(ctx, makeCurrentWait)
	defer cancel()
	tc, err := worker.DialTemporal(ctx, w.TemporalClientOptions(w.Logger), -1, w.Logger)
	if err != nil {
		return err
	}
	defer tc.Close()
	if err := deployment.WaitForVersion(ctx, tc, v.DeploymentName, v.BuildID); err != nil {
		return err
	}
	for {
		_, err := deployment.SetCurrent(ctx, tc, v.DeploymentName, v.BuildID)
		if err == nil {
			w.Logger.Info("the dev worker's version is current", zap.String("deployment", v.DeploymentName), zap.String("build_id", v.BuildID))
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("make the dev worker's version current: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// exports are the variables the CLI needs to reach this stack when it is
// not on the defaults.
func exports(w worker.Config) string {
	var vars []string
	if w.TemporalAddress != worker.DefaultTemporalAddress {
		vars = append(vars, settings.EnvTemporalAddress+"="+w.TemporalAddress)
	}
	if w.Namespace != worker.DefaultNamespace {
		vars = append(vars, settings.EnvTemporalNamespace+"="+w.Namespace)
	}
	if w.TaskQueue != workflows.DefaultTaskQueue {
		vars = append(vars, settings.EnvTaskQueue+"="+w.TaskQueue)
	}
	secured := w.TemporalOptions.ConnectionOptions.TLS != nil || w.TemporalOptions.Credentials != nil
	if len(vars) == 0 && !secured {
		return ""
	}
	var line string
	if len(vars) > 0 {
		line = "\n  export " + strings.Join(vars, " ")
	}
	if secured {
		// Named, never shown: they hold an API key or a key's path.
		line += "\n  (and this shell's TEMPORAL_API_KEY and TEMPORAL_TLS_* variables)"
	}
	return line
}

// providerExports is the banner's line that points another terminal at the
// dev stack's sandbox payment provider, if it runs one.
func providerExports(env []string) string {
	if len(env) == 0 {
		return ""
	}
	return "\n  export " + strings.Join(env, " ") + "   # the sandbox provider, for oncerun reconcile"
}
