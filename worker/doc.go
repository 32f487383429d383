// Package worker runs an oncerun worker process: the PostgreSQL pool and the
// migrations, the one tool registry (the built-in tools and a deployment's
// own, [Config.Tools]), the dedup store, the Temporal worker with oncerun's
// workflows and activities, the expiry watchdog's and the reconciler's
// schedules, the HTTP server for /healthz and /metrics and, with a tokens
// file, the approvals service. `oncerun worker` is [Run] with the
// configuration [ConfigFromEnv] reads; a deployment that adds its own tools
// calls [Run] from its own main, or builds its whole command line with
// starter/oncerun. Tests and the dev stack build workers with [NewWorker].
//
// # Fault injection
//
// [EnvCrashAt] and [EnvStallAt] make a worker kill (or stop) itself at a
// named point of a step ([Points]), for failure drills, the chaos harness
// and the crash-point tests; [EnvCrashAfterCommit] and
// [EnvCrashAroundEffect] are older spellings of two of them. Never set them
// in production.
package worker
