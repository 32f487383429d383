// Package chaos is oncerun's chaos harness: it runs many agent runs with
// steps of every effect class through the approvals API while it kills
// worker processes, the Temporal server and PostgreSQL, fails the
// workers' network, injects provider and mail faults, and then counts
// every effect where it landed — the business tables, the sandbox payment
// provider's ledger and the mailbox — never trusting oncerun's own status
// alone. From the workers' logs it also measures how soon the activity
// attempts a worker was running when it died started again on another
// worker (the resume time).
//
// Every part runs as its own process started from the oncerun binary
// (`oncerun-dev temporal-server`, `oncerun-dev sandbox-payments`, `oncerun serve`,
// `oncerun worker`), except the SMTP server, whose mailbox is the harness's
// own ledger of e-mails. `oncerun-dev chaos` is the command; `make chaos` runs
// the full configuration. With TemporalCluster (`make chaos-cluster`),
// Temporal is two server nodes whose state is in PostgreSQL, behind a TCP
// load balancer of the harness's own, and the nodes are killed in turn.
//
// # Network faults
//
// Every worker reaches PostgreSQL, Temporal, the provider, the SMTP server
// and the desk through TCP proxies of the harness (internal/netfault), one
// per worker and destination, kept across the worker's restarts; the API
// server and the harness's checks connect directly. Config.NetFaults
// faults are put on them, seeded: black holes both ways or one way,
// latency, a throttled link, reset or refused connections, on one
// worker's link, all of one worker's links, or every worker's link to
// PostgreSQL or to Temporal at once (a zone lost). The report gives the
// faults by kind and scope, how soon after each heal the workers it
// reached started an activity attempt again, how soon a worker cut off
// from PostgreSQL or Temporal logged that it gave its work back and, after
// the heal, that it took work again; and what was left behind once the
// runs settled: backends of the harness's database idle in a transaction
// (a violation past 30 s), and each worker's goroutines, memory, open
// files and proxied connections against before the network faults.
//
// With a daily cap (Config.DailyCap, `--daily-cap`), the runs' tenant has a
// cap per UTC day on issue_credit and on refund_payment, below what the
// runs propose: the steps that would cross it wait for approval at the
// limit, the harness rejects each of them, and the check sums each tool's
// amounts per UTC day where they landed, the credits table and the
// provider's ledger, against the cap.
package chaos
