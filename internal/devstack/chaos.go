package devstack

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/internal/chaos"
	"github.com/oncerun/oncerun/internal/cli"
)

// errViolations makes `oncerun-dev chaos` exit non-zero when oncerun broke a
// promise; the report has said which.
var errViolations = errors.New("chaos: violations found")

func newChaosCmd(env cli.Env) *cobra.Command {
	var (
		short, asJSON, deploy bool
		restart               string
		cfg                   = chaos.Full()
	)
	cmd := &cobra.Command{
		Use:   "chaos [--short] [--temporal embedded|cluster] [--deploy] [--runs N] [--kills N] [--net-faults N] [--net-fault-max D] [--duration D] [--daily-cap EUR] [--json]",
		Short: "Shake oncerun: runs of every effect class while workers, Temporal and PostgreSQL are killed and the network fails; count every effect where it landed",
		Long: `Start agent runs (a keyed note, a natural-key credit whose e-mail goes through
the outbox, an external refund at a sandbox payment provider) through the
approvals API, approve, reject and resolve them at random moments, and, for
--duration: SIGKILL worker processes and start them again, kill the Temporal
server and start it again on its data, restart PostgreSQL, inject provider and
mail faults, fail the workers' network, and run some workers with crash
faults. Then wait for every run to end and count every effect in the
business tables, the provider's ledger and the mailbox. The report also gives the resume time: how soon each
activity attempt that was running on a worker when it died started again on
another worker, from the workers' logs. Exits 1 on any violation.

Every worker reaches PostgreSQL, Temporal, the provider, the SMTP server
(and the desk, with --deploy) through TCP proxies of the harness's own, one
per worker and destination; the API server and the checks connect directly.
--net-faults network faults (default 120 of 5s to 90s; 6 of 5s to 20s with
--short) are put on them at moments spread over --duration: a black hole
both ways or one way, latency of 100ms to 2s with jitter, a throttled link,
open connections reset and new ones refused, or new ones refused; on one
worker's link to one destination, on all of one worker's links, or on every
worker's link to PostgreSQL or to Temporal at once. The report gives the
faults by kind and scope, how soon after each heal the workers it reached
started an activity attempt again, how soon a worker cut off from PostgreSQL
or Temporal said so and said it took work again, and what was left behind
after the runs settled: backends idle in a transaction (a violation past
30s), and each worker's goroutines, memory and open files against before the
network faults.

--temporal cluster runs Temporal as two nodes whose state is in PostgreSQL (in
databases of the harness's own on DATABASE_URL's server), behind a TCP load
balancer in the harness that every process reaches Temporal through; instead of
the server, one node at a time is SIGKILLed, kept down for --node-down while
runs and approvals go on against the other, and started again on its ports.

Every process runs from this binary, on its own database on DATABASE_URL.
--pg-restart cluster restarts the whole PostgreSQL server (with
--pg-restart-command; the default is Debian's pg_ctlcluster in immediate
mode); backends only cuts the connections to the harness's databases
(Temporal's too, with --temporal cluster).

--daily-cap 600.00 sets, before the runs start, a cap of 600.00 EUR per UTC
day on each of issue_credit and refund_payment of the runs' tenant (each
run proposes a credit of 30.00 or 120.00 EUR and a refund of 25.00 or 150.00
EUR; the harness says what the runs propose in all). A step that would cross
a cap waits for approval (approvals of kind limit) and the harness rejects it
("chaos: over the cap"), so it must not apply; the check then sums each
tool's amounts per UTC day where they landed, the credits table and the
provider's ledger, and any day over the cap, exceptions excluded, is a
violation. Under a cap the runs spell their currencies as planners do: the
refunds' as EUR, eur or Eur (one currency, one cap), every fourth credit in
USD (a currency the caps do not name: it waits, and is rejected), and a run
of each tool in each spelling that is no currency (978, €, XXX, …), which
the API must refuse at its start; any amount at a destination outside the
caps' currency is a violation too.

--deploy rolls the workers, while runs are in flight and every other fault
goes on, through --registries tool registries (a tool added, an approval
threshold loosened or tightened, the runs' MCP server down when some
workers start, a sub-agent removed), --rolls times: each roll is a new
Worker Deployment version made current, every worker restarted into it
under the next registry; halfway, the MCP server is redeployed with a
changed schema. The runs also open a ticket and issue a voucher at the
sandbox desk. The check then holds each run's record against every
destination by key: every effect found is a step its run records done,
every step recorded done has its effect, none is made twice; and it
counts the workflow tasks taken over by a worker of another registry than
the one that lost them. Without --short: 200 runs, 800 kills, 15m, 5
rolls.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The preset, with the flags given explicitly on top.
			given := cfg
			switch {
			case deploy && short:
				cfg = chaos.ShortDeploy()
			case deploy:
				cfg = chaos.FullDeploy()
			case short && given.Temporal == chaos.TemporalCluster:
				cfg = chaos.ShortCluster()
			case short:
				cfg = chaos.Short()
			case given.Temporal == chaos.TemporalCluster:
				cfg = chaos.FullCluster()
			}
			for name, copyField := range chaosFlags {
				if cmd.Flags().Changed(name) {
					copyField(&cfg, given)
				}
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			cfg.Binary, cfg.DatabaseURL = exe, env.DatabaseURL
			if cfg.Dir == "" {
				if cfg.Dir, err = os.MkdirTemp("", "oncerun-chaos-"); err != nil {
					return err
				}
			}
			if cfg.Dir, err = filepath.Abs(cfg.Dir); err != nil {
				return err
			}
			if cfg.PGRestart == chaos.PGRestartCluster && cfg.PGRestarts > 0 {
				if restart == "" {
					restart, err = defaultPGRestart()
					if err != nil {
						return err
					}
				}
				cfg.RestartCommand = strings.Fields(restart)
			}
			progress := cmd.OutOrStdout()
			if asJSON {
				progress = cmd.ErrOrStderr()
			}
			rep, err := chaos.Run(cmd.Context(), cfg, progress)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(progress)
				rep.Print(progress)
			}
			if len(rep.Violations) > 0 {
				return errViolations
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&short, "short", false, "the configuration `make test` runs: 20 runs, a minute of faults, PostgreSQL connections cut instead of a restart (with --temporal cluster: 12 runs, 90s, each node killed once)")
	f.StringVar(&cfg.Temporal, "temporal", cfg.Temporal, "how Temporal runs: embedded (one server on SQLite) or cluster (two nodes on PostgreSQL behind a load balancer; without --short, the defaults become 100 runs, 3 workers, 100 kills, 4 node kills, 8m)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON on stdout (progress goes to stderr)")
	f.StringVar(&cfg.Dir, "dir", "", "directory for the processes' data and logs (default: a new temporary one)")
	f.IntVar(&cfg.Runs, "runs", cfg.Runs, "agent runs")
	f.Float64Var(&cfg.Delegating, "delegating", cfg.Delegating, "share of the runs that delegate their credit and their refund, each to a child run of a sub-agent that waits for an approval")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "worker processes at once")
	f.IntVar(&cfg.CrashWorkers, "crash-workers", cfg.CrashWorkers, "workers that also carry crash faults")
	f.IntVar(&cfg.Kills, "kills", cfg.Kills, "worker SIGKILLs over the fault window")
	f.IntVar(&cfg.NetFaults, "net-faults", cfg.NetFaults, "network faults on the workers' links over the fault window (see above)")
	f.DurationVar(&cfg.NetFaultMax, "net-fault-max", cfg.NetFaultMax, "the longest a network fault lasts (the shortest is 5s)")
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long faults go on")
	f.DurationVar(&cfg.Settle, "settle", cfg.Settle, "how long to wait for every run to end after the faults")
	f.IntVar(&cfg.TemporalRestarts, "temporal-restarts", cfg.TemporalRestarts, "Temporal server kills and restarts (with --temporal cluster: node kills, the nodes in turn)")
	f.DurationVar(&cfg.NodeDown, "node-down", cfg.NodeDown, "with --temporal cluster: how long a killed node stays down")
	f.IntVar(&cfg.PGRestarts, "pg-restarts", cfg.PGRestarts, "PostgreSQL restarts")
	f.StringVar(&cfg.PGRestart, "pg-restart", cfg.PGRestart, "how PostgreSQL is restarted: cluster or backends")
	f.StringVar(&restart, "pg-restart-command", "", "command that restarts PostgreSQL for --pg-restart cluster")
	f.Float64Var(&cfg.FaultRate, "fault-rate", cfg.FaultRate, "share of refunds that meet a provider fault and of e-mails whose connection drops after acceptance")
	f.DurationVar(&cfg.ProviderKeyRetention, "provider-key-retention", cfg.ProviderKeyRetention, "how long the sandbox provider keeps an idempotency key (and the refund tool's declared key lifetime)")
	f.Float64Var(&cfg.RejectRate, "reject-rate", cfg.RejectRate, "share of approvals rejected")
	f.DurationVar(&cfg.DecideWithin, "decide-within", cfg.DecideWithin, "a step's decision comes at a random moment within this")
	f.Var(&cfg.DailyCap, "daily-cap", "cap per UTC day on each of issue_credit and refund_payment, in EUR with at most two decimals (2000.00); steps that would cross it wait for approval and are rejected, and the check finds each day's credits and provider refunds within it (default: no cap)")
	f.Int64Var(&cfg.Seed, "seed", 0, "seed of the plan and the moments (default: the clock)")
	f.BoolVar(&deploy, "deploy", false, "roll the workers through tool registries and Worker Deployment versions while runs are in flight (see above)")
	f.IntVar(&cfg.Registries, "registries", 3, "with --deploy: how many registries the workers roll through, 2 or 3")
	f.IntVar(&cfg.Rolls, "rolls", 5, "with --deploy: how many deploys over the fault window")
	return cmd
}

// chaosFlags copy each setting's flag from the flags to the --short preset.
var chaosFlags = map[string]func(dst *chaos.Config, src chaos.Config){
	"dir":               func(d *chaos.Config, s chaos.Config) { d.Dir = s.Dir },
	"runs":              func(d *chaos.Config, s chaos.Config) { d.Runs = s.Runs },
	"delegating":        func(d *chaos.Config, s chaos.Config) { d.Delegating = s.Delegating },
	"workers":           func(d *chaos.Config, s chaos.Config) { d.Workers = s.Workers },
	"crash-workers":     func(d *chaos.Config, s chaos.Config) { d.CrashWorkers = s.CrashWorkers },
	"kills":             func(d *chaos.Config, s chaos.Config) { d.Kills = s.Kills },
	"net-faults":        func(d *chaos.Config, s chaos.Config) { d.NetFaults = s.NetFaults },
	"net-fault-max":     func(d *chaos.Config, s chaos.Config) { d.NetFaultMax = s.NetFaultMax },
	"duration":          func(d *chaos.Config, s chaos.Config) { d.Duration = s.Duration },
	"settle":            func(d *chaos.Config, s chaos.Config) { d.Settle = s.Settle },
	"temporal":          func(d *chaos.Config, s chaos.Config) { d.Temporal = s.Temporal },
	"temporal-restarts": func(d *chaos.Config, s chaos.Config) { d.TemporalRestarts = s.TemporalRestarts },
	"node-down":         func(d *chaos.Config, s chaos.Config) { d.NodeDown = s.NodeDown },
	"pg-restarts":       func(d *chaos.Config, s chaos.Config) { d.PGRestarts = s.PGRestarts },
	"pg-restart":        func(d *chaos.Config, s chaos.Config) { d.PGRestart = s.PGRestart },
	"fault-rate":        func(d *chaos.Config, s chaos.Config) { d.FaultRate = s.FaultRate },
	"reject-rate":       func(d *chaos.Config, s chaos.Config) { d.RejectRate = s.RejectRate },
	"provider-key-retention": func(d *chaos.Config, s chaos.Config) {
		d.ProviderKeyRetention = s.ProviderKeyRetention
	},
	"decide-within": func(d *chaos.Config, s chaos.Config) { d.DecideWithin = s.DecideWithin },
	"daily-cap":     func(d *chaos.Config, s chaos.Config) { d.DailyCap = s.DailyCap },
	"seed":          func(d *chaos.Config, s chaos.Config) { d.Seed = s.Seed },
	"registries":    func(d *chaos.Config, s chaos.Config) { d.Registries = s.Registries },
	"rolls":         func(d *chaos.Config, s chaos.Config) { d.Rolls = s.Rolls },
}

// defaultPGRestart is Debian's command for the machine's one cluster.
func defaultPGRestart() (string, error) {
	versions, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(versions) != 1 {
		return "", errors.New("chaos: --pg-restart cluster: say how with --pg-restart-command (no single cluster under /etc/postgresql)")
	}
	return "pg_ctlcluster --skip-systemctl-redirect " + versions[0].Name() + " main restart -m immediate", nil
}
