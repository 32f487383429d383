// Package devstack is oncerun on a laptop in one process: `oncerun-dev dev`
// starts an embedded Temporal server (unless TEMPORAL_ADDRESS names one),
// migrates the database and runs a worker; `oncerun-dev demo` tells the
// product's story end to end and checks it; `oncerun worker` is the worker
// alone, which the demo runs as a child process so that it can kill it.
//
// It links Temporal's server, so the CLI's other commands live in
// internal/cli, which does not.
package devstack
