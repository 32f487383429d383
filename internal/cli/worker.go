package cli

import (
	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/worker"
)

func newWorkerCmd(env Env) *cobra.Command {
	return &cobra.Command{
		Use:   "worker",
		Short: "Run a worker: oncerun's workflows and activities, /healthz and /metrics, and the approvals service when a tokens file is set",
		Long: `Run a worker process. It connects to Temporal and PostgreSQL, applies pending
migrations, polls its task queue, serves /healthz and Prometheus /metrics, and
stops gracefully on SIGTERM or Ctrl-C. With APPROVALS_TOKENS_FILE set it also
serves the approvals API and inbox. Run as many as you like: they are
stateless.

Environment (defaults in brackets; the README lists every variable):

  TEMPORAL_ADDRESS                 Temporal frontend [127.0.0.1:7233]
  TEMPORAL_NAMESPACE               namespace [default]
  TEMPORAL_API_KEY                 API key (Temporal Cloud); turns TLS on [none]
  TEMPORAL_TLS, TEMPORAL_TLS_CLIENT_CERT_PATH, TEMPORAL_TLS_CLIENT_KEY_PATH,
  TEMPORAL_TLS_SERVER_CA_CERT_PATH, TEMPORAL_TLS_SERVER_NAME   TLS and mutual TLS [off]
  TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE   the temporal CLI's TOML profile [default]
  TEMPORAL_CONNECT_WAIT            how long to wait for a server not there yet [1m]
  TEMPORAL_TASK_QUEUE              task queue [oncerun]
  TEMPORAL_DEPLOYMENT_NAME         the Worker Deployment this worker is a version of [unversioned]
  TEMPORAL_WORKER_BUILD_ID         its version [executable's SHA-256 (8 hex).registry digest (12 hex)]
  ONCERUN_VERSIONING_BEHAVIOR      AgentRun's behaviour: auto-upgrade or pinned [auto-upgrade]
  DATABASE_URL                     PostgreSQL [postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable]
  METRICS_ADDR                     /healthz, /readyz and /metrics [127.0.0.1:9464]
  ONCERUN_CUT_OFF_AFTER            without PostgreSQL or Temporal this long, give the runs back [5s]
  CREDIT_APPROVAL_THRESHOLD_CENTS  credits above it need approval [10000]
  OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL   the openai planner [off without a model]
  OPENAI_PARALLEL_TOOL_CALLS       false: a turn's calls run in order [true]
  LOG_LEVEL                        debug, info, warn or error [info]
  APPROVALS_TOKENS_FILE            serve the approvals API and inbox for these tokens [off]
  APPROVALS_ADDR                   where the approvals service listens [127.0.0.1:8088]
  ONCERUN_LIMITS_FILE              spend caps to set at start (YAML; docs/limits.md) [none]
  ALERT_WEBHOOK_URL                expiry, deadline and spend cap alerts [none]`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			wcfg, logLevel, err := env.WorkerConfig()
			if err != nil {
				return err
			}
			if wcfg.Logger, err = worker.NewLogger(logLevel, false); err != nil {
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
			return worker.Run(cmd.Context(), wcfg)
		},
	}
}
