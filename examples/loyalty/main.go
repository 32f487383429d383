// Command loyalty is oncerun with one tool of its own: award_points grants
// a customer loyalty points, once per step, in the deployment's own table
// (package points). It is the whole of what a team writes to add tools to
// oncerun: the tool, the table it writes, and a main that runs oncerun's
// command line with them. Every command of the binary knows the tool:
// `loyalty worker` runs a worker with it, and `loyalty start`, like the
// approvals API, accepts plans that call it. This command is lean (no
// Temporal server inside): it is what the team deploys. Its dev stack is
// ./dev, the same tool on oncerun's development command line.
//
//	go build -o loyalty-dev ./dev && ./loyalty-dev dev
//	go build -o loyalty . && ./loyalty start --tenant acme --run-id r1 --plan plan.json
package main

import (
	"example.com/loyalty/points"

	"github.com/oncerun/oncerun/starter/oncerun"
)

func main() { oncerun.Main(points.Options()) }
