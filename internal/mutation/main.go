package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// modulePath is the module whose source the mutations change, in the
// builds of its tests only.
const modulePath = "github.com/oncerun/oncerun"

// Exit codes.
const (
	exitOK          = 0   // every mutation was caught
	exitFailed      = 1   // a mutation survived, is broken or no longer applies
	exitInterrupted = 130 // a signal stopped the run
)

// options are the command's flags.
type options struct {
	only     string
	list     bool
	json     bool
	verbose  bool
	discover bool
	baseline bool
	timeout  time.Duration
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("mutation", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.only, "only", "", "run only these mutations: names or numbers, comma-separated")
	fs.BoolVar(&o.list, "list", false, "print the mutation table and exit")
	fs.BoolVar(&o.json, "json", false, "print the report (or, with -list, the table) as JSON")
	fs.BoolVar(&o.verbose, "v", false, "print go test's output for each mutation")
	fs.BoolVar(&o.discover, "discover", false, "run every test of a mutation's packages, not only the named ones, to find all that catch it")
	fs.BoolVar(&o.baseline, "baseline", true, "first run the tests on the unchanged source; they must pass")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "go test -timeout of each run")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitFailed
	}
	selected, err := choose(mutations, o.only)
	if err != nil {
		fmt.Fprintln(stderr, "mutation:", err)
		return exitFailed
	}
	if o.list {
		if err := printList(stdout, selected, o.json); err != nil {
			fmt.Fprintln(stderr, "mutation:", err)
			return exitFailed
		}
		return exitOK
	}
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(stderr, "mutation:", err)
		return exitFailed
	}

	ctx, stop := onSignals(stderr)
	defer stop()
	r, err := newRunner(ctx, root, o, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "mutation:", err)
		return exitFailed
	}
	if o.baseline {
		if code, ok := r.checkBaseline(ctx, selected); !ok {
			return code
		}
	}
	var results []Result
	code := exitOK
	for _, n := range selected {
		res := r.runOne(ctx, n)
		results = append(results, res)
		if res.Result == resultInterrupted {
			code = exitInterrupted
			break
		}
		if res.Result != resultCaught {
			code = exitFailed
		}
	}
	if err := printReport(stdout, results, o.json); err != nil {
		fmt.Fprintln(stderr, "mutation:", err)
		return max(code, exitFailed)
	}
	return code
}

// numbered is a mutation with its number in the table, from 1.
type numbered struct {
	N int
	Mutation
}

// choose returns the mutations named in only (names or numbers,
// comma-separated), in the table's order, or all of them.
func choose(table []Mutation, only string) ([]numbered, error) {
	want := map[string]bool{}
	for _, w := range strings.Split(only, ",") {
		if w = strings.TrimSpace(w); w != "" {
			want[w] = true
		}
	}
	all := len(want) == 0
	var out []numbered
	for i, m := range table {
		n := numbered{N: i + 1, Mutation: m}
		if all || want[m.Name] || want[strconv.Itoa(n.N)] {
			out = append(out, n)
		}
	}
	var unknown []string
	for w := range want {
		if !slices.ContainsFunc(out, func(n numbered) bool { return n.Name == w || strconv.Itoa(n.N) == w }) {
			unknown = append(unknown, w)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, fmt.Errorf("-only: no mutation %s (go run ./internal/mutation -list)", strings.Join(unknown, ", "))
	}
	return out, nil
}

// moduleRoot finds the directory of go.mod from the working directory up,
// and checks that it is oncerun's.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			first, _, _ := strings.Cut(string(b), "\n")
			if strings.TrimSpace(first) != "module "+modulePath {
				return "", fmt.Errorf("%s is not the module %s", dir, modulePath)
			}
			return dir, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory: run from within %s", modulePath)
		}
		dir = parent
	}
}

// onSignals returns a context that ends on the first Ctrl-C, SIGTERM or
// SIGHUP, so that the running tests stop (their whole process group) and
// the command reports what it ran. The signal's default is back after the
// first: a second one ends the command at once, which is safe, since the
// source tree holds no mutation to take back.
func onSignals(log io.Writer) (context.Context, func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			signal.Stop(sigs)
			fmt.Fprintf(log, "mutation: %s: stopping the tests\n", s)
			cancel(fmt.Errorf("interrupted by %s", s))
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}
