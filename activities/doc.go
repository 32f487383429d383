// Package activities is the home of oncerun's Temporal activities: structs
// that carry their dependencies (the dedup store, a logger) and execute one
// tool call under its idempotency key, mapping the store's errors to
// retryable and non-retryable Temporal errors.
//
// The package holds no activity yet; internal/idempotency is the store they
// will run through.
package activities
