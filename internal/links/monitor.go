package links

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Defaults of [Config].
const (
	DefaultInterval    = time.Second
	DefaultCutOffAfter = 5 * time.Second
)

// Link is one part a process depends on, and how to ask it whether it
// answers.
type Link struct {
	// Name names the link in logs, metrics and /readyz: "postgres",
	// "temporal".
	Name string
	// Probe returns nil when the part answered within ctx's deadline.
	Probe func(ctx context.Context) error
	// Close, if set, releases what the probes hold, once Run returns.
	Close func()
}

// Config configures a [Monitor].
type Config struct {
	// Interval is how often each link is probed. Default DefaultInterval.
	Interval time.Duration
	// CutOffAfter is how long a link may go without answering before it
	// is cut off; it also bounds each probe. Default DefaultCutOffAfter.
	CutOffAfter time.Duration
	// Logger receives a line when a link is cut off and when it answers
	// again. Default: none.
	Logger *zap.Logger
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Interval = cmp.Or(c.Interval, DefaultInterval)
	c.CutOffAfter = cmp.Or(c.CutOffAfter, DefaultCutOffAfter)
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

// Validate names the field that is wrong.
func (c Config) Validate() error {
	switch {
	case c.Interval < 0:
		return fmt.Errorf("links: Interval is %s; it must be positive", c.Interval)
	case c.CutOffAfter < 0:
		return fmt.Errorf("links: CutOffAfter is %s; it must be positive", c.CutOffAfter)
	case c.CutOffAfter > 0 && c.CutOffAfter < cmp.Or(c.Interval, DefaultInterval):
		return fmt.Errorf("links: CutOffAfter (%s) is shorter than Interval (%s): a link would be cut off between two probes",
			c.CutOffAfter, cmp.Or(c.Interval, DefaultInterval))
	}
	return nil
}

// Status is what a [Monitor] knows of one link.
type Status struct {
	Name string `json:"name"`
	// CutOff is true once the link has not answered for CutOffAfter.
	CutOff bool `json:"cut_off"`
	// LastAnswer is the moment of its last answer (zero: none yet).
	LastAnswer time.Time `json:"last_answer,omitzero"`
	// Since is when the link was last cut off or last answered again.
	Since time.Time `json:"since"`
	// Error is the last probe's error, if it failed.
	Error string `json:"error,omitempty"`
	// answers counts the probes answered in a row.
	answers int
}

// answersToReturn is how many probes in a row a cut-off link must answer
// to count as reachable again: one answer on a flapping link would have
// the worker take work and give it back every few seconds.
const answersToReturn = 2

// Monitor probes links and says which are cut off.
type Monitor struct {
	cfg   Config
	links []Link

	mu      sync.Mutex
	status  []Status
	started time.Time
	changed chan struct{}

	cutOff *prometheus.GaugeVec
	cuts   *prometheus.CounterVec
}

// New returns a monitor of links; [Monitor.Run] probes them. Until its
// first probe a link counts as answering, from the moment Run starts.
func New(cfg Config, links ...Link) (*Monitor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	m := &Monitor{cfg: cfg, links: links, changed: make(chan struct{}), started: time.Now(),
		cutOff: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "oncerun_worker_cut_off",
			Help: "1 while the worker cannot reach the link (postgres, temporal) and has given its work back, 0 while it can.",
		}, []string{"link"}),
		cuts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncerun_worker_cut_offs_total",
			Help: "Times the worker was cut off from each link (postgres, temporal).",
		}, []string{"link"}),
	}
	for i, l := range links {
		if l.Name == "" || l.Probe == nil {
			return nil, fmt.Errorf("links: link %d has no name or no probe", i)
		}
		m.status = append(m.status, Status{Name: l.Name, Since: m.started})
		m.cutOff.WithLabelValues(l.Name).Set(0)
		m.cuts.WithLabelValues(l.Name)
	}
	return m, nil
}

// Collectors are the monitor's metrics, for a Prometheus registry.
func (m *Monitor) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.cutOff, m.cuts}
}

// Run probes every link until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	m.mu.Lock()
	m.started = time.Now()
	for i := range m.status {
		m.status[i].Since = m.started
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for i, l := range m.links {
		wg.Go(func() {
			m.probe(ctx, i, l)
			if l.Close != nil {
				l.Close()
			}
		})
	}
	// Judging is apart from probing: a probe that hangs is judged by the
	// clock, not when it returns.
	wg.Go(func() {
		tick := time.NewTicker(m.cfg.Interval / 4)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				m.judge(time.Now())
			}
		}
	})
	wg.Wait()
}

// probe probes l every Interval, each probe bounded by CutOffAfter.
func (m *Monitor) probe(ctx context.Context, i int, l Link) {
	for {
		began := time.Now()
		pctx, cancel := context.WithTimeout(ctx, m.cfg.CutOffAfter)
		err := l.Probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		m.answered(i, err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(m.cfg.Interval - time.Since(began)):
		}
	}
}

// answered records a probe of link i that returned err.
func (m *Monitor) answered(i int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := &m.status[i]
	if err != nil {
		s.answers = 0
		s.Error = err.Error()
		if errors.Is(err, context.DeadlineExceeded) {
			s.Error = fmt.Sprintf("no answer within %s: %s", m.cfg.CutOffAfter, err)
		}
		return
	}
	now := time.Now()
	s.Error, s.LastAnswer = "", now
	s.answers++
	if s.CutOff && s.answers >= answersToReturn {
		m.cfg.Logger.Info("link answers again", zap.String("link", s.Name), zap.Duration("cut_off_for", now.Sub(s.Since)))
		s.CutOff, s.Since = false, now
		m.cutOff.WithLabelValues(s.Name).Set(0)
		m.changedLocked()
	}
}

// judge cuts off each link whose last answer is older than CutOffAfter.
func (m *Monitor) judge(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.status {
		s := &m.status[i]
		last := s.LastAnswer
		if last.IsZero() {
			last = m.started
		}
		if s.CutOff || now.Sub(last) <= m.cfg.CutOffAfter {
			continue
		}
		s.CutOff, s.Since, s.answers = true, now, 0
		m.cfg.Logger.Warn("link cut off", zap.String("link", s.Name), zap.Duration("silent_for", now.Sub(last)),
			zap.String("error", s.Error))
		m.cutOff.WithLabelValues(s.Name).Set(1)
		m.cuts.WithLabelValues(s.Name).Inc()
		m.changedLocked()
	}
}

func (m *Monitor) changedLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// Changed returns a channel closed at the next change of any link's cut
// off state.
func (m *Monitor) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// Statuses returns every link's status.
func (m *Monitor) Statuses() []Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Status(nil), m.status...)
}

// CutOff returns the names of the links cut off now, and since when the
// earliest was; none when every link answers.
func (m *Monitor) CutOff() (names []string, since time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.status {
		if s.CutOff {
			names = append(names, s.Name)
			if since.IsZero() || s.Since.Before(since) {
				since = s.Since
			}
		}
	}
	return names, since
}
