// Package intents holds a run tree's claims on its intents: a tool that
// makes each intent (the tool and its arguments' canonical hash) once per
// run makes it once per tree of runs, a run and its child runs and
// theirs, even when two of them propose it at the same moment (two
// children of one parallel turn, or a parent's step beside its child's).
//
// A step claims the intent in the table tree_intents, by the tree's first
// run. The claim of a natural or keyed step commits in its effect's
// transaction ([ClaimTx]): a claim of such a tool means its effect exists.
// An external step claims before its call ([ClaimCall]). A step that finds
// the intent held by another step learns where that step's call stands
// from the holder's key in the dedup store:
//
//	completed                   the step is a duplicate of the holder ([*DuplicateError])
//	in flight, or failed with   the step waits ([*HeldError], which is
//	the outcome unknown         idempotency.ErrInFlight: retried with backoff)
//	failed before any effect    the step takes the claim over and makes it
//	no row                      an external holder that has not begun: the
//	                            step waits; a natural or keyed holder's key
//	                            that was pruned: a duplicate
package intents
