package idempotency

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/oncerun/oncerun/internal/untrusted"
)

// MaxResultBytes bounds a result the store keeps, as it bounds a run's
// input: a run carries its steps' results in its history, whose payloads
// Temporal refuses past 2 MiB.
const MaxResultBytes = 1 << 20

// maxFailureBytes bounds the message a failure records.
const maxFailureBytes = 8 << 10

// ErrUnstorable means a result is one the store refuses to keep: a NUL in
// a string (PostgreSQL refuses one in jsonb), a number that cannot be read
// back, a document nested too deep or larger than MaxResultBytes. See
// [CheckResult]. Nothing was written.
//
// For an effect in the database the transaction rolls back with the key,
// and the call fails for good: retrying cannot change the result. For an
// external call the effect was made and only its record is refused, so the
// key is left unresolved for a person ([Store.External]).
var ErrUnstorable = errors.New("result cannot be stored")

// UnstorableError reports a result the store refuses, saying why.
type UnstorableError struct {
	// Reason says what is wrong and where, from internal/untrusted.
	Reason string
	// Excerpt is the result, escaped (untrusted.Escape) and cut to its first 300
	// bytes, so that a person who settles it sees what came back.
	Excerpt string
}

// maxExcerptBytes bounds an UnstorableError's Excerpt.
const maxExcerptBytes = 300

// Error says why the result is refused.
func (e *UnstorableError) Error() string { return fmt.Sprintf("%s: %s", ErrUnstorable, e.Reason) }

// Is reports whether target is [ErrUnstorable].
func (e *UnstorableError) Is(target error) bool { return target == ErrUnstorable }

// CheckResult reports why the store would refuse result, as an
// [*UnstorableError], or nil. The rules are those of a value kept as it
// came (internal/untrusted.Value): valid JSON of at most MaxResultBytes, nesting
// at most untrusted.MaxJSONDepth deep, no NUL in a string, numbers that can be
// read back. Other control characters are data: kept, and escaped wherever
// a result is shown. An empty result is JSON null.
func CheckResult(result json.RawMessage) error {
	if len(result) == 0 {
		return nil
	}
	if err := untrusted.Value("result", result, MaxResultBytes); err != nil {
		return &UnstorableError{Reason: err.Error(), Excerpt: excerpt(result)}
	}
	return nil
}

// excerpt is result escaped, cut to maxExcerptBytes with an ellipsis.
func excerpt(result json.RawMessage) string {
	s := untrusted.Escape(string(result))
	if len(s) <= maxExcerptBytes {
		return s
	}
	return untrusted.Cut(s, maxExcerptBytes) + "…"
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
	f.Message = untrusted.Clean(f.Message, maxFailureBytes)
	return f
}
