package devstack

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/oncerun/oncerun/internal/mail/mailtest"
	"github.com/oncerun/oncerun/internal/sandbox/payments"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/worker"
)

// demoPayments are the payments of the demo shop's orders (see the orders
// table), which the sandbox provider starts with.
var demoPayments = []payments.Payment{
	{ID: "pay_1001", Amount: 25900, Currency: "eur"},
	{ID: "pay_1002", Amount: 4900, Currency: "eur"},
	{ID: "pay_1003", Amount: 8900, Currency: "eur"},
}

// providers are the external systems the dev stack runs in-process when
// none is configured: a sandbox payment provider and an SMTP server whose
// mailbox is kept in memory.
type providers struct {
	payments *payments.Running
	mail     *mailtest.Server
	// lines describe them for the banner; env are the variables that
	// point another terminal's oncerun at them (oncerun reconcile).
	lines []string
	env   []string
}

// startProviders starts a sandbox payment provider (its ledger in
// dataDir/sandbox-payments) unless ext names a provider, and an SMTP server
// unless ext names one, and points ext at them.
func startProviders(ctx context.Context, dataDir string, ext *worker.ExternalConfig) (*providers, error) {
	p := &providers{}
	if ext.Payments.BaseURL == "" {
		run, err := payments.Start(ctx, payments.Config{
			Addr: "127.0.0.1:0", DataDir: filepath.Join(dataDir, "sandbox-payments"), Payments: demoPayments,
		})
		if err != nil {
			return nil, fmt.Errorf("start the sandbox payment provider: %w", err)
		}
		p.payments = run
		ext.Payments.BaseURL, ext.Payments.APIKey = run.URL(), payments.DefaultAPIKey
		p.lines = append(p.lines, fmt.Sprintf("payments    %s (sandbox provider; ledger in %s; PAYMENTS_BASE_URL)",
			run.URL(), filepath.Join(dataDir, "sandbox-payments")))
		// The sandbox's key is its well-known default, no secret.
		p.env = append(p.env, settings.EnvPaymentsBaseURL+"="+run.URL(), settings.EnvPaymentsAPIKey+"="+payments.DefaultAPIKey)
	} else {
		p.lines = append(p.lines, fmt.Sprintf("payments    %s (PAYMENTS_BASE_URL)", untrusted.Redact(ext.Payments.BaseURL)))
	}
	if ext.SMTP.Addr == "" {
		srv, err := mailtest.Start(mailtest.Config{Addr: "127.0.0.1:0"})
		if err != nil {
			p.close()
			return nil, fmt.Errorf("start the local SMTP server: %w", err)
		}
		p.mail = srv
		ext.SMTP.Addr = srv.Addr()
		p.lines = append(p.lines, fmt.Sprintf("e-mail      smtp://%s (in-process server, mailbox in memory; SMTP_ADDR)", srv.Addr()))
	} else {
		p.lines = append(p.lines, fmt.Sprintf("e-mail      smtp://%s (SMTP_ADDR)", ext.SMTP.Addr))
	}
	return p, nil
}

func (p *providers) close() {
	if p.payments != nil {
		_ = p.payments.Close()
	}
	if p.mail != nil {
		_ = p.mail.Close()
	}
}
