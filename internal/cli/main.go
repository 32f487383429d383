package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/internal/reconcile"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/worker"
)

// EnvFrom is the environment as getenv (os.Getenv in a real process)
// reads it, with configure adding a deployment's part to every worker
// configuration the commands build (nil: none).
func EnvFrom(getenv func(string) string, configure func(*worker.Config)) Env {
	return Env{
		DatabaseURL:     getenv(settings.EnvDatabaseURL),
		TemporalAddress: getenv(settings.EnvTemporalAddress),
		Namespace:       getenv(settings.EnvTemporalNamespace),
		TaskQueue:       getenv(settings.EnvTaskQueue),
		User:            getenv("USER"),
		APIURL:          getenv(EnvAPI),
		Token:           getenv(EnvToken),
		Getenv:          getenv,
		Configure:       configure,
		Reconcile: func() ([]reconcile.Source, error) {
			ext, err := worker.ExternalFromEnv(getenv)
			if err != nil {
				return nil, err
			}
			return worker.ReconcileSources(ext)
		},
	}
}

// Main runs root on os.Args and exits with its status: 0, or when the
// command failed (it has printed why) 1, or the code of an [ExitError].
// The first Ctrl-C or SIGTERM asks the command to stop cleanly; a second
// one forces.
func Main(root *cobra.Command) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		fmt.Fprintln(os.Stderr, "stopping (Ctrl-C again to force)")
		cancel()
		<-sigs
		fmt.Fprintln(os.Stderr, "forced")
		os.Exit(130)
	}()
	err := Execute(ctx, root, os.Stdout, os.Stderr)
	cancel()
	if err != nil {
		// Cobra has printed the error and, for bad usage, the usage.
		os.Exit(ExitCode(err))
	}
}

// ExitError is a command's error that asks for an exit status other than
// 1: `oncerun replay` exits 1 when runs would break on the build it
// checks, and 2 when it could not check them.
type ExitError struct {
	Code int
	Err  error
}

// Error is the wrapped error's message: what Cobra prints.
func (e *ExitError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode is the exit status of a command that returned err: 0 for nil,
// an ExitError's code, and 1 for any other error.
func ExitCode(err error) int {
	var ee *ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.Code
	}
	return 1
}
