package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// defaultDatabaseURL is the PostgreSQL server of the machine, when neither
// -database-url nor DATABASE_URL says otherwise.
const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

// run parses args, runs the benchmark and writes its report to stdout,
// its progress to stderr.
func run(args []string, stdout, stderr io.Writer, getenv func(string) string) (err error) {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg                   config
		runs, temporal, impls string
		asJSON                bool
	)
	fs.IntVar(&cfg.rounds, "rounds", 5, "measured rounds of every implementation at every concurrency on each Temporal server")
	fs.StringVar(&runs, "runs", "1,40", "concurrencies: runs at once, comma-separated")
	fs.IntVar(&cfg.minRuns, "min-runs", 40, "fewest runs of a measured half (at 1 at once, that many one after the other)")
	fs.IntVar(&cfg.steps, "steps", 10, "steps of a run, each inserting one row")
	fs.StringVar(&temporal, "temporal", "sqlite,postgres", "Temporal servers, one after the other: sqlite, postgres")
	fs.StringVar(&impls, "impls", strings.Join(allImpls, ","), "implementations to measure")
	fs.IntVar(&cfg.poolSize, "pool", 8, "connections in each implementation's pool")
	fs.StringVar(&cfg.databaseURL, "database-url", cmp.Or(getenv("DATABASE_URL"), defaultDatabaseURL), "PostgreSQL server (default $DATABASE_URL)")
	fs.StringVar(&cfg.oncerunDev, "oncerun-dev", "", "oncerun-dev binary running Temporal's server (default: built from ../../cmd/oncerun-dev)")
	fs.BoolVar(&asJSON, "json", false, "write the report as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.runs, err = parseInts(runs); err != nil {
		return fmt.Errorf("-runs: %w", err)
	}
	cfg.temporal, cfg.impls = strings.Split(temporal, ","), strings.Split(impls, ",")
	if err := cfg.validate(); err != nil {
		return err
	}
	cfg.progress = stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.dir, err = os.MkdirTemp("", "peers-"); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// The servers' logs say what went wrong.
			fmt.Fprintf(stderr, "peers: the servers' logs are kept in %s\n", cfg.dir)
			return
		}
		err = os.RemoveAll(cfg.dir)
	}()
	if cfg.oncerunDev == "" {
		if cfg.oncerunDev, err = buildOncerunDev(ctx, cfg.dir, stderr); err != nil {
			return err
		}
	}

	started := time.Now()
	r := report{Rounds: cfg.rounds, Steps: cfg.steps, MinRuns: cfg.minRuns, PoolSize: cfg.poolSize, Tallies: map[string]map[string]tally{}}
	for _, kind := range cfg.temporal {
		halves, tallies, err := runSection(ctx, cfg, kind)
		if err != nil {
			return fmt.Errorf("temporal=%s: %w", kind, err)
		}
		r.Halves = append(r.Halves, halves...)
		r.Tallies[kind] = tallies
	}
	r.Summary = summarize(cfg, r.Halves)
	r.Goals = goals(r.Summary)
	if asJSON {
		return printJSON(stdout, r)
	}
	printTables(stdout, cfg, r.Summary, r.Goals)
	printBenchmarks(stdout, r.Halves)
	fmt.Fprintf(stderr, "measured in %s\n", time.Since(started).Round(time.Second))
	return nil
}

func (c config) validate() error {
	switch {
	case c.rounds < 1:
		return errors.New("-rounds must be at least 1")
	case c.steps < 1:
		return errors.New("-steps must be at least 1")
	case c.poolSize < 1:
		return errors.New("-pool must be at least 1")
	case c.minRuns < 0:
		return errors.New("-min-runs cannot be negative")
	}
	for _, n := range c.runs {
		if n < 1 {
			return fmt.Errorf("-runs: %d is not a concurrency", n)
		}
	}
	for _, k := range c.temporal {
		if k != temporalSQLite && k != temporalPostgres {
			return fmt.Errorf("-temporal: %q is neither %s nor %s", k, temporalSQLite, temporalPostgres)
		}
	}
	for _, impl := range c.impls {
		if !slices.Contains(allImpls, impl) {
			return fmt.Errorf("-impls: %q is none of %s", impl, strings.Join(allImpls, ", "))
		}
	}
	return nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// buildOncerunDev builds the repository's oncerun-dev into dir, in the
// repository's own module. The repository is two directories up from the
// module's: `go run .` and `go test` both run in bench/peers.
func buildOncerunDev(ctx context.Context, dir string, stderr io.Writer) (string, error) {
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "oncerun-dev")
	fmt.Fprintln(stderr, "building oncerun-dev …")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/oncerun-dev")
	cmd.Dir, cmd.Stdout, cmd.Stderr = repo, stderr, stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build oncerun-dev in %s: %w", repo, err)
	}
	return bin, nil
}
