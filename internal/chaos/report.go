package chaos

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"

	"github.com/oncerun/oncerun/internal/money"
)

// Counts are what the harness did and found.
type Counts struct {
	Started int `json:"runs_started"`
	Steps   int `json:"steps"`
	// Children counts the child runs of the delegating runs checked.
	Children int `json:"child_runs"`
	// ChildStarts counts the starts of child runs in their parents'
	// histories: one per child run when each was started once.
	ChildStarts      int `json:"child_run_starts"`
	Decisions        int `json:"decisions"`
	Resolutions      int `json:"resolutions"`
	WorkerKills      int `json:"worker_kills"`
	CrashFaultDeaths int `json:"crash_fault_deaths"`
	StartFailures    int `json:"worker_start_failures"`
	// StartFailureErrors says why each of those starts failed.
	StartFailureErrors []string `json:"worker_start_failure_errors,omitempty"`
	// CrashPoints counts the crash-fault deaths by the point they were at.
	CrashPoints      map[string]int `json:"crash_points"`
	TemporalKills    int            `json:"temporal_kills"`
	TemporalRestarts int            `json:"temporal_restarts"`
	NodeKills        int            `json:"temporal_node_kills"`
	NodeRestarts     int            `json:"temporal_node_restarts"`
	PGRestarts       int            `json:"postgres_restarts"`
	ProviderFaults   int            `json:"provider_faults"`
	MailFaults       int            `json:"mail_faults"`
	Effects          int            `json:"effects_once"`
	Mails            int            `json:"emails"`
	Duplicates       int            `json:"duplicates"`
	Lost             int            `json:"lost"`
	MailRepeats      int            `json:"email_repeats"`
	MailSettled      int            `json:"emails_settled_from_mailbox"`
	// NetFaults counts the network faults put on the workers' links.
	NetFaults int `json:"net_faults"`
	// MailResent counts the e-mails of unknown delivery that were not in
	// the mailbox, which the harness sent by hand as a person would.
	MailResent   int `json:"emails_resent_by_hand"`
	InFlightKeys int `json:"in_flight_keys_of_closed_runs"`
	Drift        int `json:"reconciliation_drift"`
	// CapRejections counts the harness's rejections of steps parked at a
	// daily cap (Config.DailyCap), among Decisions.
	CapRejections int `json:"cap_rejections,omitempty"`
	// NotInRecord counts the effects found at a destination that their
	// run's record does not name as a step done, by key; TwiceUnderKey the
	// effects found again under a key that already made one; and
	// RecordedNotFound the steps recorded done whose effect is under their
	// key nowhere.
	NotInRecord      int `json:"effects_not_in_their_runs_record"`
	TwiceUnderKey    int `json:"effects_twice_under_one_key"`
	RecordedNotFound int `json:"steps_done_without_their_effect"`
	// Deploys counts the rolls of the workers into a new version, and
	// DeskRedeploys the desk's redeploys with a changed schema (deploy
	// mode).
	Deploys       int `json:"deploys,omitempty"`
	DeskRedeploys int `json:"desk_redeploys,omitempty"`
	// Takeovers counts the workflow tasks that a worker started after
	// the run's previous task timed out or failed (its worker died, or
	// could not finish it), in every run's history and its child runs';
	// AcrossRegistries those whose new worker offered another registry
	// than the one that lost the task, by the registry digests the
	// workers' identities carry.
	Takeovers        int `json:"takeovers"`
	AcrossRegistries int `json:"takeovers_across_registries"`
	// Refused counts the steps a worker's registry refused (deploy mode:
	// a call of a tool its registry lacks), children's included.
	Refused int `json:"steps_refused,omitempty"`

	violations []string
}

// Report is the outcome of a chaos run.
type Report struct {
	Counts
	Seed           int64    `json:"seed"`
	Runs           int      `json:"runs"`
	Ended          int      `json:"runs_ended"`
	RecoverSeconds float64  `json:"recover_seconds"`
	Resume         Resume   `json:"resume"`
	Wall           string   `json:"wall"`
	Violations     []string `json:"violations"`

	// AcrossRegistries counts the takeovers by a worker of another tool
	// registry than the one whose work it took over: workflow tasks
	// (Counts.AcrossRegistries) and activity attempts that died with their
	// worker (Resume.AcrossRegistries).
	AcrossRegistries int `json:"takeovers_across_registries_in_all"`

	// Network is what the network faults did, how soon the workers came
	// back from them, and what was left behind after the runs settled.
	Network *Network `json:"network,omitempty"`

	// Caps accounts for Config.DailyCap, when it was set.
	Caps *Caps `json:"caps,omitempty"`

	// Temporal is how Temporal ran: TemporalEmbedded or TemporalCluster.
	Temporal string `json:"temporal"`
	// NodeConnections counts the connections the load balancer joined to
	// each node of the cluster (TemporalCluster).
	NodeConnections []int `json:"temporal_node_connections,omitempty"`
	// ShardAcquisitions counts the times a node of the cluster took a
	// history shard, at the cluster's start and as nodes died and came back
	// (TemporalCluster).
	ShardAcquisitions int `json:"temporal_shard_acquisitions,omitempty"`
}

func (h *harness) countLine() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.counts
	temporal := fmt.Sprintf("%d Temporal restarts", c.TemporalRestarts)
	if h.cfg.Temporal == TemporalCluster {
		temporal = fmt.Sprintf("%d Temporal node kills", c.NodeKills)
	}
	return fmt.Sprintf("%d runs started, %d worker kills, %s, %d PostgreSQL restarts, %d network faults, %d provider and %d mail faults, %d decisions, %d resolutions",
		c.Started, c.WorkerKills, temporal, c.PGRestarts, c.NetFaults, c.ProviderFaults, c.MailFaults, c.Decisions, c.Resolutions)
}

// Print writes the report as a table, then the violations.
func (r *Report) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, v any) { fmt.Fprintf(tw, "%s\t%v\t\n", name, v) }
	row("runs (ended / planned)", fmt.Sprintf("%d / %d", r.Ended, r.Runs))
	row("steps", r.Steps)
	row("child runs (starts)", fmt.Sprintf("%d (%d)", r.Children, r.ChildStarts))
	row("decisions / resolutions", fmt.Sprintf("%d / %d", r.Decisions, r.Resolutions))
	row("worker kills (SIGKILL)", r.WorkerKills)
	row("crash-fault deaths", r.CrashFaultDeaths)
	for _, p := range slices.Sorted(maps.Keys(r.CrashPoints)) {
		row("  at "+p, r.CrashPoints[p])
	}
	row("worker starts that failed during the faults or the minute after", r.StartFailures)
	if r.Temporal == TemporalCluster {
		row("Temporal node kills / restarts", fmt.Sprintf("%d / %d", r.NodeKills, r.NodeRestarts))
		row("connections through the load balancer, per node", fmt.Sprint(r.NodeConnections))
		row("history shard acquisitions", r.ShardAcquisitions)
	} else {
		row("Temporal server kills / restarts", fmt.Sprintf("%d / %d", r.TemporalKills, r.TemporalRestarts))
	}
	row("PostgreSQL restarts", r.PGRestarts)
	row("network faults", r.NetFaults)
	row("provider faults / mail faults", fmt.Sprintf("%d / %d", r.ProviderFaults, r.MailFaults))
	row("exactly-once effects found", r.Effects)
	row("duplicates", r.Duplicates)
	row("lost effects", r.Lost)
	row("e-mails (repeats)", fmt.Sprintf("%d (%d)", r.Mails, r.MailRepeats))
	row("e-mails of unknown delivery found in the mailbox", r.MailSettled)
	row("e-mails of unknown delivery resent by hand", r.MailResent)
	row("effects not in their run's record", r.NotInRecord)
	row("effects made twice under one key", r.TwiceUnderKey)
	row("steps recorded done whose effect is nowhere", r.RecordedNotFound)
	row("workflow task takeovers (across registries)", fmt.Sprintf("%d (%d)", r.Takeovers, r.Counts.AcrossRegistries))
	row("takeovers across registries, tasks and attempts", r.AcrossRegistries)
	if r.Deploys > 0 || r.DeskRedeploys > 0 {
		row("deploys (desk redeploys)", fmt.Sprintf("%d (%d)", r.Deploys, r.DeskRedeploys))
		row("steps refused by their worker's registry", r.Refused)
	}
	row("dedup keys in flight, closed runs", r.InFlightKeys)
	row("reconciliation drift", r.Drift)
	if c := r.Caps; c != nil {
		row("daily cap per tool", money.Format(c.Cap, c.Currency))
		for _, tool := range slices.Sorted(maps.Keys(c.Planned)) {
			row("  proposed by the runs, "+tool, money.Format(c.Planned[tool], c.Currency))
		}
		for _, d := range c.Days {
			row(fmt.Sprintf("  %s on %s, applied in %d effects (of it exceptions)", d.Tool, d.Day, d.Effects),
				fmt.Sprintf("%s (%s)", money.Format(d.Applied, d.Currency), money.Format(d.Exceptions, d.Currency)))
		}
		row("  runs spelling a currency as none, refused at start", c.Misspelt)
		row("  steps parked at the cap (rejected / approved past it)", fmt.Sprintf("%d (%d / %d)", c.Parked, c.Rejected, c.Excepted))
		row("  days over the cap", c.Over)
	}
	row("recovery after the last fault", fmt.Sprintf("%.1fs", r.RecoverSeconds))
	row("activity attempts running at a worker's death", r.Resume.InFlight)
	row("  started again on another worker", r.Resume.All.Count)
	row("  resume time p50 / p90 / max", r.Resume.All)
	for _, k := range slices.Sorted(maps.Keys(r.Resume.ByType)) {
		d := r.Resume.ByType[k]
		row(fmt.Sprintf("    %s (%d)", k, d.Count), d)
	}
	for _, k := range []string{deathKill, deathCrash} {
		if d, ok := r.Resume.ByCause[k]; ok {
			row(fmt.Sprintf("    after %s (%d)", map[string]string{deathKill: "a harness SIGKILL", deathCrash: "a crash fault"}[k], d.Count), d)
		}
	}
	row("    by a worker of another registry", r.Resume.AcrossRegistries)
	row("  started again before the death (timed out earlier)", r.Resume.Superseded)
	row("  never started again", r.Resume.NotResumed)
	if r.Network != nil {
		r.Network.print(row)
	}
	row("wall time", r.Wall)
	_ = tw.Flush()
	if len(r.Violations) == 0 {
		fmt.Fprintln(w, "\nno violations")
		return
	}
	fmt.Fprintf(w, "\n%d violations:\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintln(w, "  "+v)
	}
}
