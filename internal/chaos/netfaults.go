package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oncerun/oncerun/internal/netfault"
)

// Network faults (Config.NetFaults) put a bad network between each worker
// and what it reaches: every worker's connections to PostgreSQL, to
// Temporal's frontend, to the sandbox provider, to the MCP desk and to the
// SMTP server go through a netfault.Proxy of the harness, one per worker
// and destination (a link), made once per worker and kept across its
// restarts. The API server and the harness's own checks connect directly.
//
// A fault has a kind (what the network does) and a scope (which links):
// one worker from one destination, one worker from everything, every
// worker from PostgreSQL at once (a PostgreSQL zone lost) or every worker
// from Temporal at once. It lasts between NetFaultMin and NetFaultMax,
// then heals. Faults overlap: a link under several shows the latest begun,
// and the one before it once that heals.

// The destinations a worker reaches, each through a proxy of its own. The
// names are those the workers log as the link they were cut off from.
const (
	linkPostgres = "postgres"
	linkTemporal = "temporal"
	linkProvider = "provider"
	linkDesk     = "desk"
	linkSMTP     = "smtp"
)

// The kinds of network fault.
const (
	netBlackHole     = "black_hole"      // nothing flows either way
	netBlackHoleUp   = "black_hole_up"   // the worker's bytes do not arrive
	netBlackHoleDown = "black_hole_down" // the answers do not arrive
	netLatency       = "latency"         // 100 ms to 2 s, with jitter
	netBandwidth     = "bandwidth"       // a throttled link
	netReset         = "reset"           // open connections reset, new ones refused
	netRefuse        = "refuse"          // new connections refused
)

var netKinds = []string{netBlackHole, netBlackHoleUp, netBlackHoleDown, netLatency, netBandwidth, netReset, netRefuse}

// The scopes of a network fault.
const (
	scopeLink     = "worker_link"   // one worker from one destination
	scopeWorker   = "worker_all"    // one worker from everything
	scopePostgres = "postgres_zone" // every worker from PostgreSQL
	scopeTemporal = "temporal_zone" // every worker from Temporal
)

var netScopes = []string{scopeLink, scopeWorker, scopePostgres, scopeTemporal}

// netFault is one planned network fault.
type netFault struct {
	// at is when it begins, from the window's start; dur how long it lasts.
	at, dur     time.Duration
	kind, scope string
	// worker is the worker it cuts off, -1 for every worker; link the
	// destination, "" for every one.
	worker int
	link   string
	fault  netfault.Fault
}

// planNetFaults plans n network faults over window for workers workers
// reaching links, each lasting minDur to maxDur, from seed alone. The
// kinds and the scopes each come in a shuffled cycle, so that a few faults
// already show most of them.
func planNetFaults(seed int64, n, workers int, links []string, window, minDur, maxDur time.Duration) []netFault {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6e65746661756c74))
	kinds, scopes := slices.Clone(netKinds), slices.Clone(netScopes)
	out := make([]netFault, 0, n)
	for i := range n {
		if i%len(kinds) == 0 {
			rng.Shuffle(len(kinds), func(a, b int) { kinds[a], kinds[b] = kinds[b], kinds[a] })
		}
		if i%len(scopes) == 0 {
			rng.Shuffle(len(scopes), func(a, b int) { scopes[a], scopes[b] = scopes[b], scopes[a] })
		}
		f := netFault{kind: kinds[i%len(kinds)], scope: scopes[i%len(scopes)], worker: -1}
		f.at = time.Duration((float64(i) + rng.Float64()) / float64(n) * float64(max(window-minDur, 0)))
		f.dur = minDur + time.Duration(rng.Int64N(int64(maxDur-minDur)+1))
		switch f.scope {
		case scopeLink:
			f.worker, f.link = rng.IntN(workers), links[rng.IntN(len(links))]
		case scopeWorker:
			f.worker = rng.IntN(workers)
		case scopePostgres:
			f.link = linkPostgres
		case scopeTemporal:
			f.link = linkTemporal
		}
		switch f.kind {
		case netBlackHole:
			f.fault.Hold = netfault.Both
		case netBlackHoleUp:
			f.fault.Hold = netfault.Up
		case netBlackHoleDown:
			f.fault.Hold = netfault.Down
		case netLatency:
			f.fault.Latency = 100*time.Millisecond + time.Duration(rng.Int64N(int64(1900*time.Millisecond)+1))
			f.fault.Jitter = time.Duration(rng.Int64N(int64(min(f.fault.Latency, 2*time.Second-f.fault.Latency)) + 1))
		case netBandwidth:
			f.fault.Bandwidth = 512 << rng.IntN(7) // 512 B/s to 32 KiB/s
		case netReset, netRefuse:
			f.fault.Refuse = true
		}
		out = append(out, f)
	}
	return out
}

// target says which worker and which link a fault reaches.
func (f netFault) target() string {
	who := "every worker"
	if f.worker >= 0 {
		who = fmt.Sprintf("worker-%d", f.worker)
	}
	what := "everything"
	if f.link != "" {
		what = f.link
	}
	return who + " from " + what
}

// slot is what a worker keeps across its restarts: its proxies, by link,
// and its metrics address.
type slot struct {
	name    string
	metrics string
	proxies map[string]*netfault.Proxy
	// active are the faults on each link, in the order they began.
	active map[string][]*netRecord
}

// netRecord is a network fault as it happened.
type netRecord struct {
	netFault
	// workers are the slots it reached, links the destinations.
	workers []int
	links   []string
	began   time.Time
	healed  time.Time
}

// links are the destinations a worker reaches, the desk in deploy mode.
func (h *harness) links() []string {
	l := []string{linkPostgres, linkTemporal, linkProvider, linkSMTP}
	if h.cfg.Deploy {
		l = append(l, linkDesk)
	}
	return l
}

// newSlot makes worker i's proxies, one per link, and its metrics address.
func (h *harness) newSlot(i int) (*slot, error) {
	s := &slot{name: fmt.Sprintf("worker-%d", i), proxies: map[string]*netfault.Proxy{}, active: map[string][]*netRecord{}}
	metrics, err := freeAddr()
	if err != nil {
		return nil, err
	}
	s.metrics = metrics
	db, err := url.Parse(h.dbURL)
	if err != nil || db.Host == "" {
		return nil, fmt.Errorf("chaos: DATABASE_URL %q: want a host:port for the workers' proxies", h.cfg.DatabaseURL)
	}
	pg := db.Host
	if db.Port() == "" {
		pg = net.JoinHostPort(db.Hostname(), "5432")
	}
	provider, err := url.Parse(h.sandboxURL)
	if err != nil {
		return nil, fmt.Errorf("chaos: the provider's URL %q: %w", h.sandboxURL, err)
	}
	targets := map[string]string{linkPostgres: pg, linkTemporal: h.temporalAddr(), linkProvider: provider.Host, linkSMTP: h.mail.Addr()}
	if h.cfg.Deploy {
		targets[linkDesk] = h.deskAddr
	}
	for _, link := range h.links() {
		p, err := netfault.Listen("127.0.0.1:0", targets[link])
		if err != nil {
			s.close()
			return nil, fmt.Errorf("%s's proxy to %s: %w", s.name, link, err)
		}
		s.proxies[link] = p
	}
	if h.cfg.Deploy {
		if err := h.writeWorkerMCP(s); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

func (s *slot) close() {
	for _, p := range s.proxies {
		_ = p.Close()
	}
}

// via is the address of each of the slot's proxies, by link.
func (s *slot) via() map[string]string {
	out := make(map[string]string, len(s.proxies))
	for link, p := range s.proxies {
		out[link] = p.Addr()
	}
	return out
}

// envLinks are the variables that name where a worker reaches each link.
var envLinks = map[string]string{
	"DATABASE_URL":      linkPostgres,
	"TEMPORAL_ADDRESS":  linkTemporal,
	"PAYMENTS_BASE_URL": linkProvider,
	"SMTP_ADDR":         linkSMTP,
}

// proxiedEnv is env with each link's address replaced by its proxy's in
// via: the host:port of a URL, the rest of it kept; a link via does not
// name is left as it is.
func proxiedEnv(env []string, via map[string]string) ([]string, error) {
	out := slices.Clone(env)
	for i, kv := range out {
		name, val, _ := strings.Cut(kv, "=")
		addr, ok := via[envLinks[name]]
		if !ok {
			continue
		}
		switch name {
		case "DATABASE_URL", "PAYMENTS_BASE_URL":
			u, err := url.Parse(val)
			if err != nil || u.Host == "" {
				return nil, fmt.Errorf("chaos: %s: want a URL with a host:port to replace", name)
			}
			u.Host = addr
			out[i] = name + "=" + u.String()
		default:
			out[i] = name + "=" + addr
		}
	}
	return out, nil
}

// workerMCP is worker s's copy of an MCP configuration file, whose desk is
// reached through the worker's proxy.
func workerMCP(path string, s *slot) string {
	return strings.TrimSuffix(path, ".json") + "." + s.name + ".json"
}

// writeWorkerMCP writes the slot's copy of each registry's MCP file.
func (h *harness) writeWorkerMCP(s *slot) error {
	desk, proxy := "http://"+h.deskAddr+"/", "http://"+s.proxies[linkDesk].Addr()+"/"
	for _, r := range h.registries {
		b, err := os.ReadFile(r.mcp)
		if err != nil {
			return err
		}
		if err := os.WriteFile(workerMCP(r.mcp, s), []byte(strings.ReplaceAll(string(b), desk, proxy)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// netFaults puts the planned network faults on the workers' links at
// their moments and heals each after its duration, or when the window
// ends. Before the first, it samples what the workers hold.
func (h *harness) netFaults(ctx context.Context) {
	h.sampleUsage(ctx, true)
	if h.cfg.NetFaults == 0 {
		return
	}
	plan := planNetFaults(h.cfg.Seed, h.cfg.NetFaults, len(h.slots), h.links(), h.cfg.Duration, h.cfg.NetFaultMin, h.cfg.NetFaultMax)
	h.mu.Lock()
	start := h.windowStart
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, f := range plan {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(start.Add(f.at))):
		}
		if ctx.Err() != nil {
			break
		}
		r := h.applyNet(f)
		wg.Go(func() {
			select {
			case <-ctx.Done():
			case <-time.After(f.dur):
			}
			h.healNet(r)
		})
	}
	wg.Wait()
}

// applyNet puts f on the links it reaches.
func (h *harness) applyNet(f netFault) *netRecord {
	r := &netRecord{netFault: f, began: time.Now()}
	h.netMu.Lock()
	for i, s := range h.slots {
		if f.worker >= 0 && f.worker != i {
			continue
		}
		r.workers = append(r.workers, i)
		for _, link := range h.links() {
			if f.link != "" && f.link != link {
				continue
			}
			if !slices.Contains(r.links, link) {
				r.links = append(r.links, link)
			}
			s.active[link] = append(s.active[link], r)
			s.proxies[link].Set(f.fault)
			if f.kind == netReset {
				s.proxies[link].Reset()
			}
		}
	}
	h.net = append(h.net, r)
	h.netMu.Unlock()
	h.fault(&h.counts.NetFaults)
	h.say("network fault %s (%s): %s for %s", f.kind, f.fault, f.target(), f.dur.Round(time.Second))
	return r
}

// healNet takes r off its links; a link still under an earlier fault
// shows that one again.
func (h *harness) healNet(r *netRecord) {
	h.netMu.Lock()
	for _, i := range r.workers {
		s := h.slots[i]
		for _, link := range r.links {
			s.active[link] = slices.DeleteFunc(s.active[link], func(x *netRecord) bool { return x == r })
			if n := len(s.active[link]); n > 0 {
				s.proxies[link].Set(s.active[link][n-1].fault)
			} else {
				s.proxies[link].Heal()
			}
		}
	}
	r.healed = time.Now()
	h.netMu.Unlock()
	h.mu.Lock()
	h.lastFault = r.healed // the network is whole only now
	h.mu.Unlock()
}
