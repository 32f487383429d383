package chaos

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Network is what the network faults did, how soon the workers came back
// from them, and what the run left behind.
type Network struct {
	// Faults counts the faults by kind and scope, and how long they lasted
	// in all.
	Faults []NetFaultTally `json:"faults"`
	// Recovery is, by kind, the time from each heal to the next activity
	// attempt a worker it reached started: one figure per fault and
	// worker. NoAttempt counts the pairs with no attempt after the heal
	// (the worker had nothing more to do); HealedIntoAnother those left
	// out because another fault still held the worker at the heal.
	Recovery          map[string]Delays `json:"recovery_by_kind,omitempty"`
	NoAttempt         int               `json:"heals_without_a_later_attempt"`
	HealedIntoAnother int               `json:"heals_into_another_fault"`
	// CutOff is, by kind of the faults that reached a worker's link to
	// PostgreSQL or Temporal, the time from the fault's start to the
	// worker's logging that it was cut off from that link and gave its
	// work back; Reachable the time from the heal to its logging that it
	// takes work again (0 when it logged so before the heal).
	CutOff    map[string]Delays `json:"cut_off_by_kind,omitempty"`
	Reachable map[string]Delays `json:"reachable_again_by_kind,omitempty"`
	// NeverReachable counts the cut-off lines with no reachable-again line
	// after them: the process was killed first, mostly, and its successor
	// starts afresh.
	NeverReachable int `json:"cut_off_never_reachable_again"`
	// IdleInTransaction counts the backends of the harness's database
	// still idle in a transaction 30 s after the runs settled.
	IdleInTransaction int `json:"idle_in_transaction_after_settle"`
	// Workers are each worker's goroutines, memory and open files before
	// the first network fault and after the runs settled; Proxies each
	// proxy's open connections then.
	Workers []WorkerUsage `json:"workers"`
	Proxies []ProxyConns  `json:"proxies"`
}

// NetFaultTally counts the network faults of one kind and scope.
type NetFaultTally struct {
	Kind    string  `json:"kind"`
	Scope   string  `json:"scope"`
	Count   int     `json:"count"`
	Seconds float64 `json:"total_seconds"`
}

// Usage is what a worker process held at a moment, from its /metrics.
type Usage struct {
	PID        int     `json:"pid"`
	Goroutines float64 `json:"goroutines"`
	RSSBytes   float64 `json:"rss_bytes"`
	OpenFDs    float64 `json:"open_fds"`
	// Err says why the sample is missing.
	Err string `json:"error,omitempty"`
}

// WorkerUsage is one worker's usage before the network faults and after
// the runs settled. Restarted says a new process ran by then (a kill or a
// crash fault): the ratios then compare two processes, not one's growth.
type WorkerUsage struct {
	Worker    string `json:"worker"`
	Before    Usage  `json:"before"`
	After     Usage  `json:"after"`
	Restarted bool   `json:"restarted_between"`
	// The ratios after / before, 0 when a sample is missing.
	Goroutines float64 `json:"goroutines_ratio"`
	RSS        float64 `json:"rss_ratio"`
	OpenFDs    float64 `json:"open_fds_ratio"`
}

// ProxyConns is the connections open through one worker's proxy to one
// destination, before the network faults and after the runs settled.
type ProxyConns struct {
	Worker string `json:"worker"`
	Link   string `json:"link"`
	Before int    `json:"before"`
	After  int    `json:"after"`
}

// usageSample is what sampleUsage read of every slot, by slot.
type usageSample struct {
	usage []Usage
	conns []map[string]int
}

// sampleUsage reads every worker's /metrics and counts every proxy's
// connections, as the before or the after sample.
func (h *harness) sampleUsage(ctx context.Context, before bool) {
	var s usageSample
	for i, sl := range h.slots {
		u := readUsage(ctx, "http://"+sl.metrics+"/metrics")
		if u.Err == "" {
			u.PID = h.workers[i].pid()
		}
		s.usage = append(s.usage, u)
		conns := map[string]int{}
		for link, p := range sl.proxies {
			conns[link] = p.Conns()
		}
		s.conns = append(s.conns, conns)
	}
	h.netMu.Lock()
	defer h.netMu.Unlock()
	if before {
		h.usageBefore = s
	} else {
		h.usageAfter = s
	}
}

// readUsage reads a process's goroutines, resident memory and open files
// from its Prometheus metrics at url.
func readUsage(ctx context.Context, url string) Usage {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Usage{Err: err.Error()}
	}
	resp, err := probe.Do(req)
	if err != nil {
		return Usage{Err: err.Error()}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Usage{Err: resp.Status}
	}
	return parseUsage(resp.Body)
}

// parseUsage reads go_goroutines, process_resident_memory_bytes and
// process_open_fds from Prometheus's text format.
func parseUsage(r io.Reader) Usage {
	var u Usage
	into := map[string]*float64{"go_goroutines": &u.Goroutines, "process_resident_memory_bytes": &u.RSSBytes, "process_open_fds": &u.OpenFDs}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		if p, ok := into[f[0]]; ok {
			if v, err := strconv.ParseFloat(f[1], 64); err == nil {
				*p = v
			}
		}
	}
	if u.Goroutines == 0 {
		u.Err = "no go_goroutines in the metrics"
	}
	return u
}

// idleInTransaction waits up to 30 s for the harness's database to have no
// backend idle in a transaction, and returns those that stayed so longer.
func (h *harness) idleInTransaction(ctx context.Context) ([]string, error) {
	settled := time.Now()
	for {
		rows, err := h.pool.Query(ctx, `
SELECT pid, coalesce(application_name, ''), coalesce(client_addr::text, 'local'), state_change, left(query, 120)
FROM pg_stat_activity WHERE datname = $1 AND state = 'idle in transaction'`, h.dbName)
		if err != nil {
			return nil, fmt.Errorf("read pg_stat_activity: %w", err)
		}
		var stuck []string
		for rows.Next() {
			var (
				pid            int
				app, client, q string
				since          time.Time
			)
			if err := rows.Scan(&pid, &app, &client, &since, &q); err != nil {
				rows.Close()
				return nil, err
			}
			if time.Since(since) > 30*time.Second {
				stuck = append(stuck, fmt.Sprintf("backend %d (%s, from %s) idle in a transaction for %s after %q",
					pid, app, client, time.Since(since).Round(time.Second), q))
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if len(stuck) == 0 || time.Since(settled) > 30*time.Second {
			return stuck, nil
		}
		select {
		case <-ctx.Done():
			return stuck, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// Messages a worker logs when it finds itself cut off from PostgreSQL or
// Temporal and gives its work back, and when it takes work again.
const (
	logCutOff    = "cut off; giving work back"
	logReachable = "reachable again; taking work"
)

// linkEvent is a worker's line saying it was cut off from links, or that
// they are reachable again.
type linkEvent struct {
	at  time.Time
	cut bool
	// link is the line's link field: one link, several joined by commas
	// ("postgres,temporal"), or none.
	link string
}

// names reports whether e is about link: it names it, or names none.
func (e linkEvent) names(link string) bool {
	return e.link == "" || slices.Contains(strings.Split(e.link, ","), link)
}

// readLinkEvents reads a worker's cut-off and reachable-again lines; a
// log without them has none.
func readLinkEvents(path string) []linkEvent {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []linkEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		cut := strings.Contains(line, logCutOff)
		if !cut && !strings.Contains(line, logReachable) {
			continue
		}
		var e struct {
			TS   float64 `json:"ts"`
			Msg  string  `json:"msg"`
			Link string  `json:"link"`
		}
		if json.Unmarshal([]byte(line), &e) != nil || e.TS == 0 || !strings.Contains(e.Msg, map[bool]string{true: logCutOff, false: logReachable}[cut]) {
			continue
		}
		out = append(out, linkEvent{at: unixSeconds(e.TS), cut: cut, link: e.Link})
	}
	return out
}

func unixSeconds(ts float64) time.Time {
	sec, frac := math.Modf(ts)
	return time.Unix(int64(sec), int64(frac*1e9))
}

// workerLogs is what the network figures read of each worker's log.
type workerLogs struct {
	starts []time.Time // activity attempts started, in order
	links  []linkEvent
}

// netFigures sums up the network faults from their records and the
// workers' logs.
func netFigures(records []*netRecord, logs []workerLogs) Network {
	var n Network
	type tallyKey struct{ kind, scope string }
	tallies := map[tallyKey]*NetFaultTally{}
	recovery, cutOff, reachable := map[string][]time.Duration{}, map[string][]time.Duration{}, map[string][]time.Duration{}
	for _, r := range records {
		k := tallyKey{r.kind, r.scope}
		if tallies[k] == nil {
			tallies[k] = &NetFaultTally{Kind: r.kind, Scope: r.scope}
		}
		tallies[k].Count++
		if r.healed.IsZero() {
			continue
		}
		tallies[k].Seconds += r.healed.Sub(r.began).Seconds()
		for _, w := range r.workers {
			if w >= len(logs) {
				continue
			}
			l := logs[w]
			switch i := slices.IndexFunc(l.starts, func(t time.Time) bool { return t.After(r.healed) }); {
			case heldStill(records, r, w):
				// Another fault still held the worker: this heal healed
				// nothing it could recover from.
				n.HealedIntoAnother++
			case i >= 0:
				recovery[r.kind] = append(recovery[r.kind], l.starts[i].Sub(r.healed))
			default:
				n.NoAttempt++
			}
			for _, link := range r.links {
				if link != linkPostgres && link != linkTemporal {
					continue
				}
				// The first cut-off line of the link during the fault,
				// and the first reachable-again line after it.
				c := slices.IndexFunc(l.links, func(e linkEvent) bool {
					return e.cut && e.names(link) && !e.at.Before(r.began) && !e.at.After(r.healed)
				})
				if c < 0 {
					continue
				}
				cutOff[r.kind] = append(cutOff[r.kind], l.links[c].at.Sub(r.began))
				a := slices.IndexFunc(l.links[c:], func(e linkEvent) bool { return !e.cut && e.names(link) })
				switch {
				case heldStill(records, r, w):
					// Another fault still held it: its return is that
					// fault's.
				case a >= 0:
					reachable[r.kind] = append(reachable[r.kind], max(0, l.links[c+a].at.Sub(r.healed)))
				default:
					n.NeverReachable++
				}
			}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(tallies), func(a, b tallyKey) int {
		return strings.Compare(a.kind+" "+a.scope, b.kind+" "+b.scope)
	}) {
		t := *tallies[k]
		t.Seconds = math.Round(t.Seconds*10) / 10
		n.Faults = append(n.Faults, t)
	}
	n.Recovery, n.CutOff, n.Reachable = delaysBy(recovery), delaysBy(cutOff), delaysBy(reachable)
	return n
}

// heldStill reports whether a fault other than r still held worker w
// when r healed.
func heldStill(records []*netRecord, r *netRecord, w int) bool {
	return slices.ContainsFunc(records, func(o *netRecord) bool {
		return o != r && slices.Contains(o.workers, w) && o.began.Before(r.healed) &&
			(o.healed.IsZero() || o.healed.After(r.healed))
	})
}

// network gathers the network figures: the faults, the recovery from the
// workers' logs, and the usage samples.
func (h *harness) network(idle int) *Network {
	logs := make([]workerLogs, len(h.workers))
	for i, w := range h.workers {
		for _, a := range readAttempts(w.name, w.logPath) {
			if !a.finished {
				logs[i].starts = append(logs[i].starts, a.at)
			}
		}
		slices.SortFunc(logs[i].starts, func(a, b time.Time) int { return a.Compare(b) })
		logs[i].links = readLinkEvents(w.logPath)
	}
	h.netMu.Lock()
	defer h.netMu.Unlock()
	n := netFigures(h.net, logs)
	n.IdleInTransaction = idle
	before, after := h.usageBefore, h.usageAfter
	for i, s := range h.slots {
		var wu WorkerUsage
		wu.Worker = s.name
		if i < len(before.usage) {
			wu.Before = before.usage[i]
		}
		if i < len(after.usage) {
			wu.After = after.usage[i]
		}
		wu.Restarted = wu.Before.PID != wu.After.PID
		if wu.Before.Err == "" && wu.After.Err == "" {
			wu.Goroutines = ratio(wu.After.Goroutines, wu.Before.Goroutines)
			wu.RSS = ratio(wu.After.RSSBytes, wu.Before.RSSBytes)
			wu.OpenFDs = ratio(wu.After.OpenFDs, wu.Before.OpenFDs)
		}
		n.Workers = append(n.Workers, wu)
		for _, link := range slices.Sorted(maps.Keys(s.proxies)) {
			pc := ProxyConns{Worker: s.name, Link: link}
			if i < len(before.conns) {
				pc.Before = before.conns[i][link]
			}
			if i < len(after.conns) {
				pc.After = after.conns[i][link]
			}
			n.Proxies = append(n.Proxies, pc)
		}
	}
	return &n
}

func ratio(after, before float64) float64 {
	if before == 0 {
		return 0
	}
	return math.Round(after/before*100) / 100
}

// print adds the network figures to the report's table.
func (n *Network) print(row func(name string, v any)) {
	row("network faults by kind and scope (count, total)", "")
	for _, t := range n.Faults {
		row(fmt.Sprintf("  %s, %s", t.Kind, t.Scope), fmt.Sprintf("%d, %.0fs", t.Count, t.Seconds))
	}
	byKind := func(title string, ds map[string]Delays) {
		if len(ds) == 0 {
			row(title, "none")
			return
		}
		row(title, "")
		for _, k := range slices.Sorted(maps.Keys(ds)) {
			row(fmt.Sprintf("  %s (%d)", k, ds[k].Count), ds[k])
		}
	}
	byKind("from a heal that left the worker free of faults to its next activity attempt, p50 / p90 / max", n.Recovery)
	row("  heals with no later attempt on the worker", n.NoAttempt)
	row("  heals left out: another fault still held the worker", n.HealedIntoAnother)
	byKind("from a cut to the worker's \""+logCutOff+"\"", n.CutOff)
	byKind("from the heal to its \""+logReachable+"\"", n.Reachable)
	row("  cut off, and never said reachable again (killed first)", n.NeverReachable)
	row("backends idle in a transaction 30s after settling", n.IdleInTransaction)
	row("worker goroutines / RSS MiB / open fds, before → after (ratios)", "")
	for _, w := range n.Workers {
		note := ""
		if w.Restarted {
			note = "; a new process since"
		}
		if w.Before.Err != "" || w.After.Err != "" {
			row("  "+w.Worker, fmt.Sprintf("not sampled: %s%s", cmp.Or(w.Before.Err, w.After.Err), note))
			continue
		}
		row("  "+w.Worker, fmt.Sprintf("%.0f → %.0f / %.0f → %.0f / %.0f → %.0f (%.2f / %.2f / %.2f%s)",
			w.Before.Goroutines, w.After.Goroutines, w.Before.RSSBytes/(1<<20), w.After.RSSBytes/(1<<20),
			w.Before.OpenFDs, w.After.OpenFDs, w.Goroutines, w.RSS, w.OpenFDs, note))
	}
	row("connections open through each proxy, before → after", "")
	for _, p := range n.Proxies {
		row(fmt.Sprintf("  %s to %s", p.Worker, p.Link), fmt.Sprintf("%d → %d", p.Before, p.After))
	}
}
