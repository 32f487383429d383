// Package idempotency is oncerun's dedup store: the PostgreSQL table that
// makes a side-effecting tool call take effect once however often it is
// delivered.
//
// Every call is identified by a [keys.Key] (tenant, run, step, tool) and the
// hash of its canonical arguments. The first caller claims the key by
// inserting its row; the table's primary key makes the claim atomic, so two
// callers can never both believe they own a key. A row is in one of three
// states:
//
//	(no row) --claim--> in_flight(owner, attempt, lease expiry)
//	in_flight --effect done--> completed(result)     later calls replay the result
//	in_flight --failed--> failed(failure)            before the effect: may be claimed again
//	                                                 otherwise: outcome unknown
//	in_flight, lease expired --> outcome unknown     the next caller takes the lease over
//	                                                 and must resolve it (paired read)
//
// # Two paths
//
// [Store.Do] is for effects that are writes to this same database. The claim,
// the effect and the completion commit in one transaction on one connection,
// so a crash between them is not a reachable state: either all of it
// committed, or none of it did and a retry starts afresh. A concurrent
// duplicate blocks on the primary key until the first transaction ends and
// then replays its committed result; it never runs the effect.
//
// [Store.Begin], [Store.Complete] and [Store.Fail] are for effects that leave
// the database (a payment provider, e-mail). Begin commits an in_flight row
// with a lease before the effect is attempted. Complete and Fail are
// conditional on the lease's owner and attempt number (a fencing token), so a
// stale worker whose lease was taken over cannot write its outcome over the
// new owner's. A caller that meets a live lease gets [ErrInFlight] and should
// retry later; one that meets an expired lease takes it over and gets
// [ErrOutcomeUnknown], never a silent re-run.
//
// # Keys outside a call
//
// This package is the one owner of the table: every statement on it is
// here. The expiry watchdog prunes through [DueKeys], [LockDueKeys],
// [DeleteKeys] and [HoldKeys]; `oncerun keys --expiring` lists through
// [ExpiringKeys], and a run pausing for approval checks its keys with
// [RunKeysExpiringBefore]. Checks of what became of calls read
// [KeyRecord]s ([KeysOf], [KeysOfRun], [CompletedKeys], [CountInFlight]).
// Each takes the caller's pool or transaction.
//
// # Guarantees
//
// The same key with another arguments hash is a bug in the caller (key reuse)
// and fails with [ErrKeyReuse] before any effect. Rows are namespaced by
// tenant: a tenant's key never reads or collides with another tenant's. All
// work runs at READ COMMITTED; correctness comes from the unique index and
// conditional updates, and all lease arithmetic uses the database's clock, so
// workers with skewed clocks agree on who holds a lease.
//
// # Run trees' intents
//
// The store also holds a run tree's claims on its intents: a tool that
// makes each intent (the tool and its arguments' canonical hash) once per
// run makes it once per tree of runs, a run and its child runs and
// theirs, even when two of them propose it at the same moment (two
// children of one parallel turn, or a parent's step beside its child's).
//
// A step claims the intent in the table tree_intents, by the tree's first
// run. The claim of a natural or keyed step commits in its effect's
// transaction ([ClaimIntentTx]): a claim of such a tool means its effect exists.
// An external step claims before its call ([ClaimIntent]), checks once it
// holds its key's lease that the claim is still its own ([HoldsIntent]), and
// gives it up when its attempt ends with nothing that may have taken
// effect ([ReleaseIntent]). A step that finds the intent held by another step
// learns where that step's call stands from the holder's key in the dedup
// store:
//
//	completed                   the step is a duplicate of the holder ([*IntentDuplicateError])
//	in flight, or failed with   the step waits ([*IntentHeldError], which is
//	the outcome unknown         [ErrInFlight]: retried with backoff)
//	failed before any effect    the step takes the claim over and makes it
//	no row                      an external holder that has not begun: the
//	                            step waits; a natural or keyed holder's key
//	                            that was pruned: a duplicate
//
// Pruning a key ([DeleteKeys]) prunes the claims it holds.
package idempotency
