// Package approvals is the approvals service's API: an authenticated HTTP
// API through which people start runs, see what a run wants to do, and
// approve or reject the steps that wait for them, and the same in Go
// ([Server]'s methods). The web inbox in front of it is package
// approvals/inbox.
//
// # API
//
// JSON under /v1, authenticated by bearer tokens (see [Tokens]):
//
//	POST /v1/runs                                   start a run (operator)
//	GET  /v1/runs/{run_id}                          a run's status and steps
//	GET  /v1/approvals?state=pending|decided|needs_resolution
//	POST /v1/runs/{run_id}/steps/{step}/approve     decide (approver, operator)
//	POST /v1/runs/{run_id}/steps/{step}/reject
//	POST /v1/runs/{run_id}/steps/{step}/edit        approve with other arguments (approver, operator)
//	POST /v1/runs/{run_id}/steps/{step}/resolve     answer an unknown outcome (approver, operator)
//	POST /v1/runs/{run_id}/steps/{step}/check       ask the provider again with the step's paired read (approver, operator)
//	POST /v1/runs/{run_id}/cancel                   cancel a run, with its receipt (operator)
//	POST /v1/runs/{run_id}/pause                    pause a run (operator)
//	POST /v1/runs/{run_id}/resume                   resume a paused run (operator)
//	POST /v1/runs/{run_id}/messages                 a message for the run's planner (operator)
//	GET  /v1/limits                                 the tenant's spend caps, with what each spent and holds
//	GET  /v1/limits/{name}                          one of them
//	PUT  /v1/limits/{name}                          set or replace a cap (operator)
//	DELETE /v1/limits/{name}                        delete a cap (operator)
//
// Errors are {"error": {"code": "...", "message": "..."}}.
//
// # Decisions
//
// A decision is bound to the arguments hash the approver saw, and to the
// round of the step's approval (a step approved under its tool's rule that
// then meets a spend limit waits again, in round 2). It is written
// to the audit table (who, when, what, from which address) before it is
// signalled to the run; the first accepted decision of a step is its
// decision of record, a repeat of it is answered with the original, and a
// different one is refused. Refused attempts are recorded too. The service,
// the inbox and the CLI without ONCERUN_API decide through the same code
// (runs.Client.Decide over internal/approvalstore, which owns the tables);
// this package only maps its refusals to HTTP answers.
//
// # Resolutions
//
// A step of an external tool whose outcome nobody could tell waits in
// needs_resolution until a person says whether the effect happened:
// applied (with the provider's result, if known) or not_applied. Such steps
// are listed under needs_resolution with kind outcome_unknown, and answers
// are recorded in their own audit table, one answer of record per round,
// with the guarantees of decisions. A check runs the tool's paired read
// now; when the provider holds the effect, the step is answered applied
// with the provider's record, through the same path.
//
// # Operators' controls
//
// Cancel, pause, resume and messages reach a run as its Temporal updates,
// through the one path every such request takes (runs.Client.Operate):
// the run validates each and answers at once; a cancel withdraws the
// approvals the run waits for, in the approvals table too, so that a
// decision sent after is refused (409 approval_withdrawn). Every request
// an operator sends is one audit row, whatever became of it.
//
// # In Go
//
// [Server.Decide], [Server.Resolve], [Server.Check], [Server.Control],
// [Server.List], [Server.Limits] and [Server.Status] are what the /v1
// handlers call, and what the inbox calls, with its own lists
// ([Server.Withdrawn], [Server.Approval], [Server.ListRuns]): a decision and an answer share their shape (a
// [StepRequest]: the [Caller], the run, the step, the round), and each
// refusal is an [*APIError] with the status the HTTP API answers.
package approvals
