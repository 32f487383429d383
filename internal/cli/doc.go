// Package cli is the oncerun command line: run a worker or the approvals
// service on its own; migrate the database; start runs, read their status,
// cancel, pause, resume and message them; list, approve, reject and edit
// the steps waiting for approval and resolve those whose outcome is
// unknown; set the money limits on a tenant's tools; compare external
// effects with the providers' ledgers; list the registered tools and the
// keys that will expire; read the workers' Worker Deployment and move runs
// to a new build; check a build against the deployment's runs before it
// ships (replay); make tokens. Each command works against the
// approvals service when ONCERUN_API is set, and against DATABASE_URL and
// Temporal directly otherwise, through the same decision code. The mains
// cmd/oncerun and cmd/oncerun-dev (which adds the dev stack, the demo, the
// chaos harness and the sandboxes) are thin wrappers around [NewRoot].
package cli
