// Package reconcile compares oncerun's record of external effects with the
// providers' ledgers, by idempotency key, and records the drift it finds.
//
// oncerun sends each external call's key as the provider's idempotency key,
// so the provider's ledger lists every effect under our key. A pass
// ([Pass]), run by a cluster-wide Temporal Schedule or by `oncerun
// reconcile`, compares for each [Source] (a tool and a reader of its
// provider's ledger) the effects that have settled, and looks for outbox
// messages that were never delivered. What differs is a finding, kept in
// reconciliation_findings until a person acknowledges it ([Ack]).
//
// The package is the whole of reconciliation, as internal/watchdog is the
// whole of the watchdog: the pass, its [Workflow] and activity
// ([Activities], registered by [Register] under the names earlier releases
// used), its schedule ([EnsureSchedule]) and its [Config], read from the
// environment by [ConfigFromEnv].
//
// # The window
//
// Only effects older than Config.Settlement are compared, so that a call in
// progress (our key claimed, the provider's answer not yet stored) is not
// taken for drift. A pass looks back Config.Lookback: it reads the
// provider's effects made since then (and a settlement's margin more, for
// clocks that differ) and our completed keys created since then, so that
// every key of ours compared falls inside the provider's listing.
//
// # Kinds of finding
//
//   - under_recorded: the provider holds an effect whose key has no
//     completed row of ours. The detail says what we hold instead: no row,
//     or a row in flight or failed (then ours carries its failure). An
//     effect under a key that does not parse as one of ours is drift the
//     provider holds all the same: it is recorded under tenant "" with no
//     run or step; one without any key is recorded under the key
//     "provider:<provider id>".
//   - over_recorded: we completed a key the provider does not list, settled
//     or not.
//   - amount_mismatch: both hold the effect, with another amount or
//     currency, or the provider holds several effects under one key. When
//     our stored result cannot be read, the effect cannot be confirmed and
//     is recorded as a mismatch too.
//   - undelivered: an outbox message older than the settlement window that
//     is not delivered. A pending message is reported only once its run
//     closed (Config.RunOpen) or it is older than Lookback; unknown and
//     failed messages are reported at once, since no run resends them. A
//     run whose state cannot be read leaves its messages for a later pass.
//
// A finding's amount is in integer minor units, signed as the provider's
// amount minus ours: an under-recorded refund is positive, an
// over-recorded one negative. When the currencies differ it is the
// provider's amount in the provider's currency. Currency codes are kept in
// lower case. Reports and metrics sum absolute amounts by currency.
//
// # Once, until acknowledged
//
// A finding is recorded once per kind, tenant and key (INSERT ... ON
// CONFLICT DO NOTHING): a later pass that sees the same drift records
// nothing, and once acknowledged it is never raised again, even if the
// amounts change. A finding stays open until acknowledged, even if the
// drift disappears (a provider's ledger that caught up): a person decides.
// Acknowledging twice as the same person with the same note succeeds;
// otherwise the second acknowledgement is refused with ErrAlreadyAcked.
//
// # Report, metrics and alert
//
// After recording, a pass reports on every open finding ([Report]): their
// count, absolute amounts by currency, the age of the oldest effect and
// the findings themselves (the oldest MaxReportFindings). [Metrics]
// exposes the same per tenant and tool as oncerun_drift_count,
// oncerun_drift_amount and oncerun_oldest_unreconciled_age_seconds. Every
// pass logs an error for each tenant and tool whose oldest open finding is
// older than Config.AlertAge, naming the finding, until it is acknowledged.
//
// A source whose ledger cannot be read is left out of the pass: the others
// are compared and the report is made, and Pass returns the error beside
// it, so that the scheduled pass is retried.
package reconcile
