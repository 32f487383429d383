// Package workflows holds oncerun's deterministic workflow code: [AgentRun],
// one Temporal workflow per agent run, which asks the planner for tool calls,
// numbers them into steps, pauses for approvals and resumes from history
// after a crash.
//
// # Talking to a run
//
// A run's workflow ID is [WorkflowID] of its tenant and run id. The
// [SignalApproval] signal carries an [Approval] for one step; the
// [QueryStatus] query returns the run's [Status].
//
// # Determinism
//
// Only deterministic code belongs here: no wall clock, randomness, map
// iteration order or I/O. `make test` runs workflowcheck on the package and
// replays the histories recorded in testdata/histories.
package workflows
