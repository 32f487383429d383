package devstack

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/approvals/inbox"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/cli"
	"github.com/oncerun/oncerun/internal/devserver"
	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/mail/mailtest"
	"github.com/oncerun/oncerun/internal/payments"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/internal/sandbox/desk"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/internal/telemetry"
	"github.com/oncerun/oncerun/internal/temporalconn"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/migrations"
	"github.com/oncerun/oncerun/worker"
	"github.com/oncerun/oncerun/workflows"
)

// demoDatabase is the database the demo recreates on the DATABASE_URL
// server, so that every demo starts from the same state and its tables can
// be read afterwards.
const demoDatabase = "oncerun_demo"

const (
	demoTenant = "acme"
	demoRun    = "refund-1001"
)

var demoPlan = []planner.Call{
	{Tool: shop.ToolLookupOrder, Args: json.RawMessage(`{"order_id":"1001"}`)},
	{Tool: shop.ToolAddOrderNote, Args: json.RawMessage(`{"order_id":"1001","text":"Parcel arrived damaged; customer asks for a refund."}`)},
	{Tool: shop.ToolIssueCredit, Args: json.RawMessage(`{"order_id":"1001","reason":"damaged_in_transit","amount_cents":25900,"currency":"EUR"}`)},
	{Tool: payments.RefundPayment, Args: json.RawMessage(`{"order_id":"1001","payment_id":"` + demoPayment + `","amount_cents":` +
		strconv.Itoa(demoRefundAmount) + `,"currency":"EUR","reason":"delivery charge of a damaged parcel"}`)},
	{Tool: deskTicketTool, Args: json.RawMessage(`{"order_id":"1001","subject":"Parcel arrived damaged",` +
		`"body":"Credit of 259.00 EUR granted and the delivery charge refunded."}`)},
}

func newDemoCmd(env cli.Env, getenv func(string) string) *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Tell oncerun's story end to end and check that nothing was applied twice",
		Long: `Run a support agent for order 1001 on an embedded Temporal server and a worker
child process: the run looks the order up, adds a note, proposes a credit
that needs approval and refunds the delivery charge at the payment provider;
the worker is killed with SIGKILL while the run waits; a new worker takes
over; the credit is approved, committed and e-mailed to the customer; the
provider applies the refund and drops its answer, and the paired read finds
it. The demo then reads the tables, the metrics, the provider's ledger and
the mailbox, runs "oncerun reconcile", and exits 0 only if every check holds.

Unless PAYMENTS_BASE_URL and SMTP_ADDR are set, it starts a sandbox payment
provider and an SMTP server in-process.

The run is started and the credit approved through the approvals service's
API, as an operator and an approver would. With --wait-for-approval the demo
prints the inbox's address and an approver's token and waits for you to
approve the credit in a browser.

It recreates the database "oncerun_demo" on the DATABASE_URL server.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find this program to run its worker: %w", err)
			}
			ext, err := worker.ExternalFromEnv(getenv)
			if err != nil {
				return err
			}
			d := &demo{out: cmd.OutOrStdout(), exe: exe, serverURL: cmp.Or(env.DatabaseURL, worker.DefaultDatabaseURL), wait: wait, ext: ext}
			// With OTEL_EXPORTER_OTLP_ENDPOINT set, the demo's approvals
			// service and its workers (which inherit the variables) trace
			// the run, and the demo says which trace is the run's.
			tracing, err := telemetry.Start(cmd.Context(), getenv, "oncerun-demo")
			if err != nil {
				return err
			}
			defer func() {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), 5*time.Second)
				defer cancel()
				_ = tracing.Shutdown(sctx)
			}()
			return d.run(cmd.Context())
		},
	}
	cmd.Flags().BoolVar(&wait, "wait-for-approval", false, "wait for a person to approve the credit in the inbox")
	return cmd
}

type demo struct {
	out       io.Writer
	exe       string
	serverURL string
	dir       string
	dbURL     string
	temporal  *devserver.Server
	tc        client.Client
	pool      *pgxpool.Pool
	children  []*child
	failed    int
	wait      bool
	// The approvals service, served by the demo itself, and the tokens of
	// its operator and its approver.
	inboxURL string
	operator *approvals.Client
	approver *approvals.Client
	apToken  string
	apStop   context.CancelFunc
	apDone   chan error
	// temporalRunID is the Temporal run ID of the demo's run.
	temporalRunID string
	// ext names the payment provider and the SMTP server: the environment's,
	// or the sandbox and the in-process server the demo starts.
	ext       worker.ExternalConfig
	providers *providers
	mailbox   *mailtest.Server
	// desk is the sandbox support desk, an MCP server; mcpConfig the file
	// that points the workers at it.
	desk      *desk.Running
	mcpConfig string
}

func (d *demo) say(format string, args ...any) { fmt.Fprintf(d.out, format+"\n", args...) }

func (d *demo) check(ok bool, format string, args ...any) {
	mark := "ok  "
	if !ok {
		mark = "FAIL"
		d.failed++
	}
	fmt.Fprintf(d.out, "  %s %s\n", mark, fmt.Sprintf(format, args...))
}

func (d *demo) run(ctx context.Context) (err error) {
	d.say("oncerun demo: a support agent refunds a damaged order, workers die mid-run, and nothing happens twice.\n")
	if d.dir, err = os.MkdirTemp("", "oncerun-demo-"); err != nil {
		return err
	}
	defer func() {
		if err == nil {
			_ = os.RemoveAll(d.dir)
		} else {
			d.say("\nThe workers' logs are in %s.", d.dir)
		}
	}()
	if err := d.setUp(ctx); err != nil {
		return err
	}
	defer d.tearDown()

	first, err := d.startWorker(ctx, "3", "first", "")
	if err != nil {
		return err
	}
	rc := &runs.Client{Temporal: d.tc, Pool: d.pool}
	sctx, span := telemetry.Tracer().Start(ctx, "oncerun.demo start")
	res, code, err := d.operator.Start(sctx, demoStart())
	span.End()
	if err != nil {
		return err
	}
	d.temporalRunID = res.TemporalRunID
	d.say("\n4. ops@acme started run %q of tenant %q through the API (POST /v1/runs → %d): look order 1001 up, note it, credit 259.00 EUR, refund the 15.00 EUR delivery charge, open a ticket at the support desk (an MCP tool).",
		res.RunID, res.Tenant, code)
	if telemetry.On() {
		d.say("   The run's trace is %s, at OTEL_EXPORTER_OTLP_ENDPOINT.", span.SpanContext().TraceID())
	}
	seen := map[int64]workflows.StepState{}
	st, err := d.follow(ctx, rc, func(s workflows.Status) bool { return s.State == workflows.RunWaitingForApproval }, seen)
	if err != nil {
		return err
	}
	credit := st.Steps[2]
	d.say("   The run pauses: step 3 (%s) needs a human, because %s.", credit.Tool, credit.Approval.Reason)

	if err := first.kill(); err != nil {
		return err
	}
	d.say("\n5. Killed the first worker (pid %d) with SIGKILL while the run waits for approval.", first.pid())
	second, err := d.startWorker(ctx, "6", "second", shop.ToolIssueCredit)
	if err != nil {
		return err
	}
	d.say("   It will kill itself right after the credit commits, before Temporal hears of it (%s=%s).",
		settings.EnvCrashAfterCommit, shop.ToolIssueCredit)
	// The first query after a worker change may wait out the dead worker's
	// sticky queue; follow retries until the run answers.
	if _, err := d.follow(ctx, rc, func(workflows.Status) bool { return true }, seen); err != nil {
		return err
	}
	if err := d.providerFault(ctx); err != nil {
		return err
	}
	d.say("   The payment provider will apply the next refund and drop the connection without answering.")
	if err := d.approve(ctx); err != nil {
		return err
	}
	select {
	case <-second.done:
	case <-time.After(time.Minute):
		return errors.New("the second worker did not crash after the credit")
	}
	d.say("\n8. The second worker (pid %d) committed the credit and died: Temporal never heard that step 3 finished.", second.pid())
	third, err := d.startWorker(ctx, "9", "third", "")
	if err != nil {
		return err
	}
	d.say("   Temporal retries step 3 once the dead attempt misses its heartbeats (10 s); then step 4 refunds, its answer is lost, and the paired read asks the provider…")
	if st, err = d.follow(ctx, rc, func(s workflows.Status) bool {
		return s.State == workflows.RunCompleted || s.State == workflows.RunFailed
	}, seen); err != nil {
		return err
	}
	d.say("   The run is %s: %s", st.State, st.Message)

	d.say("\n10. What happened, read from the tables and the metrics:")
	d.verify(ctx, rc, st, third)
	if d.failed > 0 {
		return fmt.Errorf("%d check(s) failed", d.failed)
	}
	d.say("\nEvery check holds. The demo's tables stay in database %q for you to read.", demoDatabase)
	return nil
}

func demoStart() approvals.StartRequest {
	return approvals.StartRequest{RunID: demoRun, Goal: "Refund the damaged parcel of order 1001", Plan: demoPlan}
}

// approve has dana@acme approve the credit through the API, or, with
// --wait-for-approval, waits for a person to do it in the inbox.
func (d *demo) approve(ctx context.Context) error {
	if d.wait {
		d.say("\n7. Waiting for you: open %s, sign in with dana@acme's token\n     %s\n   and approve step 3. (Ctrl-C gives up.)",
			d.inboxURL, d.apToken)
		// The decision is read from the tables, not from the run: the
		// worker that applies it dies right after the credit commits, and
		// a dead worker answers no query.
		for {
			l, err := approvalstore.Lookup(ctx, d.pool, demoTenant, demoRun, 3)
			if err != nil && !errors.Is(err, approvalstore.ErrNotFound) {
				return err
			}
			if rec := l.Record; rec != nil {
				d.say("   %s decided step 3: %s.", rec.Approver, rec.Decision)
				if rec.Decision != approvalstore.DecisionApprove {
					return fmt.Errorf("step 3 was not approved (%s); the demo needs the credit approved", rec.Decision)
				}
				return nil
			}
			if err == nil && l.State != approvalstore.StatePending {
				// Its deadline came first.
				return fmt.Errorf("step 3 was not approved (%s); the demo needs the credit approved", l.State)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	hash, err := d.approver.StepHash(ctx, demoRun, 3)
	if err != nil {
		return err
	}
	res, code, err := d.approver.Decide(ctx, demoRun, 3, workflows.DecisionApprove,
		approvals.DecideRequest{ArgsHash: hash, Comment: "photos confirm the damage"})
	if err != nil {
		return err
	}
	d.say("\n7. dana@acme approved step 3 through the API (args hash %s…; POST .../steps/3/approve → %d).",
		res.Decision.ArgsHash[:12], code)
	return nil
}

func (d *demo) setUp(ctx context.Context) error {
	url, err := recreateDatabase(ctx, d.serverURL, demoDatabase)
	if err != nil {
		return err
	}
	d.dbURL = url
	d.say("1. Recreated database %q on %s.", demoDatabase, untrusted.Redact(d.serverURL))
	if d.providers, err = startProviders(ctx, d.dir, &d.ext); err != nil {
		return err
	}
	d.mailbox = d.providers.mail
	for _, line := range d.providers.lines {
		d.say("   %s", line)
	}
	if err := d.startDesk(ctx); err != nil {
		return err
	}
	// A free port for the frontend may still have a service port taken at
	// one of the fixed offsets: try a few.
	for attempt := 0; ; attempt++ {
		port, err := devserver.FreePort("127.0.0.1")
		if err != nil {
			return err
		}
		d.temporal, err = devserver.Start(devserver.Config{DataDir: filepath.Join(d.dir, "temporal"), Port: port})
		if err == nil {
			break
		}
		if !errors.Is(err, devserver.ErrPortInUse) || attempt == 10 {
			return err
		}
	}
	d.say("2. Started an embedded Temporal server on %s (Temporal's own server code, SQLite).", d.temporal.Address())
	ics, err := telemetry.TemporalInterceptors()
	if err != nil {
		return err
	}
	if d.tc, err = client.DialContext(ctx, client.Options{HostPort: d.temporal.Address(), Namespace: d.temporal.Namespace(),
		Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)), Interceptors: ics}); err != nil {
		return fmt.Errorf("connect to the embedded Temporal server: %w", err)
	}
	if d.pool, err = worker.NewPool(ctx, d.dbURL); err != nil {
		return err
	}
	return d.serveApprovals(ctx)
}

// demoTracing traces the demo's approvals service. The demo is its own
// operator, on this machine: its request that starts the run, from the
// loopback, is the root of the run's trace.
var demoTracing = telemetry.ServerConfig{Operation: "approvals",
	Trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}

// serveApprovals serves the approvals service from the demo process, with
// a tokens file of two tokens: ops@acme (operator) and dana@acme
// (approver).
func (d *demo) serveApprovals(ctx context.Context) error {
	tokensFile := filepath.Join(d.dir, "tokens.json")
	tokens := map[string]string{}
	for _, id := range []approvals.Identity{
		{Name: "ops@acme", Tenant: demoTenant, Role: approvals.RoleOperator},
		{Name: "dana@acme", Tenant: demoTenant, Role: approvals.RoleApprover},
	} {
		tok, entry, err := approvals.NewToken(id)
		if err != nil {
			return err
		}
		if err := approvals.AppendToken(tokensFile, entry); err != nil {
			return err
		}
		tokens[id.Name] = tok
	}
	// The migrations run in the workers; the service needs them first.
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	_, err = migrations.Migrate(ctx, conn.Conn())
	conn.Release()
	if err != nil {
		return err
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	// The service checks the plan against the workers' registry, the
	// desk's MCP tools included.
	wcfg, closeMCP, err := worker.WithMCP(ctx, worker.Config{MCPConfig: d.mcpConfig})
	if err != nil {
		return err
	}
	_ = closeMCP()
	reg, err := worker.Registry(wcfg)
	if err != nil {
		return err
	}
	src, err := approvals.OpenTokenFile(tokensFile, approvals.TokenFileConfig{})
	if err != nil {
		return err
	}
	srv, err := approvals.New(approvals.Config{Runs: &runs.Client{Temporal: d.tc, Pool: d.pool}, Pool: d.pool, Tokens: src, Tools: reg})
	if err != nil {
		return err
	}
	ib, err := inbox.New(inbox.Config{API: srv})
	if err != nil {
		return err
	}
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	d.apStop, d.apDone = stop, make(chan error, 1)
	listening := make(chan string, 1)
	go func() {
		d.apDone <- approvals.ListenAndServe(sctx, addr, telemetry.Handler(ib.Handler(), demoTracing), nil, func(a net.Addr) { listening <- a.String() })
	}()
	select {
	case a := <-listening:
		d.inboxURL = "http://" + a + "/"
	case err := <-d.apDone:
		return err
	}
	// The operator's requests carry the demo's trace context.
	d.operator = &approvals.Client{BaseURL: d.inboxURL, Token: tokens["ops@acme"],
		HTTP: &http.Client{Timeout: 30 * time.Second, Transport: telemetry.Transport(nil)}}
	d.approver = &approvals.Client{BaseURL: d.inboxURL, Token: tokens["dana@acme"]}
	d.apToken = tokens["dana@acme"]
	d.say("   It serves the approvals service (API and inbox) on %s, with tokens for ops@acme (operator) and dana@acme (approver).", d.inboxURL)
	return nil
}

func (d *demo) tearDown() {
	if d.providers != nil {
		defer d.providers.close()
	}
	if d.apStop != nil {
		d.apStop()
		<-d.apDone
	}
	for _, c := range d.children {
		c.stop()
	}
	if d.pool != nil {
		d.pool.Close()
	}
	if d.tc != nil {
		d.tc.Close()
	}
	if d.temporal != nil {
		_ = d.temporal.Stop()
	}
}

// follow polls the run's status, telling each step's new state, until done
// holds.
func (d *demo) follow(ctx context.Context, rc *runs.Client, done func(workflows.Status) bool, seen map[int64]workflows.StepState) (workflows.Status, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, err := rc.Status(ctx, demoTenant, demoRun)
		if err == nil {
			for _, s := range st.Steps {
				if seen[s.Step] == s.State {
					continue
				}
				seen[s.Step] = s.State
				line := fmt.Sprintf("   step %d %-15s %s", s.Step, s.Tool, s.State)
				if s.Summary != "" {
					line += "  " + s.Summary
				}
				d.say("%s", line)
			}
			if done(st) {
				return st, nil
			}
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("run %s did not get there in 2 minutes (last error: %v)", demoRun, err)
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (d *demo) verify(ctx context.Context, rc *runs.Client, st workflows.Status, last *child) {
	states := make([]string, len(st.Steps))
	for i, s := range st.Steps {
		states[i] = string(s.State)
	}
	d.check(st.State == workflows.RunCompleted && strings.Join(states, ",") == "done,done,done,done,done",
		"the run completed with every step done (%s: %s)", st.State, strings.Join(states, ", "))
	d.check(len(st.Steps) == 5 && st.Steps[2].Replayed,
		"step 3's result came from the dedup store: the retry replayed the committed credit")
	d.check(d.count(ctx, `SELECT count(*) FROM credits WHERE tenant = $1 AND order_id = '1001'`, demoTenant) == 1,
		"exactly one credit exists for order 1001")
	d.check(d.count(ctx, `SELECT count(*) FROM order_notes WHERE tenant = $1 AND order_id = '1001'`, demoTenant) == 1,
		"exactly one note exists on order 1001")
	d.check(d.claimedOnce(ctx, 2, 3) == 2, "the note's and the credit's keys are completed, each claimed once")
	m, err := last.metrics()
	d.check(err == nil, "read the third worker's /metrics")
	d.check(m["issue_credit/replayed"] == 1 && m["issue_credit/executed"] == 0,
		"the third worker replayed the credit and did not execute it (replayed %v, executed %v)",
		m["issue_credit/replayed"], m["issue_credit/executed"])
	d.check(m["lookup_order/executed"] == 0 && m["add_order_note/executed"] == 0,
		"it re-executed none of the steps done before the crashes (Temporal replayed them from history)")
	step3, err := approvalstore.Lookup(ctx, d.pool, demoTenant, demoRun, 3)
	rec := step3.Record
	d.check(err == nil && rec != nil && rec.Decision == approvalstore.DecisionApprove && rec.Approver == "dana@acme",
		"the approval is in the audit table as dana@acme's decision of record (one per step)")
	d.verifyRefund(ctx, st, m)
	d.verifyTicket(st)
	again, code, err := d.operator.Start(ctx, demoStart())
	d.check(err == nil && code == http.StatusOK && again.Existing && again.TemporalRunID == d.temporalRunID,
		"starting run %q again through the API returns the same run (HTTP %d)", demoRun, code)
}

// claimedOnce counts the steps' keys (the steps' own, not their
// follow-on messages') that the demo run completed on its first claim.
func (d *demo) claimedOnce(ctx context.Context, steps ...int64) int {
	ks, err := idempotency.KeysOfRun(ctx, d.pool, demoTenant, demoRun)
	if err != nil {
		d.say("  (query failed: %v)", err)
		return -1
	}
	n := 0
	for _, k := range ks {
		if slices.Contains(steps, k.Step) && k.Tool != "send_email.1" && k.State == idempotency.StateCompleted && k.Attempts == 1 {
			n++
		}
	}
	return n
}

func (d *demo) count(ctx context.Context, sql string, args ...any) int {
	var n int
	if err := d.pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		d.say("  (query failed: %v)", err)
		return -1
	}
	return n
}

// child is a worker process the demo started.
type child struct {
	cmd     *exec.Cmd
	httpURL string
	done    chan struct{} // closed when the process has ended
	once    sync.Once
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) kill() error {
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill worker %d: %w", c.pid(), err)
	}
	<-c.done
	return nil
}

// stop ends the worker: SIGTERM, then SIGKILL after 40 s. A worker that has
// exited already is left alone.
func (c *child) stop() {
	c.once.Do(func() {
		select {
		case <-c.done:
			return
		default:
		}
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(40 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
}

// metrics returns the worker's oncerun_tool_calls_total by "tool/outcome".
func (c *child) metrics() (map[string]float64, error) {
	resp, err := http.Get(c.httpURL + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	out := map[string]float64{}
	if f := families["oncerun_tool_calls_total"]; f != nil {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out[labels["tool"]+"/"+labels["outcome"]] = m.GetCounter().GetValue()
		}
	}
	return out, nil
}

// startWorker starts `oncerun worker` as a child process on the demo's
// Temporal server and database and waits until it is healthy.
func (d *demo) startWorker(ctx context.Context, label, name, crashAfter string) (*child, error) {
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(d.dir, name+"-worker.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(d.exe, "worker")
	cmd.Env = append(temporalconn.LocalEnv(os.Environ(), d.dir),
		settings.EnvTemporalAddress+"="+d.temporal.Address(),
		settings.EnvTemporalNamespace+"="+d.temporal.Namespace(),
		settings.EnvTaskQueue+"="+workflows.DefaultTaskQueue,
		settings.EnvDatabaseURL+"="+d.dbURL,
		settings.EnvMetricsAddr+"="+httpAddr,
		settings.EnvLogLevel+"=warn",
		settings.EnvCreditThreshold+"="+strconv.Itoa(shop.DefaultCreditApprovalThreshold),
		settings.EnvCrashAfterCommit+"="+crashAfter,
		settings.EnvApprovalsTokensFile+"=", // the demo serves the approvals service itself
		settings.EnvPaymentsBaseURL+"="+d.ext.Payments.BaseURL,
		settings.EnvPaymentsAPIKey+"="+d.ext.Payments.APIKey,
		settings.EnvSMTPAddr+"="+d.ext.SMTP.Addr,
		settings.EnvSMTPUsername+"="+d.ext.SMTP.Username,
		settings.EnvSMTPPassword+"="+d.ext.SMTP.Password,
		settings.EnvSMTPFrom+"="+d.ext.SMTP.From,
		settings.EnvMCPConfig+"="+d.mcpConfig,
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the %s worker: %w", name, err)
	}
	c := &child{cmd: cmd, httpURL: "http://" + httpAddr, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.done) }()
	d.children = append(d.children, c)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-c.done:
			log, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("the %s worker exited (%s):\n%s", name, cmd.ProcessState, log)
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if resp, err := http.Get(c.httpURL + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				d.say("\n%s. Started the %s worker as a child process (pid %d): migrated %q, polling task queue %q.",
					label, name, c.pid(), demoDatabase, workflows.DefaultTaskQueue)
				return c, nil
			}
		}
	}
	_ = cmd.Process.Kill()
	return nil, fmt.Errorf("the %s worker was not healthy after a minute", name)
}

// recreateDatabase drops and creates name on the server of serverURL and
// returns the new database's URL.
func recreateDatabase(ctx context.Context, serverURL, name string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil || !strings.HasPrefix(u.Scheme, "postgres") {
		return "", fmt.Errorf("DATABASE_URL %q: the demo needs a postgres:// URL", untrusted.Redact(serverURL))
	}
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", fmt.Errorf("connect to PostgreSQL (DATABASE_URL %s): %w", untrusted.Redact(serverURL), err)
	}
	defer conn.Close(ctx)
	ident := pgx.Identifier{name}.Sanitize()
	for _, sql := range []string{"DROP DATABASE IF EXISTS " + ident + " WITH (FORCE)", "CREATE DATABASE " + ident} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return "", fmt.Errorf("recreate database %s: %w", name, err)
		}
	}
	u.Path = "/" + name
	return u.String(), nil
}

func freeAddr() (string, error) { return devserver.FreeAddr("127.0.0.1") }
