package worker

import (
	"fmt"
	"strings"
	"time"

	"github.com/oncerun/oncerun/internal/mail"
	"github.com/oncerun/oncerun/internal/payments"
	"github.com/oncerun/oncerun/internal/reconcile"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
)

// ExternalConfig configures the tools whose effects leave the database.
type ExternalConfig struct {
	// Payments is the provider of refund_payment and get_refund. With no
	// BaseURL the tools are registered (plans may name them) but refuse
	// every call.
	Payments PaymentsConfig
	// PaymentsKeyLifetime is how long the provider keeps idempotency keys.
	// Default payments.DefaultKeyLifetime.
	PaymentsKeyLifetime time.Duration
	// SMTP is the server of send_email. With no Addr, send_email refuses
	// every call and issue_credit sends no e-mail.
	SMTP SMTPConfig
}

// ExternalFromEnv reads ExternalConfig from getenv.
func ExternalFromEnv(getenv func(string) string) (ExternalConfig, error) {
	ext := ExternalConfig{
		Payments: payments.Config{BaseURL: getenv(settings.EnvPaymentsBaseURL), APIKey: getenv(settings.EnvPaymentsAPIKey)},
		SMTP: mail.Config{Addr: getenv(settings.EnvSMTPAddr), Username: getenv(settings.EnvSMTPUsername),
			Password: getenv(settings.EnvSMTPPassword), From: getenv(settings.EnvSMTPFrom)},
	}
	if s := getenv(settings.EnvPaymentsKeyLifetime); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return ExternalConfig{}, fmt.Errorf("%s %q is not a positive duration such as 24h", settings.EnvPaymentsKeyLifetime, s)
		}
		ext.PaymentsKeyLifetime = d
	}
	if ext.Payments.BaseURL != "" && ext.Payments.APIKey == "" {
		return ExternalConfig{}, fmt.Errorf("%s is set but %s is empty", settings.EnvPaymentsBaseURL, settings.EnvPaymentsAPIKey)
	}
	return ext, nil
}

// externalTools builds the external tools of ext: refund_payment, get_refund
// and send_email.
func externalTools(shopCfg shop.Config, ext ExternalConfig) ([]tools.Tool, error) {
	var pc *payments.Client
	if ext.Payments.BaseURL != "" {
		c, err := payments.New(ext.Payments)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", settings.EnvPaymentsBaseURL, err)
		}
		pc = c
	}
	var mc *mail.Client
	if ext.SMTP.Addr != "" {
		c, err := mail.New(ext.SMTP)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", settings.EnvSMTPAddr, err)
		}
		mc = c
	}
	domain := "oncerun.localhost"
	if from := ext.SMTP.From; strings.Contains(from, "@") {
		domain = strings.TrimRight(from[strings.LastIndex(from, "@")+1:], ">")
	}
	ts := payments.Tools(pc, payments.ToolsConfig{ApprovalThresholdCents: shopCfg.CreditApprovalThresholdCents, KeyLifetime: ext.PaymentsKeyLifetime})
	return append(ts, mail.Tool(mc, domain)), nil
}

// ReconcileSources are the tools of ext whose effects reconciliation
// compares with a provider's ledger: refund_payment, when a provider is
// configured.
func ReconcileSources(ext ExternalConfig) ([]ReconcileSource, error) {
	if ext.Payments.BaseURL == "" {
		return nil, nil
	}
	c, err := payments.New(ext.Payments)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", settings.EnvPaymentsBaseURL, err)
	}
	return []reconcile.Source{payments.ReconcileSource(c)}, nil
}

// PaymentsConfig configures the payment provider's client of
// refund_payment and get_refund.
type PaymentsConfig = payments.Config

// SMTPConfig configures the SMTP client of send_email.
type SMTPConfig = mail.Config

// ReconcileSource is a provider's ledger the reconciler compares oncerun's
// records with.
type ReconcileSource = reconcile.Source
