package chaos

import (
	"errors"
	"fmt"
	"time"
)

// How PostgreSQL is restarted.
const (
	// PGRestartCluster restarts the whole PostgreSQL server with
	// RestartCommand (immediate mode: as a crash, with recovery at start).
	PGRestartCluster = "cluster"
	// PGRestartBackends terminates every connection to the harness's
	// database, which is what a restart looks like from oncerun's side,
	// without touching other databases of a shared server.
	PGRestartBackends = "backends"
)

// How Temporal runs.
const (
	// TemporalEmbedded is one Temporal server process on SQLite, SIGKILLed
	// and started again on its file.
	TemporalEmbedded = "embedded"
	// TemporalCluster is two Temporal server nodes on PostgreSQL behind the
	// harness's TCP load balancer: one node at a time is SIGKILLed, kept
	// down for NodeDown and started again on its ports.
	TemporalCluster = "cluster"
)

// Config says how hard and how long to shake.
type Config struct {
	// Binary is the oncerun executable every process is started from.
	Binary string
	// DatabaseURL names the PostgreSQL server; the harness makes its own
	// database on it.
	DatabaseURL string
	// Dir holds the processes' data and logs. Required.
	Dir string

	// Runs is how many agent runs are started, at random moments of the
	// first 60% of Duration.
	Runs int
	// Delegating is the share of the Runs that delegate: each hands its
	// credit and its refund to a child run of a sub-agent, and each child
	// waits for an approval. The check finds each child started once, by
	// the step of its parent, and its effect made once.
	Delegating float64
	// Workers is how many worker processes run at once.
	Workers int
	// CrashWorkers of them also carry crash faults (after-commit, around
	// the refund's effect): each dies at its first such point and is
	// started again.
	CrashWorkers int
	// Kills is how many times a worker is SIGKILLed, at random moments
	// spread over Duration.
	Kills int
	// Duration is how long faults go on. The harness then waits up to
	// Settle for every run to end, and checks.
	Duration time.Duration
	Settle   time.Duration
	// Temporal is how Temporal runs: TemporalEmbedded or TemporalCluster.
	Temporal string
	// TemporalRestarts is how many times the Temporal server process is
	// SIGKILLed and started again on its data directory; with
	// TemporalCluster, how many times a node is, the two in turn.
	TemporalRestarts int
	// NodeDown is how long a killed node of the cluster stays down, runs
	// and approvals going on against the other, before it is started again.
	NodeDown time.Duration
	// PGRestarts is how many times PostgreSQL is restarted, PGRestart how.
	PGRestarts int
	PGRestart  string
	// RestartCommand restarts the PostgreSQL server for PGRestartCluster.
	RestartCommand []string
	// NetFaults is how many network faults are put between the workers
	// and what they reach (see netfaults.go), at moments spread over
	// Duration: a black hole both ways or one way, latency with jitter, a
	// throttled link, reset connections or refused ones, on one worker's
	// link to one destination, on all of one worker's links, or on every
	// worker's link to PostgreSQL or to Temporal at once. Each lasts
	// between NetFaultMin and NetFaultMax, then heals. Full: 120 of 5 s to
	// 90 s; Short: 6 of 5 s to 20 s. The workers reach everything through
	// the harness's proxies either way.
	NetFaults                int
	NetFaultMin, NetFaultMax time.Duration
	// FaultRate is the share of refunds that meet a provider fault, and of
	// e-mails that meet a dropped connection after the server accepted them.
	FaultRate float64
	// ProviderKeyRetention is how long the sandbox provider keeps an
	// idempotency key, and the refund tool's declared key lifetime; it must
	// be longer than the tool's timeout (90 s). Short, more retries meet a
	// key the provider has forgotten, where a resend would make a second
	// refund: the ledger then shows oncerun's own protocol rather than the
	// provider's deduplication.
	ProviderKeyRetention time.Duration
	// RejectRate is the share of approvals the harness rejects.
	RejectRate float64
	// DecideWithin bounds how long a step waits for its (random) decision.
	DecideWithin time.Duration
	// DailyCap, above 0, is set at the start as a cap of the runs' tenant
	// per UTC day on each tool the runs spend with, issue_credit and
	// refund_payment, each a cap of its own, in minor units of the plans'
	// currency (EUR). A step that would cross it waits for approval, and
	// the harness rejects it; the check then finds each tool's applied
	// amounts of each UTC day, at the destination, within the cap.
	// Default 0: no cap.
	DailyCap Cents
	// Deploy rolls the workers through Registries tool registries, Rolls
	// times over Duration, each roll a new Worker Deployment version made
	// current (see deploy.go); the runs also call a sandbox desk, an MCP
	// server, and the check holds each run's record against the
	// destinations by key. Default false.
	Deploy     bool
	Registries int
	Rolls      int
	// Seed makes the plan and the moments reproducible (the processes'
	// timing is not).
	Seed int64
}

// Full is the configuration of `make chaos`.
func Full() Config {
	return Config{
		Runs: 200, Delegating: 0.2, Workers: 4, CrashWorkers: 2, Kills: 1000,
		Duration: 20 * time.Minute, Settle: 10 * time.Minute,
		Temporal: TemporalEmbedded, TemporalRestarts: 3, NodeDown: 30 * time.Second,
		PGRestarts: 3, PGRestart: PGRestartCluster,
		NetFaults: 120, NetFaultMin: 5 * time.Second, NetFaultMax: 90 * time.Second,
		FaultRate: 0.2, RejectRate: 0.1, DecideWithin: 30 * time.Second,
		ProviderKeyRetention: 24 * time.Hour,
	}
}

// FullCluster is the configuration of `make chaos-cluster`: Temporal as two
// nodes on PostgreSQL, each killed twice and kept down half a minute, and
// every other fault of Full, for eight minutes.
func FullCluster() Config {
	c := Full()
	c.Temporal = TemporalCluster
	c.Runs, c.Workers, c.CrashWorkers, c.Kills = 100, 3, 1, 100
	c.Duration, c.Settle = 8*time.Minute, 10*time.Minute
	c.TemporalRestarts, c.NodeDown = 4, 30*time.Second
	c.PGRestarts = 2
	return c
}

// FullDeploy is the configuration of `make chaos`'s deploys: 300 runs
// and Full's faults, 1,000 kills in 15 minutes, while the workers roll
// through three registries five times.
func FullDeploy() Config {
	c := Full()
	c.Deploy, c.Registries, c.Rolls = true, 3, 5
	c.Runs, c.Duration, c.Kills = 300, 15*time.Minute, 1000
	c.TemporalRestarts, c.PGRestarts = 2, 2
	return c
}

// ShortDeploy is Short with the workers rolled through three registries
// twice: the configuration of the deploy mode's test in `make test`.
func ShortDeploy() Config {
	c := Short()
	c.Deploy, c.Registries, c.Rolls = true, 3, 2
	c.Workers, c.Kills = 4, 30
	c.Duration = 90 * time.Second
	return c
}

// Short is the configuration that runs inside `make test`: every kind of
// fault, fewer of each, and PostgreSQL "restarted" by cutting the
// harness's own connections, since other tests share the server.
func Short() Config {
	return Config{
		Runs: 20, Delegating: 0.2, Workers: 3, CrashWorkers: 1, Kills: 20,
		Duration: 60 * time.Second, Settle: 4 * time.Minute,
		Temporal: TemporalEmbedded, TemporalRestarts: 1, NodeDown: 15 * time.Second,
		PGRestarts: 1, PGRestart: PGRestartBackends,
		NetFaults: 6, NetFaultMin: 5 * time.Second, NetFaultMax: 20 * time.Second,
		FaultRate: 0.3, RejectRate: 0.1, DecideWithin: 10 * time.Second,
		ProviderKeyRetention: 24 * time.Hour,
	}
}

// ShortCluster is Short with Temporal as two nodes on PostgreSQL, each
// killed once and kept down 15 seconds: the configuration of the cluster's
// test in `make test`.
func ShortCluster() Config {
	c := Short()
	c.Temporal = TemporalCluster
	c.Runs, c.Kills = 12, 12
	c.Duration = 90 * time.Second
	c.TemporalRestarts = 2
	return c
}

func (c Config) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.Binary != "", "chaos: no oncerun binary")
	check(c.DatabaseURL != "", "chaos: no database URL (DATABASE_URL)")
	check(c.Dir != "", "chaos: no data directory")
	check(c.Runs >= 1, "chaos: --runs %d: want at least 1", c.Runs)
	check(c.Delegating >= 0 && c.Delegating <= 1, "chaos: --delegating %g: want 0 to 1", c.Delegating)
	check(c.Workers >= 1, "chaos: --workers %d: want at least 1", c.Workers)
	check(c.CrashWorkers >= 0 && c.CrashWorkers < c.Workers, "chaos: --crash-workers %d: want 0 to %d, so that one worker carries no crash fault", c.CrashWorkers, c.Workers-1)
	check(c.Kills >= 0, "chaos: --kills %d: want 0 or more", c.Kills)
	check(c.Duration > 0, "chaos: --duration %s: want more than 0", c.Duration)
	check(c.Settle > 0, "chaos: --settle %s: want more than 0", c.Settle)
	check(c.Temporal == TemporalEmbedded || c.Temporal == TemporalCluster, "chaos: --temporal %q: want %s or %s", c.Temporal, TemporalEmbedded, TemporalCluster)
	check(c.TemporalRestarts >= 0, "chaos: --temporal-restarts %d: want 0 or more", c.TemporalRestarts)
	check(c.NodeDown >= 0, "chaos: --node-down %s: want 0 or more", c.NodeDown)
	check(c.PGRestarts >= 0, "chaos: --pg-restarts %d: want 0 or more", c.PGRestarts)
	check(c.PGRestart == PGRestartCluster || c.PGRestart == PGRestartBackends, "chaos: --pg-restart %q: want %s or %s", c.PGRestart, PGRestartCluster, PGRestartBackends)
	check(c.PGRestart != PGRestartCluster || c.PGRestarts == 0 || len(c.RestartCommand) > 0, "chaos: --pg-restart cluster needs a restart command")
	check(c.NetFaults >= 0, "chaos: --net-faults %d: want 0 or more", c.NetFaults)
	check(c.NetFaults == 0 || c.NetFaultMin > 0 && c.NetFaultMax >= c.NetFaultMin,
		"chaos: network faults of %s to %s: want more than 0, the longest at least the shortest", c.NetFaultMin, c.NetFaultMax)
	check(c.FaultRate >= 0 && c.FaultRate <= 1, "chaos: --fault-rate %g: want 0 to 1", c.FaultRate)
	check(c.RejectRate >= 0 && c.RejectRate <= 1, "chaos: --reject-rate %g: want 0 to 1", c.RejectRate)
	check(c.DailyCap >= 0, "chaos: --daily-cap %s: want 0 or more", c.DailyCap)
	check(c.DecideWithin > 0, "chaos: --decide-within %s: want more than 0", c.DecideWithin)
	check(!c.Deploy || (c.Registries >= 2 && c.Registries <= 3), "chaos: --registries %d: want 2 or 3", c.Registries)
	check(!c.Deploy || c.Rolls >= 1, "chaos: --rolls %d: want at least 1", c.Rolls)
	check(!c.Deploy || c.DailyCap == 0, "chaos: --deploy and --daily-cap: the registries' rules differ, so the caps' account would not add up; use one at a time")
	check(c.ProviderKeyRetention > 90*time.Second, "chaos: --provider-key-retention %s: want more than 1m30s, the refund tool's timeout", c.ProviderKeyRetention)
	return errors.Join(errs...)
}
