package workflows

import (
	"errors"
	"strings"

	"go.temporal.io/sdk/temporal"
)

// runFailure is an error that ends a run: msg says in the run's words what
// failed (such as "plan turn 3"), err is why, with every detail Temporal
// gives, for the workflow's own failure and its log.
type runFailure struct {
	msg string
	err error
}

func (e *runFailure) Error() string { return e.msg + ": " + e.err.Error() }
func (e *runFailure) Unwrap() error { return e.err }

// failureMessage is what a run's status says of the error that ended it.
func failureMessage(err error) string {
	var f *runFailure
	if errors.As(err, &f) {
		return f.msg + ": " + failure(f.err)
	}
	return failure(err)
}

// failure is what a run records of an activity's failure: the failure's own
// message, without the scheduling details Temporal adds (activity type,
// event ids, the worker's identity, retryability), which stay in the log.
// The message is stable: the same failure reads the same on every worker.
func failure(err error) string {
	var act *temporal.ActivityError
	if errors.As(err, &act) {
		if cause := errors.Unwrap(act); cause != nil {
			err = cause
		}
	}
	var child *temporal.ChildWorkflowExecutionError
	if errors.As(err, &child) {
		if cause := errors.Unwrap(child); cause != nil {
			err = cause
		}
	}
	switch e := err.(type) {
	case *temporal.ApplicationError:
		return e.Message()
	case *temporal.TimeoutError:
		msg := "timed out (" + timeoutName(e) + ")"
		if cause := errors.Unwrap(e); cause != nil {
			msg += "; the last attempt: " + failure(cause)
		}
		return msg
	case *temporal.CanceledError:
		return "canceled"
	}
	return err.Error()
}

// timeoutName spells a timeout's type as people read it: start to close.
func timeoutName(e *temporal.TimeoutError) string {
	name := strings.TrimPrefix(e.TimeoutType().String(), "TIMEOUT_TYPE_")
	var b strings.Builder
	for i, r := range name {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
	}
	return strings.ToLower(strings.ReplaceAll(b.String(), "_", " "))
}
