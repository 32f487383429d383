// Package runs is the client side of oncerun: start a run idempotently, read
// its status, decide its pending steps and list what waits for approval. The
// CLI and the approvals service are thin layers over a [Client].
//
// # Starting a run twice
//
// A run's workflow ID is derived from its tenant and run id, and runs start
// with the ID reuse policy REJECT_DUPLICATE and the conflict policy
// USE_EXISTING, so starting the same run again, running or closed, returns
// the first. The run's input hash is stored in the workflow's memo: the same
// run id started with another input is reported as [ErrConflict].
package runs
