package worker

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/oncerun/oncerun/internal/edge"
	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
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
	// EnvLimitsFile is a limits file (spend.LoadFile): the spend caps set
	// when a process starts.
	EnvLimitsFile = "ONCERUN_LIMITS_FILE"
)

// EnvNames lists every environment variable a worker reads, but the
// TEMPORAL_GRPC_META_ ones (temporalconn.EnvGRPCMetaPrefix), which are
// read by prefix.
var EnvNames = []string{
	EnvTemporalAddress, EnvTemporalNamespace, EnvTaskQueue, EnvDatabaseURL, EnvMetricsAddr,
	EnvCreditThreshold, EnvOpenAIBaseURL, EnvOpenAIAPIKey, EnvOpenAIModel, EnvOpenAIParallelToolCalls, EnvLogLevel,
	EnvWatchdogInterval, EnvWatchdogBatch, EnvWatchdogDutyCycle, EnvExpiryPolicy, EnvAlertWebhookURL, EnvCrashAfterCommit,
	EnvApprovalsAddr, EnvApprovalsTokensFile, EnvApprovalsSecureCookies, EnvApprovalsDBTimeout, EnvApprovalsTokensInsecure,
	EnvPaymentsBaseURL, EnvPaymentsAPIKey, EnvPaymentsKeyLifetime, EnvSMTPAddr, EnvSMTPUsername, EnvSMTPPassword, EnvSMTPFrom,
	EnvReconcileInterval, EnvReconcileSettlement, EnvReconcileLookback, EnvReconcileAlertAge, EnvCrashAroundEffect,
	EnvTemporalConnectWait, EnvCrashAt, EnvStallAt, EnvLogActivityAttempts, EnvApprovalDeadlineWarnings, EnvMCPConfig,
	EnvLimitsFile,
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

// ConfigFromEnv builds a worker's configuration from getenv (os.Getenv in
// main). Logger is left for the caller; LOG_LEVEL is returned beside it.
func ConfigFromEnv(getenv func(string) string) (cfg Config, logLevel string, err error) {
	var threshold int64
	if s := getenv(EnvCreditThreshold); s != "" {
		if threshold, err = strconv.ParseInt(s, 10, 64); err != nil {
			return Config{}, "", fmt.Errorf("%s %q is not an integer", EnvCreditThreshold, s)
		}
	}
	wd, err := WatchdogConfigFromEnv(getenv)
	if err != nil {
		return Config{}, "", err
	}
	ap, err := ApprovalsConfigFromEnv(getenv)
	if err != nil {
		return Config{}, "", err
	}
	ext, err := ExternalFromEnv(getenv)
	if err != nil {
		return Config{}, "", err
	}
	rc, err := ReconcileConfigFromEnv(getenv)
	if err != nil {
		return Config{}, "", err
	}
	temporal, err := temporalconn.Load(getenv)
	if err != nil {
		return Config{}, "", err
	}
	var connectWait time.Duration
	if s := getenv(EnvTemporalConnectWait); s != "" {
		if connectWait, err = time.ParseDuration(s); err != nil || connectWait <= 0 {
			return Config{}, "", fmt.Errorf("%s %q is not a positive duration such as 1m", EnvTemporalConnectWait, s)
		}
	}
	warnings, err := deadlineWarningsFromEnv(getenv)
	if err != nil {
		return Config{}, "", err
	}
	parallel := true
	if s := getenv(EnvOpenAIParallelToolCalls); s != "" {
		if parallel, err = strconv.ParseBool(s); err != nil {
			return Config{}, "", fmt.Errorf("%s %q is not true or false", EnvOpenAIParallelToolCalls, s)
		}
	}
	var logAttempts bool
	if s := getenv(EnvLogActivityAttempts); s != "" {
		if logAttempts, err = strconv.ParseBool(s); err != nil {
			return Config{}, "", fmt.Errorf("%s %q is not true or false", EnvLogActivityAttempts, s)
		}
	}
	return Config{
		LogActivityAttempts: logAttempts,
		Approvals:           ap,
		External:            ext,
		Reconcile:           rc,
		Watchdog:            wd,
		CrashAt:             getenv(EnvCrashAt),
		StallAt:             getenv(EnvStallAt),
		CrashAfterCommit:    getenv(EnvCrashAfterCommit),
		CrashAroundEffect:   getenv(EnvCrashAroundEffect),
		AlertWebhookURL:     getenv(EnvAlertWebhookURL),
		TemporalAddress:     temporal.HostPort,
		Namespace:           temporal.Namespace,
		TemporalOptions:     temporal,
		TemporalConnectWait: connectWait,
		TaskQueue:           getenv(EnvTaskQueue),
		DatabaseURL:         getenv(EnvDatabaseURL),
		HTTPAddr:            getenv(EnvMetricsAddr),
		Shop:                shop.Config{CreditApprovalThresholdCents: threshold},
		OpenAI: planner.OpenAIConfig{
			BaseURL:    getenv(EnvOpenAIBaseURL),
			APIKey:     getenv(EnvOpenAIAPIKey),
			Model:      getenv(EnvOpenAIModel),
			Sequential: !parallel,
		},
		ApprovalDeadlineWarnings: warnings,
		MCPConfig:                getenv(EnvMCPConfig),
	}, getenv(EnvLogLevel), nil
}

// deadlineWarningsFromEnv reads EnvApprovalDeadlineWarnings: nil when it
// is unset (the default points), an empty list for "none".
func deadlineWarningsFromEnv(getenv func(string) string) ([]time.Duration, error) {
	s := strings.TrimSpace(getenv(EnvApprovalDeadlineWarnings))
	switch {
	case s == "":
		return nil, nil
	case strings.EqualFold(s, "none"):
		return []time.Duration{}, nil
	}
	var points []time.Duration
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		d, err := time.ParseDuration(item)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%s %q: %q is not a positive duration such as 24h; give a comma-separated list (24h,1h) or none",
				EnvApprovalDeadlineWarnings, s, item)
		}
		points = append(points, d)
	}
	return points, nil
}

// ApprovalsConfigFromEnv reads the approvals service's variables.
func ApprovalsConfigFromEnv(getenv func(string) string) (ApprovalsConfig, error) {
	c := ApprovalsConfig{Addr: getenv(EnvApprovalsAddr), TokensFile: getenv(EnvApprovalsTokensFile)}
	for name, dst := range map[string]*bool{EnvApprovalsSecureCookies: &c.SecureCookies, EnvApprovalsTokensInsecure: &c.AllowWritableTokensFile} {
		if s := getenv(name); s != "" {
			v, err := strconv.ParseBool(s)
			if err != nil {
				return ApprovalsConfig{}, fmt.Errorf("%s %q is not true or false", name, s)
			}
			*dst = v
		}
	}
	if s := getenv(EnvApprovalsDBTimeout); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return ApprovalsConfig{}, fmt.Errorf("%s %q is not a positive duration such as 5s", EnvApprovalsDBTimeout, s)
		}
		c.DBTimeout = d
	}
	return c, nil
}

// NewLogger builds the process logger at level ("" means info): JSON lines,
// or a console format for people when console is set, on standard error.
// What it writes is escaped as the CLI's output is (edge.TerminalWriter):
// a run id, a path or a message from a planner cannot move the cursor of
// the terminal that shows the log, and JSON lines stay JSON.
func NewLogger(level string, console bool) (*zap.Logger, error) {
	return newLogger(level, console, os.Stderr)
}

func newLogger(level string, console bool, w io.Writer) (*zap.Logger, error) {
	if level == "" {
		level = "info"
	}
	lvl, err := zap.ParseAtomicLevel(level)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvLogLevel, err)
	}
	out := zapcore.Lock(zapcore.AddSync(edge.NewTerminalWriter(w)))
	if console {
		enc := zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
		return zap.New(zapcore.NewCore(enc, out, lvl), zap.AddCaller(), zap.ErrorOutput(out)), nil
	}
	// As zap's production configuration: JSON, stack traces from errors on,
	// and at most 100 lines a second of one message after its first 100.
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	core := zapcore.NewSamplerWithOptions(zapcore.NewCore(enc, out, lvl), time.Second, 100, 100)
	return zap.New(core, zap.AddCaller(), zap.AddStacktrace(zapcore.ErrorLevel), zap.ErrorOutput(out)), nil
}
