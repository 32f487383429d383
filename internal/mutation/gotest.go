package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// testRun is what one go test invocation ran and how it ended.
type testRun struct {
	// Output is go test's output, stdout and stderr together.
	Output []byte
	// Passed is true when go test exited 0.
	Passed bool
	// Err is set when go test could not be run or was stopped.
	Err error
}

// buildAllowance is how much longer than the tests' own timeout go test
// may take before it is killed: the time to build the test binaries (the
// integration tests link a Temporal server).
const buildAllowance = 15 * time.Minute

// runRegexp returns the -run pattern that selects exactly the test
// functions named, or "" for all of them.
func runRegexp(tests []string) string {
	if len(tests) == 0 {
		return ""
	}
	quoted := make([]string, len(tests))
	for i, t := range tests {
		quoted[i] = regexp.QuoteMeta(t)
	}
	return "^(" + strings.Join(quoted, "|") + ")$"
}

// goTestArgs are the arguments of go test for the tests of pkgs, or those
// of them that tests names, compiled with overlay as -overlay unless it is
// "" (the unchanged source).
func goTestArgs(pkgs, tests []string, timeout time.Duration, overlay string) []string {
	args := []string{"test", "-count=1", "-vet=off", "-timeout", timeout.String()}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	if re := runRegexp(tests); re != "" {
		args = append(args, "-run", re)
	}
	return append(args, pkgs...)
}

// goTest runs go test in root, with env added to its environment, in a
// process group of its own: when ctx ends, the whole group is killed (go
// test and the test binaries it started), not go test alone.
func goTest(ctx context.Context, root string, args, env []string, timeout time.Duration) testRun {
	ctx, cancel := context.WithTimeout(ctx, timeout+buildAllowance)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	r := testRun{Output: out.Bytes(), Passed: err == nil}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		r.Err = fmt.Errorf("go test stopped: %w", context.Cause(ctx))
	case err != nil && !errors.As(err, &exit):
		r.Err = fmt.Errorf("go test: %w", err)
	}
	return r
}

// goEnv returns the value of one go env variable in root, wherever it is
// set (the environment or go env -w).
func goEnv(ctx context.Context, root, name string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "env", name)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", fmt.Errorf("go env %s: %w: %s", name, err, bytes.TrimSpace(exit.Stderr))
		}
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

var (
	// failLine is a failed test or subtest, at any depth.
	failLine = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)
	// buildFailed is a package whose test binary did not build.
	buildFailed = regexp.MustCompile(`(?m)^FAIL\s+(\S+)\s+\[(?:build|setup) failed\]`)
	// noTests is a package in which -run matched no test.
	noTests = regexp.MustCompile(`(?m)^ok\s+(\S+)\s.*\[no tests to run\]`)
	// timedOut opens the report of a test binary that ran out of time;
	// the tests it was running follow, one per line.
	timedOut    = regexp.MustCompile(`(?m)^panic: test timed out after \S+\n\s*running tests:\n((?:\t\t\S+ \(.*\)\n)+)`)
	runningTest = regexp.MustCompile(`(?m)^\t\t(\S+) \(`)
)

// findings is what go test's output says about the tests.
type findings struct {
	// Failed are the tests and subtests that failed, in order.
	Failed []string
	// TimedOut are the tests running when a test binary ran out of time.
	TimedOut []string
	// BuildFailed are the packages that did not build.
	BuildFailed []string
	// NoTests are the packages where no test matched.
	NoTests []string
}

// parse reads go test's plain output.
func parse(out []byte) findings {
	var f findings
	for _, m := range failLine.FindAllSubmatch(out, -1) {
		f.Failed = appendNew(f.Failed, string(m[1]))
	}
	for _, m := range timedOut.FindAllSubmatch(out, -1) {
		for _, t := range runningTest.FindAllSubmatch(m[1], -1) {
			f.TimedOut = appendNew(f.TimedOut, string(t[1]))
		}
	}
	for _, m := range buildFailed.FindAllSubmatch(out, -1) {
		f.BuildFailed = appendNew(f.BuildFailed, string(m[1]))
	}
	for _, m := range noTests.FindAllSubmatch(out, -1) {
		f.NoTests = appendNew(f.NoTests, string(m[1]))
	}
	return f
}

// caughtBy returns the top-level tests among the failed and timed-out
// ones: the tests that caught a mutation.
func (f findings) caughtBy() []string {
	var top []string
	for _, t := range append(append([]string{}, f.Failed...), f.TimedOut...) {
		name, _, _ := strings.Cut(t, "/")
		top = appendNew(top, name)
	}
	return top
}

func appendNew(list []string, s string) []string {
	for _, have := range list {
		if have == s {
			return list
		}
	}
	return append(list, s)
}

// tail returns the last n lines of out, for a report of what went wrong.
func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
