// Package worker runs an oncerun worker process: the PostgreSQL pool and the
// migrations, the one tool registry (the built-in tools and a deployment's
// own, [Config.Tools]), the dedup store, the Temporal worker with oncerun's
// workflows and activities, the expiry watchdog's and the reconciler's
// schedules, the HTTP server for /healthz and /metrics and, with a tokens
// file, the approvals service.
//
// # Running a worker
//
// `oncerun worker` is [Run] with the configuration [ConfigFromEnv] reads; a
// deployment that adds its own tools calls [Run] from its own main, or
// builds its whole command line with starter/oncerun. Run is two steps a
// main may also take itself: [Build] connects, migrates and builds every
// part (releasing what it acquired when a step fails) and returns a
// [Process]; [Process.Serve] runs it until its context ends, and
// [Process.Close] releases it. A deployment that assembles its own Temporal
// worker does it with [NewWorker], [DialTemporal], [NewPool] and
// [Registry], as the integration tests do.
//
// # Versions
//
// A worker computes a digest of its registry (every tool's definition,
// with its MCP server or its sub-agent; see [tools.Registry.Digest]): its
// start line, /metrics (oncerun_worker_registry_info), its Temporal
// identity and `oncerun tools` carry it. With [Config.Versioning] (a
// Worker Deployment name, TEMPORAL_DEPLOYMENT_NAME) the worker polls as one
// version of that deployment, its build ID by default made of its
// executable's digest and its registry's, and registers AgentRun as
// auto-upgrade (or pinned) and the watchdog's and reconciliation's passes
// as pinned; docs/deploy.md, "Rolling deploys", is the procedure.
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
