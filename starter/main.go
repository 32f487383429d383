// Command oncerun is oncerun's command line.
//
// Usage:
//
//	oncerun dev [--data-dir DIR] [--temporal-port 7233]
//	oncerun demo
//	oncerun migrate [--database-url URL]
//	oncerun start --tenant T --run-id R (--plan FILE | --goal TEXT) [--json]
//	oncerun status --tenant T --run-id R [--json]
//	oncerun approvals [--tenant T] [--state S] [--json]
//	oncerun approve|reject [--tenant T] --run-id R --step N [--as NAME] [--comment TEXT]
//	oncerun worker
//	oncerun serve
//	oncerun token new --name N --tenant T --role R [--add-to FILE]
//	oncerun resolve [--tenant T] --run-id R --step N --outcome applied|not_applied [--result JSON] [--note TEXT]
//	oncerun reconcile [--json] | --ack ID --note TEXT
//	oncerun sandbox-payments --addr 127.0.0.1:8099 --data-dir DIR [--key-retention 24h] [--payments FILE]
//
// Environment: DATABASE_URL, TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
// TEMPORAL_TASK_QUEUE, USER (the default approver name), ONCERUN_API and
// ONCERUN_TOKEN (start, status, approvals, approve and reject through the
// approvals service), and for dev, worker and serve the worker's variables
// (`oncerun worker --help`).
//
// A deployment with tools of its own builds this same command line with
// them: see package starter/oncerun.
package main

import "github.com/oncerun/oncerun/starter/oncerun"

func main() { oncerun.Main(oncerun.Options{}) }
