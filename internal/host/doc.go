// Package host wires a worker process: the PostgreSQL pool, migrations, the
// tool registry, the dedup store, the Temporal worker with oncerun's
// workflows and activities, and the HTTP server for /healthz and /metrics.
// `go run ./worker` is a thin main around [Run]; tests and the dev stack
// build workers with [NewWorker].
package host
