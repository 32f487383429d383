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

	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/reconcile"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/internal/telemetry"
	"github.com/oncerun/oncerun/internal/temporalconn"
	"github.com/oncerun/oncerun/internal/untrusted"
)

// ConfigFromEnv builds a worker's configuration from getenv (os.Getenv in
// main). Logger is left for the caller; LOG_LEVEL is returned beside it.
func ConfigFromEnv(getenv func(string) string) (cfg Config, logLevel string, err error) {
	var threshold int64
	if s := getenv(settings.EnvCreditThreshold); s != "" {
		if threshold, err = strconv.ParseInt(s, 10, 64); err != nil {
			return Config{}, "", fmt.Errorf("%s %q is not an integer", settings.EnvCreditThreshold, s)
		}
	}
	wd, err := watchdogConfigFromEnv(getenv)
	if err != nil {
		return Config{}, "", err
	}
	ap, err := approvalsConfigFromEnv(getenv)
	if err != nil {
		return Config{}, "", err
	}
	ext, err := ExternalFromEnv(getenv)
	if err != nil {
		return Config{}, "", err
	}
	rc, err := reconcile.ConfigFromEnv(getenv)
	if err != nil {
		return Config{}, "", err
	}
	temporal, err := temporalconn.Load(getenv)
	if err != nil {
		return Config{}, "", err
	}
	var connectWait time.Duration
	if s := getenv(settings.EnvTemporalConnectWait); s != "" {
		if connectWait, err = time.ParseDuration(s); err != nil || connectWait <= 0 {
			return Config{}, "", fmt.Errorf("%s %q is not a positive duration such as 1m", settings.EnvTemporalConnectWait, s)
		}
	}
	warnings, err := deadlineWarningsFromEnv(getenv)
	if err != nil {
		return Config{}, "", err
	}
	parallel := true
	if s := getenv(settings.EnvOpenAIParallelToolCalls); s != "" {
		if parallel, err = strconv.ParseBool(s); err != nil {
			return Config{}, "", fmt.Errorf("%s %q is not true or false", settings.EnvOpenAIParallelToolCalls, s)
		}
	}
	versioning, err := versioningFromEnv(getenv)
	if err != nil {
		return Config{}, "", err
	}
	cutOff, err := cutOffFromEnv(getenv(settings.EnvCutOffAfter))
	if err != nil {
		return Config{}, "", err
	}
	var logAttempts bool
	if s := getenv(settings.EnvLogActivityAttempts); s != "" {
		if logAttempts, err = strconv.ParseBool(s); err != nil {
			return Config{}, "", fmt.Errorf("%s %q is not true or false", settings.EnvLogActivityAttempts, s)
		}
	}
	return Config{
		LogActivityAttempts: logAttempts,
		Approvals:           ap,
		External:            ext,
		Reconcile:           rc,
		Watchdog:            wd,
		faults: faultSpec{crashAt: getenv(settings.EnvCrashAt), stallAt: getenv(settings.EnvStallAt),
			crashAfterCommit: getenv(settings.EnvCrashAfterCommit), crashAroundEffect: getenv(settings.EnvCrashAroundEffect)},
		AlertWebhookURL:     getenv(settings.EnvAlertWebhookURL),
		TemporalAddress:     temporal.HostPort,
		Namespace:           temporal.Namespace,
		TemporalOptions:     temporal,
		TemporalConnectWait: connectWait,
		CutOffAfter:         cutOff,
		TaskQueue:           getenv(settings.EnvTaskQueue),
		Versioning:          versioning,
		DatabaseURL:         getenv(settings.EnvDatabaseURL),
		HTTPAddr:            getenv(settings.EnvMetricsAddr),
		Shop:                shop.Config{CreditApprovalThresholdCents: threshold},
		OpenAI: planner.OpenAIConfig{
			BaseURL:    getenv(settings.EnvOpenAIBaseURL),
			APIKey:     getenv(settings.EnvOpenAIAPIKey),
			Model:      getenv(settings.EnvOpenAIModel),
			Sequential: !parallel,
		},
		ApprovalDeadlineWarnings: warnings,
		MCPConfig:                getenv(settings.EnvMCPConfig),
		AgentsConfig:             getenv(settings.EnvAgentsConfig),
	}, getenv(settings.EnvLogLevel), nil
}

// cutOffFromEnv reads settings.EnvCutOffAfter: a duration of at least a
// second, or "off" (negative: never cut off).
func cutOffFromEnv(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	if strings.EqualFold(s, "off") {
		return -1, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("%s %q is neither a duration of at least 1s, such as 5s, nor off", settings.EnvCutOffAfter, s)
	}
	return d, nil
}

// deadlineWarningsFromEnv reads settings.EnvApprovalDeadlineWarnings: nil when it
// is unset (the default points), an empty list for "none".
func deadlineWarningsFromEnv(getenv func(string) string) ([]time.Duration, error) {
	s := strings.TrimSpace(getenv(settings.EnvApprovalDeadlineWarnings))
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
				settings.EnvApprovalDeadlineWarnings, s, item)
		}
		points = append(points, d)
	}
	return points, nil
}

// approvalsConfigFromEnv reads the approvals service's variables.
func approvalsConfigFromEnv(getenv func(string) string) (ApprovalsConfig, error) {
	c := ApprovalsConfig{Addr: getenv(settings.EnvApprovalsAddr), TokensFile: getenv(settings.EnvApprovalsTokensFile)}
	for name, dst := range map[string]*bool{settings.EnvApprovalsSecureCookies: &c.SecureCookies, settings.EnvApprovalsTokensInsecure: &c.AllowWritableTokensFile} {
		if s := getenv(name); s != "" {
			v, err := strconv.ParseBool(s)
			if err != nil {
				return ApprovalsConfig{}, fmt.Errorf("%s %q is not true or false", name, s)
			}
			*dst = v
		}
	}
	if s := getenv(settings.EnvApprovalsDBTimeout); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return ApprovalsConfig{}, fmt.Errorf("%s %q is not a positive duration such as 5s", settings.EnvApprovalsDBTimeout, s)
		}
		c.DBTimeout = d
	}
	nets, err := telemetry.ParseNetworks(getenv(settings.EnvTraceTrustedNetworks))
	if err != nil {
		return ApprovalsConfig{}, fmt.Errorf("%s: %w; give a comma-separated list (10.0.0.0/8,192.168.1.10)",
			settings.EnvTraceTrustedNetworks, err)
	}
	c.TraceTrustedNetworks = nets
	return c, nil
}

// NewLogger builds the process logger at level ("" means info): JSON lines,
// or a console format for people when console is set, on standard error.
// What it writes is escaped as the CLI's output is (untrusted.TerminalWriter):
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
		return nil, fmt.Errorf("%s: %w", settings.EnvLogLevel, err)
	}
	out := zapcore.Lock(zapcore.AddSync(untrusted.NewTerminalWriter(w)))
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
