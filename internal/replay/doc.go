// Package replay checks a build of oncerun against the runs a deployment
// actually has, before the build ships: `oncerun replay` is its command.
//
// For each run ([Execution]) it reads the run's whole history (from
// Temporal, or from a JSON file as `temporal workflow show --output json`
// writes it) and checks two things ([Check]):
//
//   - Replay. The history is replayed with this build's workflow code
//     (workflows.AgentRun, through the SDK's WorkflowReplayer). An error is
//     a change that would break the run in flight: the result names the
//     error and the first event of the history that the code no longer
//     produces ([Event], found from what the SDK's message says of it).
//   - Step identity under this build's registry (docs/agent-runs.md, "Step
//     identity"), for a run that is still open. The run's status at the end
//     of the replay is read through the status query's handler, which an
//     interceptor of the replayer keeps when the workflow registers it.
//     Every step that has not ended (waiting for approval, approved,
//     running, waiting for a person's answer or resolution) must find its
//     tool in the registry, with a schema that accepts its arguments, a
//     canonical form that hashes to the step's args hash, and the step's
//     effect class: a step that does not would change "whether it is
//     allowed" on this build. A delegating step (class delegate) is not
//     checked: its child run was decided when it was planned, and is a run
//     of its own. A run that began before step identity (no
//     bundled-changes-1 marker of version 3 or more) numbered only the
//     calls its registry accepted: each recorded planning turn's calls are
//     checked again, and a call recorded valid that this build refuses, or
//     refused that it accepts, would renumber the steps after it were the
//     turn planned again.
//
// A closed run is replayed (a query of it replays it on a worker) but its
// step identity is not checked: no step of it will run again, and a gate
// that failed on the tools of finished runs would keep a deployment from
// ever removing one.
//
// The checks read the history only: they reach no database and run no
// activity. [Check] works through the runs a few at a time
// (Config.Concurrency) and reports them in the order given ([Report]).
package replay
