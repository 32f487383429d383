// Package integration holds oncerun's end-to-end tests: a real Temporal
// server in-process (go.temporal.io/server/temporaltest), the real
// PostgreSQL, and oncerun's own worker, client and CLI. The server is large,
// so every test that links it lives in this one package.
//
// Run with ONCERUN_RECORD_HISTORIES=<dir> to write the histories of the runs
// these tests complete as JSON files into dir; workflows/testdata/histories
// holds the recorded set that the replay test checks, and
// internal/watchdog/testdata/histories the watchdog's passes (make
// record-histories moves them there).
package integration
