package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"github.com/oncerun/oncerun/internal/mail"
	"github.com/oncerun/oncerun/internal/payments"
	sandbox "github.com/oncerun/oncerun/internal/sandbox/payments"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/temporalconn"
	"github.com/oncerun/oncerun/workflows"
)

// The demo's refund: the delivery charge of order 1001 back to its card,
// below the approval threshold.
const (
	demoPayment      = "pay_1001"
	demoRefundAmount = 1500
)

// providerFault asks the payment provider, if it is a sandbox, to apply the
// next refund and drop the connection without answering.
func (d *demo) providerFault(ctx context.Context) error {
	body, _ := json.Marshal(map[string]any{"mode": sandbox.FaultDropAfterApply, "count": 1})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(d.ext.Payments.BaseURL, "/")+"/v1/sandbox/faults", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+d.ext.Payments.APIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("set the provider's fault: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("set the provider's fault: %s (is PAYMENTS_BASE_URL a sandbox provider?)", resp.Status)
	}
	return nil
}

// verifyRefund checks the refund story from the provider's own ledger, the
// mailbox and reconciliation.
func (d *demo) verifyRefund(ctx context.Context, st workflows.Status, m map[string]float64) {
	var refund workflows.Step
	for _, s := range st.Steps {
		if s.Tool == payments.RefundPayment {
			refund = s
		}
	}
	d.check(refund.State == workflows.StepDone, "the refund step is done (%s)", refund.State)
	d.check(m["refund_payment/resolved"] == 1,
		"the refund's answer was lost, and the paired read found it applied (resolved %v)", m["refund_payment/resolved"])
	pc, err := payments.New(d.ext.Payments)
	var ledger []payments.Refund
	if err == nil {
		ledger, err = pc.FindByKey(ctx, refund.Key)
	}
	d.check(err == nil && len(ledger) == 1 && ledger[0].Amount == demoRefundAmount,
		"the provider's own ledger holds exactly one refund of %d cents under the step's key (%d found)", demoRefundAmount, len(ledger))
	if d.mailbox != nil {
		msgs := d.mailbox.Messages()
		id := ""
		if len(st.Steps) > 2 && len(st.Steps[2].FollowUps) == 1 {
			id = mail.MessageID(st.Steps[2].FollowUps[0].Key, "oncerun.localhost")
		}
		d.check(len(msgs) == 1 && msgs[0].MessageID == id && len(msgs[0].To) == 1 && msgs[0].To[0] == "ada@example.com",
			"the customer got exactly one e-mail about the credit, with the Message-ID derived from its key (%d in the mailbox)", len(msgs))
	}
	drift, out, err := d.reconcile(ctx)
	d.check(err == nil && drift == 0, "`oncerun reconcile` reports no drift (%s)", strings.TrimSpace(out))
}

// reconcile runs `oncerun reconcile --json` and returns the drift count it
// reports.
func (d *demo) reconcile(ctx context.Context) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.exe, "reconcile", "--json", "--settlement", "1ms")
	cmd.Env = append(temporalconn.LocalEnv(cmd.Environ(), d.dir),
		settings.EnvDatabaseURL+"="+d.dbURL,
		settings.EnvTemporalAddress+"="+d.temporal.Address(),
		settings.EnvTemporalNamespace+"="+d.temporal.Namespace(),
		settings.EnvPaymentsBaseURL+"="+d.ext.Payments.BaseURL,
		settings.EnvPaymentsAPIKey+"="+d.ext.Payments.APIKey,
	)
	out, err := cmd.Output()
	if err != nil {
		return -1, string(out), fmt.Errorf("oncerun reconcile: %w", err)
	}
	var rep struct {
		DriftCount *int `json:"drift_count"`
	}
	if err := json.Unmarshal(out, &rep); err != nil || rep.DriftCount == nil {
		return -1, string(out), fmt.Errorf("oncerun reconcile --json printed no drift_count")
	}
	return *rep.DriftCount, fmt.Sprintf("drift_count %d", *rep.DriftCount), nil
}
