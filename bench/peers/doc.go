// Command peers measures oncerun side by side with its peers: DBOS Transact
// for Go and a plain Temporal workflow, each making runs of the same steps,
// every step inserting one order note in PostgreSQL.
//
//	cd bench/peers && go run . [-rounds 5] [-runs 1,40] [-steps 10] [-temporal sqlite,postgres] [-json]
//
// # The implementations
//
//   - oncerun: a scripted run of keyed add_order_note steps, started through
//     the approvals API (POST /v1/runs) of a worker running in this process;
//     each step's note commits with its idempotency key.
//   - plain: a Temporal workflow making the same inserts as regular
//     activities, one transaction each, on a worker of its own in this
//     process. No planner, no keys, no status.
//   - plain-local: the same workflow with local activities, in the run's
//     workflow task, as oncerun's database steps run: the least a step
//     costs on Temporal.
//   - dbos-tx: a DBOS workflow whose steps are RunAsTransaction calls on a
//     data source that is DBOS's own system database, so that each note and
//     its step's checkpoint commit in one transaction. The baseline of the
//     ratios.
//   - dbos-step: the same workflow with RunAsStep, the note committed in a
//     transaction of its own and checkpointed after it: at least once.
//
// Each implementation has databases of its own on one PostgreSQL server,
// made fresh for each Temporal server and dropped at the end, and a pool of
// the same size (DBOS one connection more: its LISTEN connection holds one).
//
// # What is measured
//
// Temporal's server runs as a separate process (`oncerun-dev
// temporal-server`, on SQLite or on PostgreSQL), one kind after the other;
// DBOS does not use it but is measured in the same rounds. Each round
// measures every implementation at every concurrency, the implementations
// in a rotated order, after a warm-up. A measured half at concurrency c
// makes max(c, -min-runs) runs, c at a time, and records its wall time and
// the CPU time, from /proc, of three parts:
//
//   - process: this process (the workers, the API, DBOS, the clients);
//   - temporal: the Temporal server process and its children, charged only
//     to the implementations that use it;
//   - postgres: the PostgreSQL backends connected to the implementation's
//     databases (Temporal's too, when it runs on PostgreSQL), and
//     PostgreSQL's background processes. Backends of other databases, other
//     clients' on a shared machine, are left out. A backend that ends during
//     a half takes its CPU time with it; the count of those is reported.
//
// The output is a table per Temporal server and concurrency: CPU per step
// and steps per second, medians with their range over the rounds, and
// their ratios to dbos-tx; then the goals, and every half as a line of Go's
// benchmark format for benchstat.
package main
