// Package host wires a worker process: the PostgreSQL pool, migrations, the
// tool registry, the dedup store, the Temporal worker with oncerun's
// workflows and activities, and the HTTP server for /healthz and /metrics.
// `go run ./worker` is a thin main around [Run]; tests and the dev stack
// build workers with [NewWorker].
//
// # Fault injection
//
// [EnvCrashAt] and [EnvStallAt] make a worker kill (or stop) itself at a
// named point of a step ([Points]), for failure drills, the chaos harness
// and the crash-point tests; [EnvCrashAfterCommit] and
// [EnvCrashAroundEffect] are older spellings of two of them. Never set them
// in production.
package host
