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
// ONCERUN_CRASH_AT and ONCERUN_STALL_AT make a worker kill (or stop) itself
// at a named point of a step, for failure drills, the chaos harness and the
// crash-point tests (ONCERUN_CRASH_AFTER_COMMIT and
// ONCERUN_CRASH_AROUND_EFFECT are older spellings of two of them). They
// are read from the environment only, by [ConfigFromEnv]; the names and
// points are in internal/settings, not in this package's API. Never set
// them in production.
package worker
