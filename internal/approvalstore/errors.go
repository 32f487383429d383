package approvalstore

import "errors"

// Why a decision or an answer was refused. Each comes wrapped in a
// [*RefusedError] that says why in words; the audit row written for the
// request, if any, is named with each.
var (
	// ErrNotFound means the tenant has no such step (or no such run): no
	// approvals row, or for an answer no resolutions row. Nothing is
	// recorded, so that nobody can fill the audit tables with made-up steps.
	ErrNotFound = errors.New("no such step")
	// ErrForbidden means the requester's role may not decide. Recorded as
	// OutcomeForbidden.
	ErrForbidden = errors.New("role may not decide")
	// ErrInvalid means the request's values were refused (the caller's
	// DecisionRequest.Invalid or ResolveRequest.Invalid, which the error
	// also wraps). Recorded as OutcomeInvalid.
	ErrInvalid = errors.New("invalid request")
	// ErrNotPending means the step is no longer waiting: it was decided or
	// expired, its deadline has passed, or (for an answer) the round named
	// is not one the step has. Recorded as OutcomeNotPending.
	ErrNotPending = errors.New("step is not pending")
	// ErrConflict means the step was already decided (or the round
	// answered) otherwise: a decision of record cannot be changed.
	// Recorded as OutcomeConflict.
	ErrConflict = errors.New("already decided otherwise")
	// ErrArgsHashMismatch means the args hash the approver reviewed is not
	// the step's: the arguments are stale, or another step's. Recorded as
	// OutcomeArgsMismatch.
	ErrArgsHashMismatch = errors.New("args hash is not the step's")
	// ErrResolvedOtherwise means the run recorded another outcome than the
	// decision of record (its deadline came first): neither repeating nor
	// changing the decision can be answered as applied. Recorded as
	// OutcomeNotPending.
	ErrResolvedOtherwise = errors.New("the run recorded another outcome")
	// ErrEditInvalid means an edit's arguments do not fit the step's tool:
	// they do not match its schema, or its edit rule refuses the change
	// (no edits, or an amount that may not grow). The message names the
	// field. Recorded as OutcomeInvalid; the step stays pending.
	ErrEditInvalid = errors.New("edit refused")
	// ErrWithdrawn means the step's run was cancelled, which withdrew its
	// approval: the step will never run, and no decision can change that.
	// Recorded as OutcomeNotPending.
	ErrWithdrawn = errors.New("approval withdrawn: the run was cancelled")
	// ErrOtherArguments means a step's row was recorded with other
	// arguments: it belongs to an earlier run under the same run id.
	ErrOtherArguments = errors.New("the step was recorded with other arguments")
	// ErrRoundChanged means the request names a round of the step's
	// approval that is not the one it waits in: the step was approved
	// under its tool's rule and now waits again at a spend limit (or the
	// other way round), so what the approver saw is not what is asked.
	// Recorded as OutcomeNotPending.
	ErrRoundChanged = errors.New("the step waits in another round")
)

// RefusedError is a decision, an answer or a pending row the store
// refused. Err is one of the sentinel errors; Message says why in words
// that name the step, and whoever decided it first.
type RefusedError struct {
	Err     error
	Message string
	// Cause is, for ErrInvalid, what the caller found wrong.
	Cause error
}

// Error is the message.
func (e *RefusedError) Error() string { return e.Message }

// Unwrap returns the sentinel and, if any, the cause.
func (e *RefusedError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Cause}
}

func refused(err error, message string) *RefusedError {
	return &RefusedError{Err: err, Message: message}
}
