package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/oncerun/oncerun/internal/devserver"
)

// config is what a benchmark measures (the flags).
type config struct {
	// rounds is how many times each implementation is measured at each
	// concurrency on each Temporal server.
	rounds int
	// runs are the concurrencies: how many runs go at once.
	runs []int
	// minRuns is the fewest runs a measured half makes: at concurrency
	// 1, that many one after the other.
	minRuns int
	// steps is the number of steps, each one insert, of a run.
	steps int
	// temporal lists the kinds of Temporal server, measured one after
	// the other.
	temporal []string
	// impls lists the implementations measured.
	impls []string
	// poolSize is the size of each implementation's pool.
	poolSize int
	// databaseURL reaches the PostgreSQL server.
	databaseURL string
	// oncerunDev is the oncerun-dev binary that runs Temporal's server.
	oncerunDev string
	// dir holds the servers' state and logs.
	dir string
	// progress receives a line per measured half.
	progress io.Writer
}

// half is one measurement: an implementation making runs at one
// concurrency in one round.
type half struct {
	Temporal string `json:"temporal"`
	Runs     int    `json:"runs"`
	Impl     string `json:"impl"`
	Round    int    `json:"round"`
	// Made is how many runs it made, Steps how many steps in all.
	Made  int `json:"runs_made"`
	Steps int `json:"steps"`
	// Wall is its wall time, CPU the CPU time spent meanwhile (Temporal's
	// zero for an implementation that does not use it), in nanoseconds.
	Wall time.Duration `json:"wall_ns"`
	CPU  cpuTimes      `json:"cpu_ns"`
	// EndedBackends counts the backends of its databases that ended
	// during the half, whose CPU time is missing from CPU.Postgres.
	EndedBackends int `json:"ended_backends"`
}

func (h half) stepsPerSecond() float64 { return float64(h.Steps) / h.Wall.Seconds() }

// cpuPerStep is the CPU milliseconds per step of each part, and the total.
func (h half) cpuPerStep() (process, temporal, postgres, total float64) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(h.Steps) }
	process, temporal, postgres = ms(h.CPU.Process), ms(h.CPU.Temporal), ms(h.CPU.Postgres)
	return process, temporal, postgres, process + temporal + postgres
}

// tally is what an implementation did on one Temporal server: the runs it
// made, warm-up included, and the notes counted in its table at the end.
type tally struct {
	Made  int `json:"runs_made"`
	Notes int `json:"notes"`
}

// section is one Temporal server with every implementation beside it.
type section struct {
	cfg   config
	kind  string
	env   env
	probe *probe
	peers []peer
	made  map[string]int
	// closers stop what was started, last first.
	closers []func() error
}

// runSection measures every implementation on a Temporal server of kind,
// on databases of its own that it drops at the end, and checks that each
// implementation's table holds exactly the notes of the runs it made.
func runSection(ctx context.Context, cfg config, kind string) (halves []half, tallies map[string]tally, err error) {
	s := &section{cfg: cfg, kind: kind, probe: newProbe(), made: map[string]int{}}
	defer func() { err = errors.Join(err, s.close()) }()
	if err := s.start(ctx); err != nil {
		return nil, nil, err
	}
	for _, p := range s.peers {
		if _, err := s.measure(ctx, p, 4, "warm"); err != nil {
			return nil, nil, fmt.Errorf("warm %s up: %w", p.name(), err)
		}
	}
	for round := range cfg.rounds {
		for _, c := range cfg.runs {
			// Each implementation goes first in turn.
			order := slices.Clone(s.peers)
			k := round % len(order)
			order = append(order[k:], order[:k]...)
			for _, p := range order {
				h, err := s.measure(ctx, p, c, fmt.Sprintf("r%d-c%d", round, c))
				if err != nil {
					return nil, nil, fmt.Errorf("%s, round %d, %d at once: %w", p.name(), round+1, c, err)
				}
				h.Round = round + 1
				halves = append(halves, h)
				_, _, _, cpu := h.cpuPerStep()
				fmt.Fprintf(cfg.progress, "temporal=%s round %d/%d runs=%d %-9s %7.1f steps/s %6.2f cpu-ms/step\n",
					kind, round+1, cfg.rounds, c, p.name(), h.stepsPerSecond(), cpu)
			}
		}
	}
	tallies, err = s.count(ctx)
	return halves, tallies, err
}

// start starts the Temporal server and the implementations.
func (s *section) start(ctx context.Context) error {
	pg := server{url: s.cfg.databaseURL}
	prefix := fmt.Sprintf("peers_%d_%s", os.Getpid(), s.kind)
	dir := filepath.Join(s.cfg.dir, s.kind)
	if s.kind == temporalPostgres {
		// Dropped once the server has stopped, even if it did not start.
		mainDB, visibilityDB := devserver.Cluster{DatabasePrefix: prefix}.Databases()
		s.closers = append(s.closers, func() error {
			return errors.Join(pg.drop(context.Background(), mainDB), pg.drop(context.Background(), visibilityDB))
		})
	}
	ts, err := startTemporal(ctx, s.cfg.oncerunDev, s.kind, dir, pg, prefix)
	if err != nil {
		return err
	}
	s.closers = append(s.closers, ts.stop)
	s.probe.temporalPID = ts.pid()
	tc, err := ts.dial(ctx)
	if err != nil {
		return err
	}
	s.closers = append(s.closers, func() error { tc.Close(); return nil })
	s.env = env{temporal: ts, pg: pg, prefix: prefix, dir: dir, steps: s.cfg.steps, poolSize: s.cfg.poolSize}
	return s.startPeers(ctx, tc)
}

// startPeers starts the implementations of cfg.impls, in allImpls' order.
func (s *section) startPeers(ctx context.Context, tc client.Client) error {
	want := func(impl string) bool { return slices.Contains(s.cfg.impls, impl) }
	dropLater := func(impl string) {
		db := s.env.database(impl)
		s.closers = append(s.closers, func() error { return s.env.pg.drop(context.Background(), db) })
	}
	if want(implOncerun) {
		dropLater(implOncerun)
		o, err := startOncerun(ctx, s.env, tc)
		if err != nil {
			return err
		}
		s.closers = append(s.closers, o.stop)
		s.peers = append(s.peers, o)
	}
	for _, impl := range []string{implPlain, implLocal} {
		if !want(impl) {
			continue
		}
		dropLater(impl)
		p, err := startPlain(ctx, s.env, tc, impl)
		if err != nil {
			return err
		}
		s.closers = append(s.closers, func() error { p.stop(); return nil })
		s.peers = append(s.peers, p)
	}
	if want(implDBOSTx) || want(implDBOSStep) {
		dropLater("dbos")
		rt, err := startDBOS(ctx, s.env)
		if err != nil {
			return err
		}
		s.closers = append(s.closers, func() error { rt.stop(); return nil })
		for _, d := range rt.peers(s.cfg.steps) {
			if want(d.impl) {
				s.peers = append(s.peers, d)
			}
		}
	}
	return nil
}

// measure makes max(c, minRuns) runs of p, rounded up to a multiple of c,
// c at a time, and returns their wall and CPU time.
func (s *section) measure(ctx context.Context, p peer, c int, label string) (half, error) {
	perWorker := (max(c, s.cfg.minRuns) + c - 1) / c
	dbs := p.databases()
	if p.usesTemporal() {
		dbs = append(dbs, s.env.temporal.databases...)
	}
	before, err := s.probe.read(dbs)
	if err != nil {
		return half{}, err
	}
	start := time.Now()
	errs := make([]error, c)
	var wg sync.WaitGroup
	for w := range c {
		wg.Go(func() {
			for i := range perWorker {
				if errs[w] = p.run(ctx, fmt.Sprintf("%s-%d", label, w*perWorker+i)); errs[w] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	after, err := s.probe.read(dbs)
	if err != nil {
		return half{}, err
	}
	s.made[p.name()] += c * perWorker
	if err := errors.Join(errs...); err != nil {
		return half{}, err
	}
	cpu, ended := after.since(before, s.probe)
	h := half{Temporal: s.kind, Runs: c, Impl: p.name(), Made: c * perWorker, Steps: c * perWorker * s.cfg.steps,
		Wall: wall, CPU: cpu, EndedBackends: ended}
	if !p.usesTemporal() {
		h.CPU.Temporal = 0
	}
	return h, nil
}

// count reads each implementation's table and checks it holds one note per
// step of every run made.
func (s *section) count(ctx context.Context) (map[string]tally, error) {
	tallies := map[string]tally{}
	var errs []error
	for _, p := range s.peers {
		n, err := p.notes(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("count %s's notes: %w", p.name(), err))
			continue
		}
		t := tally{Made: s.made[p.name()], Notes: n}
		tallies[p.name()] = t
		if t.Notes != t.Made*s.cfg.steps {
			errs = append(errs, fmt.Errorf("temporal=%s: %s made %d runs of %d steps but its table holds %d notes",
				s.kind, p.name(), t.Made, s.cfg.steps, t.Notes))
		}
	}
	return tallies, errors.Join(errs...)
}

// close stops everything start started, last first, and drops the
// databases.
func (s *section) close() error {
	var errs []error
	for _, f := range slices.Backward(s.closers) {
		errs = append(errs, f())
	}
	return errors.Join(errs...)
}
