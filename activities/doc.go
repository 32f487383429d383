// Package activities holds oncerun's Temporal activities. [Activities]
// carries their dependencies and is registered whole on a worker:
//
//   - [Activities.Plan] asks the run's planner for the next calls and checks
//     each against its tool (schema, canonical arguments, approval rule);
//   - [Activities.RunTool] executes one step through the dedup store, under
//     the key derived from tenant, run, step and tool, according to the
//     tool's effect class;
//   - [Activities.RequestApproval] and [Activities.ResolveApproval] keep the
//     approvals table that inboxes list.
//
// # Errors
//
// Failures that retrying cannot fix (key reuse, invalid arguments, an
// unknown tool or planner) are non-retryable Temporal application errors
// whose types are the Err* constants of this package; an in-flight key is a
// retryable error, so Temporal backs off and tries again.
package activities
