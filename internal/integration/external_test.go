package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/mail"
	"github.com/oncerun/oncerun/internal/mail/mailtest"
	"github.com/oncerun/oncerun/internal/payments"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/reconcile"
	sandbox "github.com/oncerun/oncerun/internal/sandbox/payments"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// externalWorld is a test's world with a sandbox payment provider and an
// SMTP server of its own, each keeping its own ledger.
type externalWorld struct {
	*env
	provider *sandbox.Running
	client   *payments.Client
	mailbox  *mailtest.Server
}

const mailDomain = "shop.example"

// setupExternal starts the provider (keys kept for retention; zero is the
// default) and the SMTP server, and registers refund_payment, get_refund
// and send_email beside the shop tools, issue_credit telling customers by
// e-mail.
func setupExternal(t testing.TB, retention time.Duration) *externalWorld {
	t.Helper()
	e := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	provider, err := sandbox.Start(ctx, sandbox.Config{Addr: "127.0.0.1:0", DataDir: t.TempDir(), KeyRetention: retention})
	require.NoError(t, err)
	t.Cleanup(func() { _ = provider.Close() })
	client, err := payments.New(payments.Config{BaseURL: provider.URL(), APIKey: sandbox.DefaultAPIKey, Timeout: 5 * time.Second})
	require.NoError(t, err)
	box, err := mailtest.Start(mailtest.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = box.Close() })
	mc, err := mail.New(mail.Config{Addr: box.Addr(), From: "support@" + mailDomain})
	require.NoError(t, err)
	e.tools = append(shop.Tools(shop.Config{NotifyTool: mail.SendEmail}),
		append(payments.Tools(client, payments.ToolsConfig{}), mail.Tool(mc, mailDomain))...)
	return &externalWorld{env: e, provider: provider, client: client, mailbox: box}
}

// pay seeds a payment of amount cents and returns its id.
func (w *externalWorld) pay(id string, amount int64) string {
	require.NoError(w.t, w.provider.SeedPayment(sandbox.Payment{ID: id, Amount: amount, Currency: "eur"}))
	return id
}

// refunds returns the provider's own ledger of refunds of payment.
func (w *externalWorld) refunds(payment string) []sandbox.Refund {
	var out []sandbox.Refund
	for _, r := range w.provider.Refunds() {
		if r.PaymentID == payment {
			out = append(out, r)
		}
	}
	return out
}

// startRefund starts a run whose one step refunds amount of payment.
func (w *externalWorld) startRefund(run, payment string, amount int) {
	w.t.Helper()
	args := fmt.Sprintf(`{"order_id":"1001","payment_id":%q,"amount_cents":%d,"currency":"EUR","reason":"damaged"}`, payment, amount)
	_, err := w.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run,
		Plan: []planner.Call{{Tool: payments.RefundPayment, Args: json.RawMessage(args)}}})
	require.NoError(w.t, err)
}

// reconcile runs a reconciliation pass with no settlement window.
func (w *externalWorld) reconcile() reconcile.Report {
	w.t.Helper()
	rep, err := reconcile.Pass(context.Background(), reconcile.Config{Pool: w.pool, Settlement: time.Nanosecond,
		Sources: []reconcile.Source{payments.ReconcileSource(w.client)}})
	require.NoError(w.t, err)
	return rep
}

func stepKey(t testing.TB, run string, step int64, tool string) string {
	k, err := keys.New("acme", run, step, tool)
	require.NoError(t, err)
	return k.String()
}

// Whatever the provider does to the first request, its own ledger shows one
// refund for the step, under the step's key, and reconciliation agrees. The
// delay outlasts the client's timeout: the attempt's outcome is unknown, the
// next one finds the request still in progress or applied.
func TestRefundIsMadeOnceUnderEveryFault(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"", sandbox.FaultDropAfterApply, sandbox.FaultErrorAfterApply, sandbox.FaultErrorBeforeApply, "delay=6s"} {
		t.Run(cmpName(mode), func(t *testing.T) {
			t.Parallel()
			w := setupExternal(t, 0)
			w.startWorker("w", worker.Options{})
			payment := w.pay("pay_"+w.id("f"), 10000)
			if mode != "" {
				require.NoError(t, w.provider.SetFault(mode, 1))
			}
			run := w.id("refund")
			w.startRefund(run, payment, 2500)

			st := w.result("acme", run)
			require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
			s := st.Steps[0]
			require.Equal(t, workflows.StepDone, s.State, s.Error)
			ledger := w.refunds(payment)
			require.Len(t, ledger, 1, "the provider's ledger holds one refund")
			assert.Equal(t, s.Key, ledger[0].IdempotencyKey)
			assert.EqualValues(t, 2500, ledger[0].Amount)
			rec, err := payments.RecordOf(s.Result)
			require.NoError(t, err)
			assert.Equal(t, ledger[0].ID, rec.ID, "our record names the provider's refund")
			assert.Equal(t, 1, w.count("idempotency_keys", "key = $1 AND state = 'completed'", s.Key))
			if mode != "" {
				assert.Equal(t, 1, w.count("idempotency_keys", "key = $1 AND attempts > 1", s.Key),
					"the first attempt's outcome was unknown or failed, and a later one settled it")
			}
			assert.Zero(t, w.reconcile().DriftCount, "reconciliation finds no drift")
		})
	}
}

func cmpName(mode string) string {
	if mode == "" {
		return "no_fault"
	}
	return mode
}

// A refund whose answer was lost while the provider cannot be read waits
// for a person: applied completes it with no second refund; not_applied
// sends it again under the same key, which the provider answers with the
// first refund.
func TestUnknownRefundWaitsForAPersonsResolve(t *testing.T) {
	t.Parallel()
	for _, outcome := range []workflows.Outcome{workflows.OutcomeApplied, workflows.OutcomeNotApplied} {
		t.Run(string(outcome), func(t *testing.T) {
			t.Parallel()
			w := setupExternal(t, 0)
			w.startWorker("w", worker.Options{})
			payment := w.pay("pay_"+w.id("u"), 10000)
			require.NoError(t, w.provider.SetFault(sandbox.FaultDropAfterApply, 1))
			require.NoError(t, w.provider.SetFault(sandbox.FaultReadUnavailable, 3))
			run := w.id("unknown")
			w.startRefund(run, payment, 2500)

			st := w.waitFor("acme", run, "needs_resolution", func(s workflows.Status) bool {
				return s.State == workflows.RunNeedsResolution
			})
			assert.Equal(t, workflows.StepNeedsResolution, st.Steps[0].State)
			s := st.Steps[0]
			require.NotNil(t, s.Resolution)
			assert.Contains(t, s.Resolution.Known, "paired read failed")
			assert.Equal(t, 1, w.count("resolutions", "run_id = $1 AND state = 'pending' AND key = $2", run, s.Key))
			ledger := w.refunds(payment)
			require.Len(t, ledger, 1, "the provider applied the first request")

			// What the CLI shows a person, without the approvals service.
			out, err := w.oncerun("approvals", "--tenant", "acme")
			require.NoError(t, err, out)
			assert.Contains(t, out, "steps whose outcome is unknown")
			assert.Contains(t, out, run)
			out, err = w.oncerun("status", "--tenant", "acme", "--run-id", run)
			require.NoError(t, err, out)
			assert.Contains(t, out, "needs_resolution")
			assert.Contains(t, out, "oncerun resolve")

			// The CLI without the approvals service records the answer as the
			// service does, then signals the run.
			args := []string{"resolve", "--tenant", "acme", "--run-id", run, "--step", "1",
				"--outcome", string(outcome), "--as", "olga", "--note", "checked the dashboard", "--json"}
			if outcome == workflows.OutcomeApplied {
				result, err := json.Marshal(ledger[0])
				require.NoError(t, err)
				args = append(args, "--result", string(result))
			}
			out, err = w.oncerun(args...)
			require.NoError(t, err, out)
			var answered approvals.ResolveResponse
			require.NoError(t, json.Unmarshal([]byte(out), &answered), out)
			assert.False(t, answered.Repeated)
			assert.Equal(t, []string{"olga", "cli", "local", string(outcome)}, []string{answered.Resolution.Resolver,
				answered.Resolution.Via, string(answered.Resolution.Role), string(answered.Resolution.Outcome)})
			st = w.result("acme", run)
			require.Equal(t, workflows.StepDone, st.Steps[0].State, st.Steps[0].Error)
			assert.Len(t, w.refunds(payment), 1, "no second refund")
			rec, err := payments.RecordOf(st.Steps[0].Result)
			require.NoError(t, err)
			assert.Equal(t, ledger[0].ID, rec.ID)
			assert.Equal(t, 1, w.count("resolutions", "run_id = $1 AND state = $2 AND resolved_by = 'olga'", run, string(outcome)))
			assert.Equal(t, 1, w.count("resolution_decisions", "run_id = $1", run), "one audit row")
			assert.Equal(t, 1, w.count("resolution_decisions", `run_id = $1 AND outcome = 'accepted' AND decision = $2
				AND resolver = 'olga' AND via = 'cli' AND role = 'local' AND remote_addr = 'local'`, run, string(outcome)))

			// Answering again, now that the run has applied the answer, is
			// refused before anything is recorded.
			out, err = w.oncerun("resolve", "--tenant", "acme", "--run-id", run, "--step", "1", "--outcome", "applied", "--as", "olga")
			require.Error(t, err, out)
			assert.Contains(t, err.Error(), "is done, not needs_resolution: it was resolved as "+string(outcome)+" by olga")
			assert.Equal(t, 1, w.count("resolution_decisions", "run_id = $1", run), "the refused answer wrote nothing")
			assert.Zero(t, w.reconcile().DriftCount)
		})
	}
}

// The provider forgets keys after a moment; the retry comes later, and is
// resolved by the paired read instead of being sent again.
func TestRetryAfterTheProvidersKeyRetentionDoesNotRefundAgain(t *testing.T) {
	t.Parallel()
	w := setupExternal(t, 200*time.Millisecond)
	w.startWorker("w", worker.Options{})
	payment := w.pay("pay_"+w.id("r"), 10000)
	require.NoError(t, w.provider.SetFault(sandbox.FaultDropAfterApply, 1))
	run := w.id("retention")
	w.startRefund(run, payment, 2500)

	st := w.result("acme", run)
	require.Equal(t, workflows.StepDone, st.Steps[0].State, st.Steps[0].Error)
	assert.Len(t, w.refunds(payment), 1, "the retry, past the provider's retention, refunded nothing more")
}

// A credit tells the customer by e-mail, once, with a Message-ID derived
// from the delivery's key.
func TestCreditEmailsTheCustomerOnce(t *testing.T) {
	t.Parallel()
	w := setupExternal(t, 0)
	w.startWorker("w", worker.Options{})
	run := w.id("credit-mail")
	_, err := w.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Plan: refundPlan("5000")})
	require.NoError(t, err)

	st := w.result("acme", run)
	require.Equal(t, workflows.RunCompleted, st.State)
	credit := st.Steps[2]
	require.Len(t, credit.FollowUps, 1)
	fu := credit.FollowUps[0]
	assert.Equal(t, activities.DeliveryDelivered, fu.State, fu.Error)
	assert.Equal(t, stepKey(t, run, 3, "send_email.1"), fu.Key)
	msgs := w.mailbox.Messages()
	require.Len(t, msgs, 1)
	assert.Equal(t, []string{"ada@example.com"}, msgs[0].To)
	assert.Equal(t, mail.MessageID(fu.Key, mailDomain), msgs[0].MessageID)
	assert.Contains(t, msgs[0].Body, "50.00 EUR")
	assert.Equal(t, 1, w.count("outbox", "run_id = $1 AND state = 'delivered'", run))
	assert.Zero(t, w.reconcile().DriftCount)
}

// An e-mail the server accepted but whose acceptance was lost is never sent
// again by itself: the step waits for a person, and says it is at-least-once.
func TestEmailWhoseAcceptanceWasLostIsNotResent(t *testing.T) {
	t.Parallel()
	w := setupExternal(t, 0)
	w.startWorker("w", worker.Options{})
	w.mailbox.DropAfterAccept(1)
	run := w.id("mail")
	_, err := w.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Plan: []planner.Call{
		{Tool: mail.SendEmail, Args: json.RawMessage(`{"to":"ada@example.com","subject":"Your refund","body":"It is on its way."}`)},
	}})
	require.NoError(t, err)

	st := w.waitFor("acme", run, "needs_resolution", func(s workflows.Status) bool {
		return s.State == workflows.RunNeedsResolution
	})
	assert.Equal(t, tools.GuaranteeAtLeastOnce, st.Steps[0].Guarantee)
	assert.Contains(t, st.Steps[0].Resolution.Known, "no paired read")
	time.Sleep(2 * time.Second) // a resend, if any, would come within Temporal's first retries
	assert.Len(t, w.mailbox.Messages(), 1, "the message arrived once and is not sent again")

	out, err := w.oncerun("resolve", "--tenant", "acme", "--run-id", run, "--step", "1", "--outcome", "applied",
		"--as", "olga", "--note", "the customer has it")
	require.NoError(t, err, out)
	st = w.result("acme", run)
	assert.Equal(t, workflows.StepDone, st.Steps[0].State)
	assert.Len(t, w.mailbox.Messages(), 1)
}

// Reconciliation finds drift in each direction against the provider's own
// ledger, and an undelivered follow-on message.
func TestReconciliationFindsInjectedDrift(t *testing.T) {
	t.Parallel()
	w := setupExternal(t, 0)
	ctx := context.Background()
	payment := w.pay("pay_"+w.id("d"), 10000)
	// The provider holds a refund under one of our keys that we never
	// recorded.
	ghost := stepKey(t, w.id("ghost"), 1, payments.RefundPayment)
	_, err := w.client.Refund(ctx, ghost, payments.RefundRequest{PaymentID: payment, Amount: 700, Currency: "eur"})
	require.NoError(t, err)
	// We recorded a refund the provider never made.
	phantom := stepKey(t, w.id("phantom"), 1, payments.RefundPayment)
	k, err := keys.Parse(phantom)
	require.NoError(t, err)
	_, err = w.pool.Exec(ctx, `
INSERT INTO idempotency_keys (tenant, key, run_id, step, tool, state, args_hash, result, completed_at, expires_at, created_at)
VALUES ('acme', $1, $2, 1, 'refund_payment', 'completed', repeat('a', 64),
        '{"id":"re_phantom","payment_id":"p","amount":900,"currency":"eur","status":"succeeded"}', now() - interval '1 minute', now() + interval '30 days', now() - interval '1 minute')`,
		phantom, k.RunID)
	require.NoError(t, err)
	// A follow-on message whose delivery is in doubt.
	_, err = w.pool.Exec(ctx, `
INSERT INTO outbox (tenant, run_id, step, seq, key, tool, args, args_hash, state, created_at)
VALUES ('acme', 'r-mail', 1, 1, 'v1/acme/r-mail/1/send_email.1', 'send_email', '{}', repeat('b', 64), 'unknown', now() - interval '1 minute')`)
	require.NoError(t, err)

	rep := w.reconcile()
	kinds := map[string]string{}
	for _, f := range rep.Findings {
		kinds[f.Key] = f.Kind
	}
	assert.Equal(t, reconcile.KindUnderRecorded, kinds[ghost])
	assert.Equal(t, reconcile.KindOverRecorded, kinds[phantom])
	assert.Equal(t, reconcile.KindUndelivered, kinds["v1/acme/r-mail/1/send_email.1"])
	assert.Equal(t, 3, rep.DriftCount)
	assert.EqualValues(t, 700+900, rep.DriftAmount["eur"])
}

// A worker killed around the effect (after the lease committed and before
// the request, or after the provider applied the refund and before it was
// recorded) leaves exactly one refund once another worker takes the step
// over.
func TestRefundOnceWhenTheWorkerIsKilledAroundTheEffect(t *testing.T) {
	t.Parallel()
	bin := buildOncerun(t)
	for _, point := range []string{"before", "after"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			w := setupExternal(t, 0)
			db := w.pool.Config().ConnString()
			payment := w.pay("pay_"+w.id("k"), 10000)
			logs := &syncBuffer{}
			cmd := exec.Command(bin, "worker")
			cmd.Env = append(localEnv(t, cmd.Environ()),
				"TEMPORAL_ADDRESS="+frontend, "TEMPORAL_NAMESPACE="+namespace, "TEMPORAL_TASK_QUEUE="+w.queue,
				"DATABASE_URL="+db, "METRICS_ADDR="+freeAddr(t),
				"PAYMENTS_BASE_URL="+w.provider.URL(), "PAYMENTS_API_KEY="+sandbox.DefaultAPIKey,
				"ONCERUN_CRASH_AROUND_EFFECT="+point+":refund_payment")
			cmd.Stdout, cmd.Stderr = logs, logs
			require.NoError(t, cmd.Start())
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() { _ = cmd.Process.Kill() })

			run := w.id("killed")
			w.startRefund(run, payment, 2500)
			select {
			case <-exited:
			case <-time.After(2 * time.Minute):
				t.Fatalf("the worker did not kill itself %s the effect:\n%s", point, logs.String())
			}
			assert.Contains(t, logs.String(), "fault injection: killing this worker "+point+" the effect")
			want := map[string]int{"before": 0, "after": 1}[point]
			assert.Len(t, w.refunds(payment), want, "what the provider holds when the worker dies")

			w.startWorker("w2", worker.Options{})
			st := w.result("acme", run)
			require.Equal(t, workflows.StepDone, st.Steps[0].State, st.Steps[0].Error)
			assert.Len(t, w.refunds(payment), 1, "exactly one refund")
			assert.Zero(t, w.reconcile().DriftCount)
		})
	}
}

// The way a person meets an unknown outcome: started through the API, the
// step is listed under needs_resolution with what was sent, and an
// approver's resolve through the API completes it, audited.
func TestUnknownRefundIsResolvedThroughTheAPI(t *testing.T) {
	t.Parallel()
	w := setupExternal(t, 0)
	w.startWorker("w", worker.Options{})
	a := w.serveApprovals(nil)
	payment := w.pay("pay_"+w.id("api"), 10000)
	require.NoError(t, w.provider.SetFault(sandbox.FaultDropAfterApply, 1))
	require.NoError(t, w.provider.SetFault(sandbox.FaultReadUnavailable, 3))
	run := w.id("api-unknown")
	args := fmt.Sprintf(`{"order_id":"1001","payment_id":%q,"amount_cents":2500,"currency":"EUR","reason":"damaged"}`, payment)
	r := a.do("POST", "/v1/runs", "ops", map[string]any{"run_id": run,
		"plan": []map[string]any{{"tool": payments.RefundPayment, "args": json.RawMessage(args)}}})
	require.Equal(t, 201, r.status, string(r.body))
	w.waitFor("acme", run, "needs_resolution", func(s workflows.Status) bool { return s.State == workflows.RunNeedsResolution })

	var list struct {
		Approvals []struct {
			RunID      string `json:"run_id"`
			Step       int64  `json:"step"`
			Kind       string `json:"kind"`
			Tool       string `json:"tool"`
			Problem    string `json:"problem"`
			Resolution struct {
				Key   string `json:"key"`
				Known string `json:"known"`
			} `json:"resolution"`
		} `json:"approvals"`
	}
	a.do("GET", "/v1/approvals?state=needs_resolution", "vic", nil).json(t, &list)
	require.Len(t, list.Approvals, 1)
	item := list.Approvals[0]
	assert.Equal(t, "outcome_unknown", item.Kind)
	assert.Equal(t, payments.RefundPayment, item.Tool)
	assert.Equal(t, stepKey(t, run, 1, payments.RefundPayment), item.Resolution.Key)
	assert.Contains(t, item.Resolution.Known, "paired read failed")

	path := fmt.Sprintf("/v1/runs/%s/steps/1/resolve", run)
	a.expectError(a.do("POST", path, "vic", map[string]any{"outcome": "applied"}), 403, "forbidden")
	ledger := w.refunds(payment)
	require.Len(t, ledger, 1)
	r = a.do("POST", path, "dana", map[string]any{"outcome": "applied", "result": ledger[0], "note": "in the provider's dashboard"})
	require.Equal(t, 202, r.status, string(r.body))

	st := w.result("acme", run)
	require.Equal(t, workflows.StepDone, st.Steps[0].State)
	assert.Equal(t, "dana", st.Steps[0].Resolution.Resolver)
	assert.Len(t, w.refunds(payment), 1)
	assert.Equal(t, 1, w.count("resolution_decisions", "run_id = $1 AND outcome = 'accepted' AND resolver = 'dana' AND decision = 'applied'", run))
	assert.Equal(t, 1, w.count("resolution_decisions", "run_id = $1 AND outcome = 'forbidden'", run))
	a.do("GET", "/v1/approvals?state=needs_resolution", "vic", nil).json(t, &list)
	assert.Empty(t, list.Approvals, "nothing left to resolve")
}
