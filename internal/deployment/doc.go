// Package deployment is oncerun's side of Temporal's Worker Versioning
// (Worker Deployments): what a deploy needs to see and to do, for the
// `oncerun deployment` commands and the dev stack (docs/deploy.md,
// "Rolling deploys").
//
// # Parts
//
//   - [Describe] reads a deployment: its versions, which one is current
//     and which ramps, each version's drainage and its pollers, with the
//     registry digest each poller's identity carries;
//   - [SetCurrent] and [Ramp] move new runs (and auto-upgrade runs) to a
//     version, after checking that the deployment has it;
//     [WaitForVersion] waits for a starting worker's version to be
//     registered;
//   - [Pin] and [Unpin] set and remove a run's pinned versioning
//     override, so that a run finishes on one build whatever is current;
//   - [Identity] and [DigestOfIdentity] are a worker's Temporal identity,
//     which carries its registry's short digest.
package deployment
