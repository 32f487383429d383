package idempotency

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/oncerun/oncerun/internal/edge"
)

// MaxResultBytes bounds a result the store keeps, as it bounds a run's
// input: a run carries its steps' results in its history, whose payloads
// Temporal refuses past 2 MiB.
const MaxResultBytes = 1 << 20

// maxFailureBytes bounds the message a failure records.
const maxFailureBytes = 8 << 10

// ErrUnstorable means a result is one the store refuses to keep: a NUL or
// another control character in a string (PostgreSQL refuses a NUL in
// jsonb), a number that cannot be read back, a document nested too deep or
// larger than MaxResultBytes. See [CheckResult]. Nothing was written.
//
// For an effect in the database the transaction rolls back with the key,
// and the call fails for good: retrying cannot change the result. For an
// external call the effect was made and only its record is refused, so the
// key is left unresolved for a person ([Store.External]).
var ErrUnstorable = errors.New("result cannot be stored")

// UnstorableError reports a result the store refuses, saying why.
type UnstorableError struct {
	// Reason says what is wrong and where, from internal/edge.
	Reason string
}

// Error says why the result is refused.
func (e *UnstorableError) Error() string { return fmt.Sprintf("%s: %s", ErrUnstorable, e.Reason) }

// Is reports whether target is [ErrUnstorable].
func (e *UnstorableError) Is(target error) bool { return target == ErrUnstorable }

// CheckResult reports why the store would refuse result, as an
// [*UnstorableError], or nil. The rules are those of everything that
// enters oncerun (internal/edge.Value): valid JSON of at most
// MaxResultBytes, strings of text (no NUL, no control character but tab,
// newline and carriage return), nesting at most edge.MaxJSONDepth deep,
// numbers that can be read back. An empty result is JSON null.
func CheckResult(result json.RawMessage) error {
	if len(result) == 0 {
		return nil
	}
	if err := edge.Value("result", result, MaxResultBytes); err != nil {
		return &UnstorableError{Reason: err.Error()}
	}
	return nil
}

// storedResult returns result as the store keeps it: null when empty,
// refused when CheckResult refuses it.
func storedResult(result json.RawMessage) (json.RawMessage, error) {
	if len(result) == 0 {
		return json.RawMessage("null"), nil
	}
	return result, CheckResult(result)
}

// stored returns f as it is recorded: its message escaped (a provider's
// answer may hold a NUL, which a jsonb column refuses, or bytes that are
// not UTF-8) and cut to maxFailureBytes.
func (f Failure) stored() Failure {
	f.Message = edge.Clean(f.Message, maxFailureBytes)
	return f
}
