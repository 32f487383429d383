package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/devserver"
	"github.com/oncerun/oncerun/internal/mail/mailtest"
	sandbox "github.com/oncerun/oncerun/internal/sandbox/payments"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/migrations"
	"github.com/oncerun/oncerun/workflows"
)

const (
	tenant    = "acme"
	namespace = "default"
	taskQueue = "oncerun-chaos"
	// mailFrom is the workers' SMTP_FROM, whose domain is their
	// Message-IDs'.
	mailFrom = "shop@oncerun.example"
)

// harness holds the processes and what happened to them.
type harness struct {
	cfg   Config
	out   io.Writer
	start time.Time

	rngMu sync.Mutex
	rng   *rand.Rand

	dbName, dbURL string
	pool          *pgxpool.Pool

	temporalPort int
	temporal     *proc
	sandboxURL   string
	sandbox      *proc
	provider     *apiClient
	mail         *mailtest.Server
	api          *apiClient
	apiProc      *proc
	workers      []*supervised

	// nodes, lb and temporalDBs are the cluster's Temporal nodes, the load
	// balancer in front of them and the databases the harness made for
	// them (TemporalCluster).
	nodes       []*proc
	lb          *forwarder
	temporalDBs []string

	runs []runPlan

	// slots are the workers' proxies and metrics addresses, by worker,
	// kept across restarts. netMu guards the proxies' faults, net (the
	// network faults as they happened) and the usage samples.
	slots                   []*slot
	netMu                   sync.Mutex
	net                     []*netRecord
	usageBefore, usageAfter usageSample

	// desk, deskDir and registries serve deploy mode (Config.Deploy): the
	// sandbox desk, its ledger's directory, and the tool registries the
	// workers roll through; roll is the current deploy, from 0.
	desk       *proc
	deskAddr   string
	deskDir    string
	registries []registry
	roll       int

	mu        sync.Mutex
	counts    Counts
	lastFault time.Time
	// windowStart and faultsOver are when the fault window began and ended.
	windowStart, faultsOver time.Time
	// decided is the decision of record of each wait of a step.
	decided map[waitRef]workflows.Decision
	// ended is when each run was first seen ended, and its status then.
	ended map[string]runEnd
	// misspelt counts the starts of runs that spelled a currency as no
	// currency, refused as the API must (Config.DailyCap).
	misspelt int
}

type stepRef struct {
	runID string
	step  int64
}

// waitRef is one wait of a step for a decision: its round (see
// approvalstore.Approval.Round). A step approved under its tool's rule
// that then meets a spend limit waits again, in round 2.
type waitRef struct {
	stepRef
	round int
}

type runEnd struct {
	at     time.Time
	status workflows.Status
	// children are a delegating run's child runs' statuses, read once the
	// run ended, by the step that started each; a child the API does not
	// know has the zero status.
	children map[int64]workflows.Status
}

func (h *harness) say(format string, args ...any) {
	fmt.Fprintf(h.out, "[%6.1fs] %s\n", time.Since(h.start).Seconds(), fmt.Sprintf(format, args...))
}

func (h *harness) float() float64 {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.Float64()
}

func (h *harness) intN(n int) int {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.IntN(n)
}

// fault records that a fault of kind happened now.
func (h *harness) fault(count *int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	*count++
	h.lastFault = time.Now()
}

// Run shakes oncerun as cfg says and checks what landed. The report is
// returned whatever happened; err is set when the harness itself could not
// do its work, and the report's Violations list what oncerun got wrong.
func Run(ctx context.Context, cfg Config, out io.Writer) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Seed == 0 {
		cfg.Seed = time.Now().UnixNano()
	}
	h := &harness{cfg: cfg, out: out, start: time.Now(),
		rng:     rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6f6e636572756e)),
		decided: map[waitRef]workflows.Decision{}, ended: map[string]runEnd{}}
	prefix := "ch" + strconv.FormatInt(cfg.Seed%1_000_000, 36)
	h.runs = plans(prefix, cfg.Runs, int(math.Round(cfg.Delegating*float64(cfg.Runs))), h.rng)
	if cfg.Deploy {
		for i := range h.runs {
			h.runs[i].desk = true
		}
	}
	if cfg.DailyCap > 0 {
		spellCurrencies(h.runs)
	}
	err := h.setUp(ctx, fmt.Sprintf("%s_%d", prefix, os.Getpid()))
	var rep *Report
	if err == nil {
		rep, err = h.shake(ctx)
	}
	h.tearDown()
	if err == nil && len(rep.Violations) == 0 {
		h.dropDatabase()
	}
	return rep, err
}

func (h *harness) setUp(ctx context.Context, dbSuffix string) error {
	if err := os.MkdirAll(filepath.Join(h.cfg.Dir, "logs"), 0o755); err != nil {
		return err
	}
	h.say("seed %d; data and logs in %s", h.cfg.Seed, h.cfg.Dir)
	if err := h.makeDatabase(ctx, "oncerun_chaos_"+dbSuffix); err != nil {
		return err
	}
	if err := h.setCaps(ctx); err != nil {
		return err
	}
	if err := h.startSandbox(ctx); err != nil {
		return err
	}
	mail, err := mailtest.Start(mailtest.Config{})
	if err != nil {
		return fmt.Errorf("start the SMTP server: %w", err)
	}
	h.mail = mail
	if err := os.WriteFile(h.agentsFile(), []byte(agentsConfig), 0o644); err != nil {
		return err
	}
	// The processes read no Temporal profile: an empty one.
	if err := os.WriteFile(h.profile(), []byte("# The chaos harness's processes read no Temporal profile.\n"), 0o644); err != nil {
		return err
	}
	if h.cfg.Deploy {
		if err := h.setUpDeploy(ctx); err != nil {
			return err
		}
	}
	start := h.startTemporal
	if h.cfg.Temporal == TemporalCluster {
		start = h.startCluster
	}
	if err := start(ctx); err != nil {
		return err
	}
	if err := h.startAPI(ctx); err != nil {
		return err
	}
	for i := range h.cfg.Workers {
		s, err := h.newSlot(i)
		if err != nil {
			return err
		}
		h.slots = append(h.slots, s)
		p, err := h.workerProc(i)
		if err != nil {
			return err
		}
		w := &supervised{proc: p}
		h.workers = append(h.workers, w)
		if err := w.start(ctx, 2*time.Minute); err != nil {
			return err
		}
	}
	if h.cfg.Deploy {
		if err := h.makeCurrent(ctx, 0); err != nil {
			return err
		}
	}
	temporal := fmt.Sprintf("Temporal on port %d", h.temporalPort)
	if h.lb != nil {
		temporal = fmt.Sprintf("Temporal nodes %s behind the load balancer %s", strings.Join(h.lb.backends, " and "), h.lb.Addr())
	}
	h.say("%d workers up (%d with crash faults), each through proxies of its own; %s; API %s; provider %s; SMTP %s",
		len(h.workers), h.cfg.CrashWorkers, temporal, h.api.base, h.sandboxURL, h.mail.Addr())
	return nil
}

// makeDatabase creates the harness's own database, migrates it and adds
// the orders the runs credit and refund.
func (h *harness) makeDatabase(ctx context.Context, name string) error {
	u, err := url.Parse(h.cfg.DatabaseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return fmt.Errorf("chaos: DATABASE_URL %q: want a postgres:// URL", untrusted.Redact(h.cfg.DatabaseURL))
	}
	if err := h.createDatabase(ctx, name); err != nil {
		return err
	}
	u.Path = "/" + name
	h.dbName, h.dbURL = name, u.String()
	mc, err := pgx.Connect(ctx, h.dbURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", name, err)
	}
	defer mc.Close(ctx)
	if _, err := migrations.Migrate(ctx, mc); err != nil {
		return fmt.Errorf("migrate %s: %w", name, err)
	}
	for _, p := range h.runs {
		if _, err := mc.Exec(ctx, `
INSERT INTO orders (tenant, order_id, customer, customer_email, payment_id, status, total_cents, currency, placed_at)
VALUES ($1, $2, 'Chaos Customer', $3, $4, 'delivered_damaged', $5, $6, now())`,
			tenant, p.orderID, p.email, p.paymentID, paymentCents, planCurrency); err != nil {
			return fmt.Errorf("add order %s: %w", p.orderID, err)
		}
	}
	pool, err := pgxpool.New(ctx, h.dbURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", name, err)
	}
	h.pool = pool
	return nil
}

// dropDatabase drops the harness's databases once every process has
// stopped: its own and those it made for the Temporal cluster.
func (h *harness) dropDatabase() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, h.cfg.DatabaseURL)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	for _, name := range append([]string{h.dbName}, h.temporalDBs...) {
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	}
}

func (h *harness) startSandbox(ctx context.Context) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	ps := make([]sandbox.Payment, len(h.runs))
	for i, p := range h.runs {
		ps[i] = sandbox.Payment{ID: p.paymentID, Amount: paymentCents, Currency: strings.ToLower(planCurrency)}
	}
	b, _ := json.Marshal(ps)
	file := filepath.Join(h.cfg.Dir, "payments.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		return err
	}
	h.sandboxURL = "http://" + addr
	h.provider = newAPIClient(h.sandboxURL, sandbox.DefaultAPIKey)
	h.sandbox = &proc{name: "sandbox-payments", binary: h.cfg.Binary, logPath: logPath(h.cfg.Dir, "sandbox-payments"),
		args: []string{"sandbox-payments", "--addr", addr, "--data-dir", filepath.Join(h.cfg.Dir, "sandbox"), "--payments", file,
			"--key-retention", h.cfg.ProviderKeyRetention.String()},
		healthy: func(ctx context.Context) bool {
			return h.provider.do(ctx, http.MethodGet, "/v1/refunds?payment_id=none", nil).status == http.StatusOK
		}}
	return h.sandbox.start(ctx, time.Minute)
}

func (h *harness) startTemporal(ctx context.Context) error {
	port, err := devserver.FreePort("127.0.0.1")
	if err != nil {
		return err
	}
	h.temporalPort = port
	h.temporal = &proc{name: "temporal-server", binary: h.cfg.Binary, logPath: logPath(h.cfg.Dir, "temporal-server"),
		args:    []string{"temporal-server", "--data-dir", filepath.Join(h.cfg.Dir, "temporal"), "--port", strconv.Itoa(port)},
		healthy: func(ctx context.Context) bool { return temporalUp(ctx, h.temporalAddr()) }}
	return h.temporal.start(ctx, 2*time.Minute)
}

// temporalAddr is where the processes reach Temporal: the server, or the
// cluster's load balancer.
func (h *harness) temporalAddr() string {
	if h.lb != nil {
		return h.lb.Addr()
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(h.temporalPort))
}

// agentsFile is the processes' ONCERUN_AGENTS_CONFIG: the sub-agents of
// the delegating runs.
func (h *harness) agentsFile() string { return filepath.Join(h.cfg.Dir, "agents.yaml") }

// profile is the Temporal profile file the processes are given: an empty
// one, so that a profile of the user's does not reach them.
func (h *harness) profile() string { return filepath.Join(h.cfg.Dir, "temporal.toml") }

// temporalUp reports whether a client can connect to the frontend at addr.
func temporalUp(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{HostPort: addr, Namespace: namespace,
		Logger: sdklog.NewStructuredLogger(discard)})
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// env is what every oncerun process of the harness shares. These are
// the only TEMPORAL_ variables a process gets (temporalconn.LocalEnv).
func (h *harness) env() []string {
	return []string{
		"TEMPORAL_ADDRESS=" + h.temporalAddr(), "TEMPORAL_NAMESPACE=" + namespace, "TEMPORAL_TASK_QUEUE=" + taskQueue,
		"TEMPORAL_CONFIG_FILE=" + h.profile(),
		"TEMPORAL_CONNECT_WAIT=5m", "DATABASE_URL=" + h.dbURL, "LOG_LEVEL=warn",
		"PAYMENTS_BASE_URL=" + h.sandboxURL, "PAYMENTS_API_KEY=" + sandbox.DefaultAPIKey,
		"PAYMENTS_KEY_LIFETIME=" + h.cfg.ProviderKeyRetention.String(),
		"SMTP_ADDR=" + h.mail.Addr(), "SMTP_FROM=" + mailFrom,
		settings.EnvAgentsConfig + "=" + h.agentsFile(),
	}
}

func (h *harness) startAPI(ctx context.Context) error {
	tokens := filepath.Join(h.cfg.Dir, "tokens.json")
	_ = os.Remove(tokens)
	tok, entry, err := approvals.NewToken(approvals.Identity{Name: "chaos", Tenant: tenant, Role: approvals.RoleOperator})
	if err != nil {
		return err
	}
	if err := approvals.AppendToken(tokens, entry); err != nil {
		return err
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	metrics, err := freeAddr()
	if err != nil {
		return err
	}
	h.api = newAPIClient("http://"+addr, tok)
	env := append(h.env(), "APPROVALS_ADDR="+addr, "APPROVALS_TOKENS_FILE="+tokens, "METRICS_ADDR="+metrics)
	if h.cfg.Deploy {
		// The API checks plans against a registry that has every tool the
		// runs call; which worker's registry makes each call is the test.
		env = append(env, settings.EnvMCPConfig+"="+filepath.Join(h.cfg.Dir, "mcp-adds.json"))
	}
	h.apiProc = &proc{name: "serve", binary: h.cfg.Binary, logPath: logPath(h.cfg.Dir, "serve"),
		args: []string{"serve"},
		env:  env,
		healthy: func(ctx context.Context) bool {
			return h.api.do(ctx, http.MethodGet, "/v1/approvals", nil).status == http.StatusOK
		}}
	return h.apiProc.start(ctx, 2*time.Minute)
}

// workerProc is worker i, which reaches every other part through its
// slot's proxies. The first CrashWorkers carry crash faults, a different
// set at each start.
func (h *harness) workerProc(i int) (*proc, error) {
	s := h.slots[i]
	shared, err := proxiedEnv(h.env(), s.via())
	if err != nil {
		return nil, err
	}
	// A worker logs each activity attempt it starts and finishes, at info:
	// the report's resume times are read from these lines.
	p := &proc{name: s.name, binary: h.cfg.Binary, args: []string{"worker"},
		env:     append(shared, "METRICS_ADDR="+s.metrics, "APPROVALS_TOKENS_FILE=", "LOG_LEVEL=info", "LOG_ACTIVITY_ATTEMPTS=true"),
		logPath: logPath(h.cfg.Dir, s.name),
		healthy: func(ctx context.Context) bool { return answers(ctx, "http://"+s.metrics+"/healthz", true) }}
	p.envAt = func(start int) []string {
		var env []string
		set := ""
		if i < h.cfg.CrashWorkers {
			set = crashSets[(i+start)%len(crashSets)]
			if h.cfg.Deploy {
				set = deployCrashSets[(i+start)%len(deployCrashSets)]
			}
		}
		if h.cfg.Deploy {
			r, roll := h.registryOf(i)
			r.mcp = workerMCP(r.mcp, s)
			env, set = deployEnv(r, roll), r.crashSet(set)
		}
		if set != "" {
			env = append(env, "ONCERUN_CRASH_AT="+set)
		}
		return env
	}
	return p, nil
}

// probe asks a process whether it is healthy; one that does not answer in
// time is not.
var probe = &http.Client{Timeout: 5 * time.Second}

// answers reports whether a GET of url is answered in time, with 200 when
// ok is set, with any status otherwise.
func answers(ctx context.Context, url string, ok bool) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := probe.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return !ok || resp.StatusCode == http.StatusOK
}

// crashSets are the crash faults a crash worker carries, one set per start
// in turn: together they hold every point of ONCERUN_CRASH_AT on the step
// that reaches it, the child points on both sub-agents' delegations. A worker dies at the first point it reaches and is
// started again with the next set.
var crashSets = []string{
	"after-commit:issue_credit,during-effect:add_order_note,child-started:agent_credits",
	"after-apply:refund_payment,approval-wait:issue_credit,child-start:agent_refunds",
	"after-lease:refund_payment,workflow-task:add_order_note,before-claim:issue_credit,child-started:agent_refunds",
	"during-effect:refund_payment,after-commit:add_order_note,child-start:agent_credits",
}

// deployCrashSets are crashSets with points on the desk's tools, for
// deploy mode's runs, which call the desk too.
var deployCrashSets = []string{
	crashSets[0] + ",after-commit:" + deskTicket,
	crashSets[1] + ",after-apply:" + deskVoucher,
	crashSets[2] + ",during-effect:" + deskTicket,
	crashSets[3] + ",after-commit:" + deskVoucher,
}

func (h *harness) tearDown() {
	for _, w := range h.workers {
		w.stopAll(10 * time.Second)
	}
	for _, p := range append([]*proc{h.apiProc, h.temporal, h.sandbox, h.desk}, h.nodes...) {
		if p != nil {
			p.stop(10 * time.Second)
		}
	}
	for _, s := range h.slots {
		s.close()
	}
	if h.lb != nil {
		_ = h.lb.Close()
	}
	if h.mail != nil {
		_ = h.mail.Close()
	}
	if h.pool != nil {
		h.pool.Close()
	}
}

func freeAddr() (string, error) { return devserver.FreeAddr("127.0.0.1") }
