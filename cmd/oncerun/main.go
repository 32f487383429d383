// Command oncerun is oncerun's production command line: the worker, the
// approvals service and the commands people and scripts use. It links no
// Temporal server and no development code (those are in cmd/oncerun-dev).
//
// Usage:
//
//	oncerun worker
//	oncerun serve
//	oncerun migrate [--database-url URL]
//	oncerun start --tenant T --run-id R (--plan FILE | --goal TEXT) [--json]
//	oncerun status --tenant T --run-id R [--json]
//	oncerun watch (RUN-ID | --run-id R) [--tenant T] [--after N] [--json]
//	oncerun watch --tenant T [--after CURSOR] [--json]
//	oncerun approvals [--tenant T] [--state S] [--json]
//	oncerun approve|reject [--tenant T] --run-id R --step N [--as NAME] [--comment TEXT] [--args FILE]
//	oncerun resolve [--tenant T] --run-id R --step N --outcome applied|not_applied [--result JSON] [--note TEXT]
//	oncerun answer [--tenant T] --run-id R --step N (--content JSON | --action decline|cancel | --answers JSON) [--note TEXT]
//	oncerun cancel [--tenant T] --run-id R --reason TEXT
//	oncerun pause|resume [--tenant T] --run-id R [--reason TEXT]
//	oncerun message [--tenant T] --run-id R --id MESSAGE-ID --text TEXT
//	oncerun limits [set NAME --tools T --currency C --amount MINOR [--period utc_day|rolling_24h] | delete NAME]
//	oncerun reconcile [--json] | --ack ID --note TEXT
//	oncerun replay (--run-id R --tenant T | --query Q [--limit N] | --history FILE) [--json]
//	oncerun keys --expiring [--within 24h] [--json]
//	oncerun tools [--json]
//	oncerun deployment describe [--name N] [--json]
//	oncerun deployment set-current|ramp BUILD-ID [--percent P] [--name N]
//	oncerun deployment pin|unpin RUN-ID [--build-id B] [--tenant T] [--name N]
//	oncerun token new --name N --tenant T --role R [--add-to FILE]
//
// Temporal is reached as the temporal CLI reaches it: TEMPORAL_ADDRESS,
// TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_* and the TOML
// profiles of TEMPORAL_CONFIG_FILE and TEMPORAL_PROFILE (docs/deploy.md).
// Also: DATABASE_URL, TEMPORAL_TASK_QUEUE, TEMPORAL_DEPLOYMENT_NAME (the
// deployment commands' default --name), USER (the default approver
// name), ONCERUN_API and ONCERUN_TOKEN (start, status, approvals, approve
// and reject through the approvals service), and for worker and serve the
// worker's variables (`oncerun worker --help`).
//
// A deployment with tools of its own builds this same command line with
// them: see package starter/oncerun.
package main

import "github.com/oncerun/oncerun/starter/oncerun"

func main() { oncerun.Main(oncerun.Options{}) }
