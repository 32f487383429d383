// Package approvalstore owns the tables of the steps that wait for people:
// approvals and approval_decisions (steps that ask for approval, and every
// decision request on them), resolutions and resolution_decisions (steps
// whose external effect's outcome is unknown, and every answer about them),
// and run_controls (every cancel, pause, resume and message an operator
// sent a run).
// Every statement on these tables is here, and nowhere else; a test walks
// the repository to keep it so.
//
// # Who writes what
//
//   - The run writes the rows of approvals and resolutions, through its
//     activities: [RecordPending] when a step pauses, [RecordOutcome] when
//     it is decided or expires; [RecordUnresolved] and [RecordResolved] for
//     an unknown outcome.
//   - People's decisions and answers are written by [Decide] and [Resolve]
//     only, whatever they come through (the approvals service's API and
//     inbox, or the CLI with the database's credentials): each checks that
//     the step exists and that the requester may decide, locks the step's
//     row, and records the request in the audit table, accepted or refused,
//     before the caller signals the run. Decide and Resolve never signal:
//     internal/runs does, after them, and has no other way to.
//   - Operators' requests to a run are recorded by [RecordControl], one row
//     each, and a cancel the run took withdraws its pending approvals with
//     [WithdrawRun]; a decision on a withdrawn step is [ErrWithdrawn].
//   - Readers list the rows: the approvals service's views ([ListPending],
//     [ListDecided], [ListNeedsResolution], [ListUnresolved]) and the CLI's
//     ([PendingApprovals], [PendingResolutions]).
//
// # Errors
//
// A refused request is a [*RefusedError] that wraps one of the sentinel
// errors ([ErrNotFound], [ErrForbidden], [ErrInvalid], [ErrNotPending],
// [ErrConflict], [ErrArgsHashMismatch], [ErrResolvedOtherwise],
// [ErrWithdrawn]) and says
// why in words. Nothing here knows HTTP: the approvals service maps the
// sentinels to status codes, the CLI prints the words.
package approvalstore
