// Package oncerundev is oncerun's development command line as a library:
// every command of package starter/oncerun, and beside them the dev stack
// (`dev`: an embedded Temporal server, the migrations, a worker and the
// approvals service in one process), `demo`, `chaos`, `temporal-server` and
// the sandboxes (`sandbox-payments`, `sandbox-desk`). It links Temporal's
// server, so it is for laptops and tests; deploy the lean command of
// starter/oncerun. A deployment with tools of its own runs its dev stack
// with the same Options:
//
//	func main() {
//		oncerundev.Main(oncerun.Options{Tools: []tools.Tool{myTool}})
//	}
package oncerundev

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/internal/cli"
	"github.com/oncerun/oncerun/internal/devstack"
	"github.com/oncerun/oncerun/internal/sandbox/desk"
	sandboxpayments "github.com/oncerun/oncerun/internal/sandbox/payments"
	"github.com/oncerun/oncerun/starter/oncerun"
)

// Command builds the development command tree for the environment read by
// getenv (os.Getenv in a real process): oncerun.Command's commands and the
// development ones.
func Command(o oncerun.Options, getenv func(string) string) *cobra.Command {
	env := cli.EnvFrom(getenv, o.Configure)
	root := cli.NewRoot(env)
	root.Use = "oncerun-dev"
	root.Short = "oncerun's development commands (dev, demo, chaos, sandboxes) beside every production command"
	root.AddCommand(devstack.Commands(env, getenv)...)
	root.AddCommand(sandboxpayments.Command(), desk.Command())
	return root
}

// Main runs the development command line on os.Args and exits with its
// status, as oncerun.Main does.
func Main(o oncerun.Options) { cli.Main(Command(o, os.Getenv)) }
