// Package runs is the client side of oncerun: start a run idempotently, read
// its status, decide its pending steps and answer its unknown outcomes, and
// list what waits for people. The CLI and the approvals service are thin
// layers over a [Client].
//
// # Starting a run twice
//
// A run's workflow ID is derived from its tenant and run id, and runs start
// with the ID reuse policy REJECT_DUPLICATE, asking the server to answer
// "already started" for a run id it knows, running or closed: starting the
// same run again returns the first, and only then is the run described.
// The run's input hash is stored in the workflow's memo: the same run id
// started with another input is reported as [ErrConflict].
//
// # Deciding
//
// [Client.Decide] and [Client.Resolve] are the only ways a decision or an
// answer reaches a run, whoever sends it (the approvals service's API and
// inbox, the CLI without it): each records the request through
// internal/approvalstore (the role, the step's row lock, the audit row)
// and only then signals the run. A decision without its audit row cannot
// be sent from here.
//
// # Operators' controls
//
// [Client.Operate] is the one way a cancel, a pause, a resume or a message
// reaches a run from the service or the CLI: it checks the request, sends
// it as the run's update ([Client.Cancel], [Client.Pause], [Client.Resume],
// [Client.Message]), withdraws a cancelled run's pending approvals in the
// approvals table, and records the request in its audit table, whatever
// became of it.
package runs
