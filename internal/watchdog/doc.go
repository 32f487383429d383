// Package watchdog is oncerun's expiry watchdog: it prunes the dedup keys
// whose retention window has run out, and alerts when a key is pruned, or
// about to expire, while its run is still open (docs/watchdog.md).
//
// # Parts
//
//   - [Config] configures it, with its defaults and [Config.Validate];
//   - [EnsureSchedule] creates or updates the Temporal Schedule that starts
//     one pass every [Config.Interval], however many workers there are;
//   - [Workflow] is a pass (registered as [WorkflowName]): batches of
//     [Activities.PruneExpired] (registered as [PruneActivityName]) with a
//     pause between them sized by [Config.DutyCycle];
//   - [Register] registers both on a worker;
//   - [Expiring] lists the keys of open runs that will expire soon, what
//     `oncerun keys --expiring` prints.
//
// Every statement on the keys table is the dedup store's
// (internal/idempotency); whether a run is open is internal/runs'. The
// workflow's code is deterministic: `make test` runs workflowcheck on this
// package and replays the passes recorded in testdata/histories.
package watchdog
