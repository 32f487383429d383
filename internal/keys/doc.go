// Package keys derives the two values that identify a side-effecting tool
// call in oncerun: its idempotency key and its arguments hash.
//
// # Keys
//
// A [Key] names one step of one run of one tenant:
//
//	v1/<tenant>/<run id>/<step>/<tool>
//
// Every part is escaped, so the string form is injective: no two distinct
// tuples produce the same key, whatever characters a run id holds. The
// runtime derives keys from the run's identity and the step number it assigns
// itself; a planner (a language model) never chooses one. Keys contain no
// random value and no timestamp, so a retry, a replay or a resumed run after a
// worker crash derives the same key again.
//
// # Arguments hash
//
// [ArgsHash] is the SHA-256 of the RFC 8785 (JSON Canonicalization Scheme)
// form of a tool call's arguments, in lower-case hex. Documents with the same
// meaning hash equal whatever their member order, whitespace, number spelling
// (1.0 and 1) or string escaping. Input that has no single meaning is refused:
// duplicate member names, invalid UTF-8, unpaired surrogate escapes, numbers
// outside the range of an IEEE 754 double, integers that no double holds
// exactly (such as 2⁵³+1, which would hash like 2⁵³), and numbers beyond 2⁵³
// whose canonical form would be an integer other than their value
// (100000000000000100.0 is the double written 100000000000000100, whose
// value is 100000000000000096). Send such values as strings.
package keys
