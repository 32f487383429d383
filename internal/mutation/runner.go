package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Results of a mutation.
const (
	resultCaught      = "caught"
	resultSurvived    = "SURVIVED"
	resultBroken      = "broken"
	resultStale       = "no longer applies"
	resultInterrupted = "interrupted"
)

// Result is what became of one mutation.
type Result struct {
	Number int `json:"number"`
	Mutation
	// Result is caught, SURVIVED, broken, "no longer applies" or
	// interrupted.
	Result string `json:"result"`
	// CaughtBy are the top-level tests that failed or timed out.
	CaughtBy []string `json:"caught_by,omitempty"`
	// Failed are the tests and subtests that failed.
	Failed []string `json:"failed,omitempty"`
	// Detail says why a mutation is broken or no longer applies.
	Detail  string  `json:"detail,omitempty"`
	Seconds float64 `json:"seconds"`
}

// runner runs mutations in the module at root.
type runner struct {
	root string
	// goflags is the GOFLAGS in force (the environment's or go env -w's),
	// to which each mutation's -overlay is added for the go commands the
	// tests run.
	goflags string
	o       options
	log     io.Writer
}

// newRunner returns a runner of the module at root.
func newRunner(ctx context.Context, root string, o options, log io.Writer) (runner, error) {
	goflags, err := goEnv(ctx, root, "GOFLAGS")
	if err != nil {
		return runner{}, err
	}
	return runner{root: root, goflags: goflags, o: o, log: log}, nil
}

// tests returns the tests to run for m: none named (all of them) when
// discovering.
func (r runner) tests(m Mutation) []string {
	if r.o.discover {
		return nil
	}
	return m.Tests
}

// runOne writes n's mutated file to a temporary directory and runs n's
// tests with it in the original's place (go test -overlay). The source
// tree is never written.
func (r runner) runOne(ctx context.Context, n numbered) (res Result) {
	res = Result{Number: n.N, Mutation: n.Mutation}
	start := time.Now()
	defer func() {
		res.Seconds = time.Since(start).Round(100 * time.Millisecond).Seconds()
		fmt.Fprintf(r.log, "mutation %d/%d %s (%s): %s\n", n.N, len(mutations), n.Name, n.File, summary(res))
	}()
	if ctx.Err() != nil {
		res.Result = resultInterrupted
		return res
	}
	ov, err := writeOverlay(r.root, n.Mutation)
	if err != nil {
		res.Result, res.Detail = resultBroken, err.Error()
		if errors.Is(err, errStale) {
			res.Result = resultStale
			res.Detail = strings.TrimPrefix(err.Error(), errStale.Error()+": ")
		}
		return res
	}
	defer func() {
		if err := ov.remove(); err != nil {
			fmt.Fprintf(r.log, "mutation: remove %s: %s\n", ov.Dir, err)
		}
	}()
	// The go commands the tests run (to build a binary of the module)
	// compile the mutation too.
	goflags, err := ov.goFlags(r.goflags)
	if err != nil {
		res.Result, res.Detail = resultBroken, err.Error()
		return res
	}

	run := goTest(ctx, r.root, goTestArgs(n.Packages, r.tests(n.Mutation), r.o.timeout, ov.File),
		[]string{"GOFLAGS=" + goflags}, r.o.timeout)
	if r.o.verbose {
		fmt.Fprintf(r.log, "--- go test output of mutation %d (%s)\n%s\n", n.N, n.Name, run.Output)
	}
	judge(&res, run, ctx.Err() != nil)
	return res
}

// judge sets res's result from the tests' run.
func judge(res *Result, run testRun, interrupted bool) {
	f := parse(run.Output)
	switch {
	case interrupted:
		res.Result = resultInterrupted
	case len(f.BuildFailed) > 0:
		res.Result = resultBroken
		res.Detail = "the mutated code does not build in " + strings.Join(f.BuildFailed, ", ") + ":\n" + tail(run.Output, 10)
	case run.Err != nil:
		res.Result = resultBroken
		res.Detail = run.Err.Error() + ":\n" + tail(run.Output, 10)
	case len(f.caughtBy()) > 0:
		res.Result = resultCaught
		res.CaughtBy, res.Failed = f.caughtBy(), f.Failed
	case !run.Passed:
		res.Result = resultBroken
		res.Detail = "the tests failed without naming a test:\n" + tail(run.Output, 10)
	case len(f.NoTests) > 0:
		res.Result = resultBroken
		res.Detail = "no test matched in " + strings.Join(f.NoTests, ", ")
	default:
		res.Result = resultSurvived
	}
}

// summary is a result in a few words, for the progress lines.
func summary(res Result) string {
	s := res.Result
	if len(res.CaughtBy) > 0 {
		s += " by " + strings.Join(res.CaughtBy, ", ")
	}
	s += fmt.Sprintf(" in %.1fs", res.Seconds)
	if res.Detail != "" {
		s += ": " + res.Detail
	}
	return s
}

// checkBaseline runs every test the mutations name, on the unchanged
// source, and reports whether they pass: a test that fails anyway would
// pass for a catch.
func (r runner) checkBaseline(ctx context.Context, ms []numbered) (code int, ok bool) {
	var pkgs, tests []string
	for _, m := range ms {
		for _, p := range m.Packages {
			pkgs = appendNew(pkgs, p)
		}
		for _, t := range r.tests(m.Mutation) {
			tests = appendNew(tests, t)
		}
	}
	if r.o.discover {
		tests = nil
	}
	start := time.Now()
	fmt.Fprintf(r.log, "baseline: the tests of %d mutation(s) on the unchanged source...\n", len(ms))
	run := goTest(ctx, r.root, goTestArgs(pkgs, tests, r.o.timeout, ""), nil, r.o.timeout)
	f := parse(run.Output)
	took := time.Since(start).Round(100 * time.Millisecond)
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(r.log, "baseline: interrupted")
		return exitInterrupted, false
	case !run.Passed || run.Err != nil:
		fmt.Fprintf(r.log, "baseline: the tests fail on the unchanged source (%s), so no failure could be told from a catch:\n%s\n", took, tail(run.Output, 30))
		return exitFailed, false
	case len(f.NoTests) > 0:
		fmt.Fprintf(r.log, "baseline: no test matched in %s\n", strings.Join(f.NoTests, ", "))
		return exitFailed, false
	}
	fmt.Fprintf(r.log, "baseline: pass (%s)\n", took)
	return exitOK, true
}
