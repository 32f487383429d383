// Package workflows is the home of oncerun's deterministic workflow code: the
// agent run, one Temporal workflow per run, which numbers tool calls into
// steps, pauses for approvals and resumes from history after a crash.
//
// Only deterministic code belongs here: no wall clock, randomness, map
// iteration order or I/O. The package holds no workflow yet; the dedup store
// and keys it will call through activities live in internal/idempotency and
// internal/keys.
package workflows
