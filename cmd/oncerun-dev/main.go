// Command oncerun-dev is oncerun for a laptop and for tests: every command
// of oncerun, and the development ones that link Temporal's server or exist
// to try things on.
//
// Usage:
//
//	oncerun-dev dev [--data-dir .oncerun] [--temporal-port 7233]
//	oncerun-dev demo [--wait-for-approval]
//	oncerun-dev chaos [--short] [--temporal embedded|cluster] [--json]
//	oncerun-dev sandbox-payments --addr 127.0.0.1:8099 --data-dir DIR
//	oncerun-dev sandbox-desk --data-dir DIR [--addr 127.0.0.1:8097 | --stdio]
//	oncerun-dev temporal-server [--data-dir DIR] [--port 7233]
//
// Deploy cmd/oncerun instead: it has every production command and none of
// these.
package main

import (
	"github.com/oncerun/oncerun/starter/oncerun"
	"github.com/oncerun/oncerun/starter/oncerundev"
)

func main() { oncerundev.Main(oncerun.Options{}) }
