// Package inbox is the approvals service's web page, served in front of
// its API: the steps that wait for a person (approvals, steps whose
// outcome is unknown), the runs, the decided steps and the limits, with the
// forms that decide, edit, answer, ask the provider again, and cancel,
// pause or resume a run.
//
// The page at / lists the tenant's pending steps with their arguments (the
// amounts as money), the run's goal and earlier steps, time left, and
// Approve, Reject and Edit. A run's page groups its steps by planning
// turn, shows a pause and a cancelled run's receipt, offers an operator
// Cancel and Pause or Resume, and what the run spent against its budget.
// /decided lists the decided steps and /runs the tenant's runs, in pages,
// newest first. A step whose outcome is unknown leads with one sentence,
// keeps the detail behind a disclosure and offers to check with the
// provider again. /limits lists the tenant's spend caps, each with a bar of
// the share used; a step that waits at a limit says which on its card, and
// approving it reads as the exception it is.
//
// The pages update themselves: the inbox follows its tenant's event stream
// (/events) and the run page its run's (/runs/{run_id}/events), both
// Server-Sent Events under the session (docs/events.md). A card appears,
// leaves or changes state, and a model's text comes in, without a reload;
// after a dropped connection the browser resumes and the page catches up.
// Without JavaScript the pages are as they were.
//
// The inbox holds no state and writes no row: every form goes through
// the API's Go methods ([API], which *approvals.Server implements), so that
// a decision taken in the inbox takes the one audited path a decision of
// the HTTP API takes. A browser signs in with an API token, kept in an
// HttpOnly, SameSite=Strict cookie (Secure and named __Host-oncerun_token
// over TLS); every form carries the session's CSRF token, and a form from
// another origin is refused. The message a form leaves for the next page
// travels in a cookie signed with HMAC-SHA256 for the session: one the
// inbox did not sign is not shown.
//
//	api, err := approvals.New(approvals.Config{...})
//	ib, err := inbox.New(inbox.Config{API: api})
//	http.ListenAndServe(addr, ib.Handler()) // the inbox at /, the API under /v1
package inbox
