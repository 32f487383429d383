package worker

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/links"
)

// The messages of the lines a worker logs when it gives its work back, cut
// off from PostgreSQL or Temporal (fields: link, the links cut off, and
// cut_off_after), and when it polls again (fields: link, those that were
// cut off, and cut_off_for, from the cut to polling again). The chaos
// harness measures hand-overs by them.
const (
	logCutOff    = "cut off; giving work back"
	logReachable = "reachable again; taking work"
)

// restartEvery is how soon a worker that could not start polling again
// tries again.
const restartEvery = time.Second

// supervise gives the process's work back while a link is cut off and
// takes work again once every link answers, until ctx ends.
//
// Giving work back shuts the gate (every activity attempt in progress ends,
// a local step's by failing its workflow task, and no new attempt starts:
// no effect is begun that the worker could not record or report) and stops
// the Temporal worker, which stops polling and tells Temporal that its
// sticky queue is gone, so that the runs it held go to the workers that
// poll. Keys are untouched: a step whose external call was in flight stays
// in flight under its lease, and the worker that takes it over settles it.
// Taking work again builds a new Temporal worker (a stopped one cannot
// start again) and opens the gate.
func (p *Process) supervise(ctx context.Context) {
	var (
		cutAt time.Time
		cut   []string
	)
	for {
		changed := p.links.Changed()
		names, since := p.links.CutOff()
		retry := (<-chan time.Time)(nil)
		switch polling := p.current() != nil; {
		case len(names) > 0 && polling:
			cutAt, cut = since, names
			p.giveBack(names)
		case len(names) == 0 && !polling:
			if !p.takeWork(cutAt, cut) {
				retry = time.After(restartEvery)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-retry:
		}
	}
}

func (p *Process) current() any {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.worker == nil {
		return nil
	}
	return p.worker
}

// giveBack shuts the gate and stops the Temporal worker. The stop goes on
// in the background: its pollers stop at once, but the stop waits for
// their calls in progress, which on a black-holed link to Temporal last
// until the worker's stop timeout, and the worker must be free to poll
// again as soon as the links answer.
func (p *Process) giveBack(names []string) {
	p.log.Warn(logCutOff, zap.String("link", strings.Join(names, ",")), zap.Duration("cut_off_after", p.cfg.CutOffAfter))
	p.gate.shut(errCutOff(names))
	p.polling.Set(0)
	p.mu.Lock()
	w := p.worker
	p.worker = nil
	p.mu.Unlock()
	if w != nil {
		p.stopping.Go(w.Stop)
	}
}

// takeWork starts a new Temporal worker and opens the gate; false if the
// worker did not start.
func (p *Process) takeWork(cutAt time.Time, cut []string) bool {
	w := p.workers()
	if err := w.Start(); err != nil {
		w.Stop()
		p.log.Warn("the worker did not start polling again; trying again", zap.Error(err))
		return false
	}
	p.mu.Lock()
	p.worker = w
	p.mu.Unlock()
	p.gate.open()
	if slices.Contains(cut, "postgres") {
		// Connections the cut left half-open would fail one by one, each
		// after the TCP user timeout: new ones are made instead.
		p.pool.Reset()
	}
	p.polling.Set(1)
	p.log.Info(logReachable, zap.String("link", strings.Join(cut, ",")),
		zap.Duration("cut_off_for", time.Since(cutAt).Round(time.Millisecond)))
	return true
}

// stopWorker stops the Temporal worker that polls, if one does, and waits
// for those given back to have stopped.
func (p *Process) stopWorker() {
	p.mu.Lock()
	w := p.worker
	p.worker = nil
	p.mu.Unlock()
	if w != nil {
		w.Stop()
	}
	p.stopping.Wait()
}

// handler serves Handler's /healthz and /metrics and /readyz: 200 while
// the worker polls, 503 while it is cut off, with each link's status.
func (p *Process) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", Handler(p.pool, p.promReg))
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		body := struct {
			Ready bool           `json:"ready"`
			Links []links.Status `json:"links,omitempty"`
		}{Ready: p.current() != nil}
		if p.links != nil {
			body.Links = p.links.Statuses()
		}
		w.Header().Set("Content-Type", "application/json")
		if !body.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(body)
	})
	return mux
}
