// Package oncerun is oncerun's production command line as a library. The
// oncerun binary (cmd/oncerun) is Main with no options; a deployment with
// tools of its own builds its own binary the same way, and every command of
// it (worker, serve, start's plan check, the approvals API's) knows those
// tools, from one registry:
//
//	func main() {
//		oncerun.Main(oncerun.Options{Tools: []tools.Tool{myTool}})
//	}
//
// It links no Temporal server and no development code: the dev stack, the
// demo, the chaos harness and the sandboxes are in package
// starter/oncerundev, which takes the same Options.
package oncerun

import (
	"context"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/internal/cli"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/worker"
)

// Options is what a deployment adds to oncerun.
type Options struct {
	// Tools are the deployment's own tools, registered beside the built-in
	// ones in the registry of every command (worker.Config.Tools).
	Tools []tools.Tool
	// OmitBuiltinTools leaves the built-in tools out
	// (worker.Config.OmitBuiltinTools).
	OmitBuiltinTools bool
	// Setup creates the tables of the deployment's tools when a worker
	// starts (worker.Config.Setup).
	Setup func(ctx context.Context, pool *pgxpool.Pool) error
}

// Configure adds o to a worker configuration.
func (o Options) Configure(cfg *worker.Config) {
	cfg.Tools = append(cfg.Tools, o.Tools...)
	cfg.OmitBuiltinTools = cfg.OmitBuiltinTools || o.OmitBuiltinTools
	if o.Setup != nil {
		cfg.Setup = o.Setup
	}
}

// Command builds the command tree for the environment read by getenv
// (os.Getenv in a real process).
func Command(o Options, getenv func(string) string) *cobra.Command {
	return cli.NewRoot(cli.EnvFrom(getenv, o.Configure))
}

// Main runs the command line on os.Args and exits with its status: 0, or
// when the command failed (it has printed why) 1, or 2 for a check that
// could not be made (`replay`). The first Ctrl-C or SIGTERM asks the
// command to stop cleanly; a second one forces.
func Main(o Options) { cli.Main(Command(o, os.Getenv)) }
