// Package chaos is oncerun's chaos harness: it runs many agent runs with
// steps of every effect class through the approvals API while it kills
// worker processes, the Temporal server and PostgreSQL, injects provider
// and mail faults, and then counts every effect where it landed — the
// business tables, the sandbox payment provider's ledger and the mailbox —
// never trusting oncerun's own status alone. From the workers' logs it also
// measures how soon the activity attempts a worker was running when it died
// started again on another worker (the resume time).
//
// Every part runs as its own process started from the oncerun binary
// (`oncerun-dev temporal-server`, `oncerun-dev sandbox-payments`, `oncerun serve`,
// `oncerun worker`), except the SMTP server, whose mailbox is the harness's
// own ledger of e-mails. `oncerun-dev chaos` is the command; `make chaos` runs
// the full configuration. With TemporalCluster (`make chaos-cluster`),
// Temporal is two server nodes whose state is in PostgreSQL, behind a TCP
// load balancer of the harness's own, and the nodes are killed in turn.
//
// With a daily cap (Config.DailyCap, `--daily-cap`), the runs' tenant has a
// cap per UTC day on issue_credit and on refund_payment, below what the
// runs propose: the steps that would cross it wait for approval at the
// limit, the harness rejects each of them, and the check sums each tool's
// amounts per UTC day where they landed, the credits table and the
// provider's ledger, against the cap.
package chaos
