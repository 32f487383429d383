// Package settings names what a worker, `oncerun serve` and the
// development stack read from their environment, and the fault points of
// the failure drills: the one list that configuration, documentation and
// tests are checked against. The names are the product's interface (the
// README's configuration table); the constants are internal, so that the
// public packages stay as small as their documentation.
package settings

import (
	"github.com/oncerun/oncerun/internal/agents"
	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/internal/telemetry"
	"github.com/oncerun/oncerun/internal/temporalconn"
)

// Environment variables a worker reads.
const (
	EnvTemporalAddress   = "TEMPORAL_ADDRESS"
	EnvTemporalNamespace = "TEMPORAL_NAMESPACE"
	EnvTaskQueue         = "TEMPORAL_TASK_QUEUE"
	EnvDatabaseURL       = "DATABASE_URL"
	EnvMetricsAddr       = "METRICS_ADDR"
	EnvCreditThreshold   = "CREDIT_APPROVAL_THRESHOLD_CENTS"
	EnvOpenAIBaseURL     = "OPENAI_BASE_URL"
	EnvOpenAIAPIKey      = "OPENAI_API_KEY"
	EnvOpenAIModel       = "OPENAI_MODEL"
	// EnvOpenAIParallelToolCalls, false, turns the model's parallel tool
	// calls off: each turn's calls run in order (default true).
	EnvOpenAIParallelToolCalls = "OPENAI_PARALLEL_TOOL_CALLS"
	EnvLogLevel                = "LOG_LEVEL"
	// EnvLogActivityAttempts (true or false) logs each activity attempt.
	EnvLogActivityAttempts = "LOG_ACTIVITY_ATTEMPTS"
	EnvWatchdogInterval    = "WATCHDOG_INTERVAL"
	EnvWatchdogBatch       = "WATCHDOG_BATCH_SIZE"
	EnvWatchdogDutyCycle   = "WATCHDOG_DUTY_CYCLE"
	EnvExpiryPolicy        = "EXPIRY_POLICY"
	EnvAlertWebhookURL     = "ALERT_WEBHOOK_URL"
	// EnvApprovalDeadlineWarnings lists how long before an approval
	// deadline a waiting step is warned about: comma-separated durations
	// ("24h,1h"), or "none". Unset: activities.DefaultDeadlineWarnings.
	EnvApprovalDeadlineWarnings = "APPROVAL_DEADLINE_WARNINGS"
	EnvMCPConfig                = mcp.ConfigEnv
	// EnvAgentsConfig names the file of the deployment's sub-agents
	// (docs/agent-runs.md).
	EnvAgentsConfig = agents.Env
	// EnvApprovalsAddr is where the approvals service listens.
	EnvApprovalsAddr = "APPROVALS_ADDR"
	// EnvApprovalsTokensFile is the approvals service's tokens file; a
	// worker serves the service when it is set.
	EnvApprovalsTokensFile = "APPROVALS_TOKENS_FILE"
	// EnvApprovalsSecureCookies marks the inbox's cookies Secure.
	EnvApprovalsSecureCookies = "APPROVALS_SECURE_COOKIES"
	// EnvApprovalsDBTimeout bounds each approvals request's database work.
	EnvApprovalsDBTimeout = "APPROVALS_DB_TIMEOUT"
	// EnvApprovalsTokensInsecure loads a tokens file others may write.
	EnvApprovalsTokensInsecure = "APPROVALS_TOKENS_FILE_INSECURE"
	// EnvTraceTrustedNetworks lists the networks (comma-separated CIDRs
	// or addresses) whose callers' trace context the approvals service's
	// requests continue; everyone else's request starts a trace of its
	// own, linked to the caller's.
	EnvTraceTrustedNetworks = "ONCERUN_TRACE_TRUSTED_NETWORKS"
	// EnvDeploymentName puts a worker in a Temporal Worker Deployment
	// (Worker Versioning; docs/deploy.md, "Rolling deploys"): set, the
	// worker is versioned. The deployment commands of the CLI take it as
	// their default --name.
	EnvDeploymentName = "TEMPORAL_DEPLOYMENT_NAME"
	// EnvWorkerBuildID is a versioned worker's build ID. Default: the
	// first 8 hex characters of the executable's SHA-256 and the first 12
	// of the registry digest, joined by a dot.
	EnvWorkerBuildID = "TEMPORAL_WORKER_BUILD_ID"
	// EnvVersioningBehavior is AgentRun's versioning behaviour on a
	// versioned worker: auto-upgrade (the default) or pinned.
	EnvVersioningBehavior = "ONCERUN_VERSIONING_BEHAVIOR"
	// EnvLimitsFile is a limits file (spend.LoadFile): the spend caps set
	// when a process starts.
	EnvLimitsFile = "ONCERUN_LIMITS_FILE"
	// OpenTelemetry's standard variables, which configure tracing
	// (internal/telemetry): off unless an endpoint is set.
	EnvOTelEndpoint       = telemetry.EnvEndpoint
	EnvOTelTracesEndpoint = telemetry.EnvTracesEndpoint
	EnvOTelProtocol       = telemetry.EnvProtocol
	EnvOTelServiceName    = "OTEL_SERVICE_NAME"
	EnvOTelResource       = "OTEL_RESOURCE_ATTRIBUTES"
	EnvOTelSampler        = "OTEL_TRACES_SAMPLER"
	EnvOTelSDKDisabled    = telemetry.EnvSDKDisabled
)

// EnvNames lists every environment variable a worker reads, but the
// TEMPORAL_GRPC_META_ ones (temporalconn.EnvGRPCMetaPrefix), which are
// read by prefix.
var EnvNames = []string{
	EnvTemporalAddress, EnvTemporalNamespace, EnvTaskQueue, EnvDatabaseURL, EnvMetricsAddr,
	EnvCreditThreshold, EnvOpenAIBaseURL, EnvOpenAIAPIKey, EnvOpenAIModel, EnvOpenAIParallelToolCalls, EnvLogLevel,
	EnvWatchdogInterval, EnvWatchdogBatch, EnvWatchdogDutyCycle, EnvExpiryPolicy, EnvAlertWebhookURL, EnvCrashAfterCommit,
	EnvApprovalsAddr, EnvApprovalsTokensFile, EnvApprovalsSecureCookies, EnvApprovalsDBTimeout, EnvApprovalsTokensInsecure,
	EnvTraceTrustedNetworks,
	EnvPaymentsBaseURL, EnvPaymentsAPIKey, EnvPaymentsKeyLifetime, EnvSMTPAddr, EnvSMTPUsername, EnvSMTPPassword, EnvSMTPFrom,
	EnvReconcileInterval, EnvReconcileSettlement, EnvReconcileLookback, EnvReconcileAlertAge, EnvCrashAroundEffect,
	EnvTemporalConnectWait, EnvCrashAt, EnvStallAt, EnvLogActivityAttempts, EnvApprovalDeadlineWarnings, EnvMCPConfig,
	EnvLimitsFile, EnvOTelEndpoint, EnvOTelTracesEndpoint, EnvOTelProtocol, EnvOTelServiceName, EnvOTelResource,
	EnvOTelSampler, EnvOTelSDKDisabled, EnvAgentsConfig, EnvDeploymentName, EnvWorkerBuildID, EnvVersioningBehavior,
	EnvCutOffAfter,
}

func init() {
	// The temporal CLI's variables, but TEMPORAL_ADDRESS and
	// TEMPORAL_NAMESPACE, which are listed above.
	for _, name := range temporalconn.Names {
		if name != EnvTemporalAddress && name != EnvTemporalNamespace {
			EnvNames = append(EnvNames, name)
		}
	}
}

// Environment variables of the external tools.
const (
	// EnvPaymentsBaseURL is the payment provider refund_payment calls.
	EnvPaymentsBaseURL = "PAYMENTS_BASE_URL"
	// EnvPaymentsAPIKey is the provider's API key.
	EnvPaymentsAPIKey = "PAYMENTS_API_KEY"
	// EnvPaymentsKeyLifetime is how long the provider keeps idempotency
	// keys (default 24h).
	EnvPaymentsKeyLifetime = "PAYMENTS_KEY_LIFETIME"
	// EnvSMTPAddr is the SMTP server send_email uses, host:port.
	EnvSMTPAddr = "SMTP_ADDR"
	// EnvSMTPUsername and EnvSMTPPassword are sent with AUTH PLAIN when set.
	EnvSMTPUsername = "SMTP_USERNAME"
	EnvSMTPPassword = "SMTP_PASSWORD"
	// EnvSMTPFrom is the sender (default oncerun@localhost).
	EnvSMTPFrom = "SMTP_FROM"
)

// Environment variables of reconciliation.
const (
	// EnvReconcileInterval is how often the reconciliation pass runs.
	EnvReconcileInterval = "RECONCILE_INTERVAL"
	// EnvReconcileSettlement: only effects older than this are compared.
	EnvReconcileSettlement = "RECONCILE_SETTLEMENT"
	// EnvReconcileLookback is how far back a pass looks.
	EnvReconcileLookback = "RECONCILE_LOOKBACK"
	// EnvReconcileAlertAge: an error is logged when an open finding is
	// older.
	EnvReconcileAlertAge = "RECONCILE_ALERT_AGE"
)

// ReconcileEnvNames lists the reconciliation variables a worker reads.
var ReconcileEnvNames = []string{EnvReconcileInterval, EnvReconcileSettlement, EnvReconcileLookback, EnvReconcileAlertAge}

// EnvCutOffAfter is how long a worker may go without an answer from
// PostgreSQL or from Temporal before it counts itself cut off and gives
// its work back to the workers that reach both; "off" never does.
const EnvCutOffAfter = "ONCERUN_CUT_OFF_AFTER"

// EnvTemporalConnectWait is how long a worker or `oncerun serve` keeps
// trying to reach Temporal at start (a server that restarts, a deploy that
// starts both at once) before it gives up.
const EnvTemporalConnectWait = temporalconn.EnvConnectWait

// Fault injection: variables that make a worker kill (or stop) itself at a
// named point of a step, for failure drills, the chaos harness and the
// crash-point tests. Never set them in production; a worker that has one
// set logs a warning at start and another before it fires.
const (
	// EnvCrashAt lists crash points, comma-separated "<point>:<tool>"
	// entries (Point* constants), for example
	// "after-apply:refund_payment,workflow-task:issue_credit". The worker
	// kills itself (SIGKILL) the first time it reaches each.
	EnvCrashAt = "ONCERUN_CRASH_AT"
	// EnvStallAt lists points as EnvCrashAt does, at which the worker
	// stops itself (SIGSTOP) instead: whoever sends it SIGCONT later brings
	// back a stale worker whose lease has expired meanwhile.
	EnvStallAt = "ONCERUN_STALL_AT"
	// EnvCrashAfterCommit names a tool: the same as EnvCrashAt
	// "after-commit:<tool>".
	EnvCrashAfterCommit = "ONCERUN_CRASH_AFTER_COMMIT"
	// EnvCrashAroundEffect is "before:<tool>" or "after:<tool>": the same
	// as EnvCrashAt "after-lease:<tool>" or "after-apply:<tool>".
	EnvCrashAroundEffect = "ONCERUN_CRASH_AROUND_EFFECT"
)

// Fault points, in the order a step reaches them.
const (
	// PointBeforeClaim: a step of the tool has started, and nothing is
	// claimed or written yet.
	PointBeforeClaim = "before-claim"
	// PointAfterLease (external tools): the key's lease is committed and
	// nothing is sent.
	PointAfterLease = "after-lease"
	// PointDuringEffect: the effect is under way. For a natural or keyed
	// tool, its writes are made in the key's transaction and not committed;
	// for an external tool, the call's HTTP request has reached the
	// provider's host (its TCP segments acknowledged) and no answer was
	// read (a call that sends no HTTP request, such as send_email's SMTP,
	// never reaches this point).
	PointDuringEffect = "during-effect"
	// PointAfterApply (external tools): the provider answered that it
	// applied the effect, and the outcome is not recorded.
	PointAfterApply = "after-apply"
	// PointAfterCommit: this attempt recorded the step's outcome (it made
	// the effect, or settled an earlier attempt's unknown outcome through
	// the paired read) and Temporal has not heard of it. Never after a
	// replay of a completed key.
	PointAfterCommit = "after-commit"
	// PointWorkflowTask: the run's workflow task schedules a step of the
	// tool; the task never completes, and another worker replays the run.
	PointWorkflowTask = "workflow-task"
	// PointApprovalWait: the run has recorded the pending approval of a
	// step of the tool and begins to wait for it; another worker takes the
	// wait up from history.
	PointApprovalWait = "approval-wait"
	// PointChildStart (a sub-agent's tool, agent_<name>): the run's
	// workflow task starts the step's child run; the task never completes,
	// and another worker replays the run and starts the child.
	PointChildStart = "child-start"
	// PointChildStarted (a sub-agent's tool): Temporal has started the
	// step's child run and the run learns of it, in a workflow task that
	// never completes: the child runs on while its parent's worker is
	// dead, and another worker takes the parent up from its history.
	PointChildStarted = "child-started"
)

// Points lists the fault points.
var Points = []string{
	PointBeforeClaim, PointAfterLease, PointDuringEffect, PointAfterApply,
	PointAfterCommit, PointWorkflowTask, PointApprovalWait, PointChildStart, PointChildStarted,
}
