package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/netfault"
)

var testLinks = []string{linkPostgres, linkTemporal, linkProvider, linkSMTP}

// A large plan holds every kind and every scope, each fault within the
// window and lasting within its bounds, with a fault that matches its kind.
func TestPlanNetFaultsCoversKindsAndScopes(t *testing.T) {
	t.Parallel()
	window, lo, hi := 20*time.Minute, 5*time.Second, 90*time.Second
	plan := planNetFaults(7, 500, 3, testLinks, window, lo, hi)
	require.Len(t, plan, 500)
	kinds, scopes := map[string]int{}, map[string]int{}
	for _, f := range plan {
		kinds[f.kind]++
		scopes[f.scope]++
		assert.GreaterOrEqual(t, f.dur, lo)
		assert.LessOrEqual(t, f.dur, hi)
		assert.GreaterOrEqual(t, f.at, time.Duration(0))
		assert.Less(t, f.at, window)
		switch f.scope {
		case scopeLink:
			assert.Contains(t, testLinks, f.link)
			assert.True(t, f.worker >= 0 && f.worker < 3, "worker %d", f.worker)
		case scopeWorker:
			assert.Empty(t, f.link)
			assert.True(t, f.worker >= 0 && f.worker < 3, "worker %d", f.worker)
		case scopePostgres:
			assert.Equal(t, linkPostgres, f.link)
			assert.Equal(t, -1, f.worker)
		case scopeTemporal:
			assert.Equal(t, linkTemporal, f.link)
			assert.Equal(t, -1, f.worker)
		}
		switch f.kind {
		case netBlackHole:
			assert.Equal(t, netfault.Fault{Hold: netfault.Both}, f.fault)
		case netBlackHoleUp:
			assert.Equal(t, netfault.Fault{Hold: netfault.Up}, f.fault)
		case netBlackHoleDown:
			assert.Equal(t, netfault.Fault{Hold: netfault.Down}, f.fault)
		case netLatency:
			assert.GreaterOrEqual(t, f.fault.Latency, 100*time.Millisecond)
			assert.LessOrEqual(t, f.fault.Latency+f.fault.Jitter, 2*time.Second)
			assert.LessOrEqual(t, f.fault.Jitter, f.fault.Latency, "a chunk is never delayed less than 0")
		case netBandwidth:
			assert.Positive(t, f.fault.Bandwidth)
		case netReset, netRefuse:
			assert.Equal(t, netfault.Fault{Refuse: true}, f.fault)
		}
	}
	for _, k := range netKinds {
		assert.Positive(t, kinds[k], "kind %s", k)
	}
	for _, s := range netScopes {
		assert.Positive(t, scopes[s], "scope %s", s)
	}
	assert.Len(t, kinds, len(netKinds))
	assert.Len(t, scopes, len(netScopes))
}

// The plan is the seed's alone; a few faults already show most kinds and
// every scope.
func TestPlanNetFaultsIsSeeded(t *testing.T) {
	t.Parallel()
	a := planNetFaults(42, 6, 3, testLinks, time.Minute, 5*time.Second, 20*time.Second)
	assert.Equal(t, a, planNetFaults(42, 6, 3, testLinks, time.Minute, 5*time.Second, 20*time.Second))
	assert.NotEqual(t, a, planNetFaults(43, 6, 3, testLinks, time.Minute, 5*time.Second, 20*time.Second))
	kinds, scopes := map[string]bool{}, map[string]bool{}
	for i, f := range a {
		kinds[f.kind], scopes[f.scope] = true, true
		if i > 0 {
			assert.Greater(t, f.at, a[i-1].at, "the faults begin in order")
		}
	}
	assert.Len(t, kinds, 6)
	assert.Len(t, scopes, len(netScopes))
}

// A worker's environment names its proxies: DATABASE_URL's host:port is
// replaced, its user, database and query kept; the other links' addresses
// are replaced, and what names no link is left alone.
func TestProxiedEnv(t *testing.T) {
	t.Parallel()
	env := []string{
		"DATABASE_URL=postgres://chaos:secret@db.internal:5432/oncerun_chaos_x?sslmode=disable&application_name=w",
		"TEMPORAL_ADDRESS=127.0.0.1:7233", "TEMPORAL_NAMESPACE=default",
		"PAYMENTS_BASE_URL=http://127.0.0.1:8081", "PAYMENTS_API_KEY=sk", "SMTP_ADDR=127.0.0.1:2525",
	}
	via := map[string]string{linkPostgres: "127.0.0.1:40001", linkTemporal: "127.0.0.1:40002",
		linkProvider: "127.0.0.1:40003", linkSMTP: "127.0.0.1:40004"}
	got, err := proxiedEnv(env, via)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"DATABASE_URL=postgres://chaos:secret@127.0.0.1:40001/oncerun_chaos_x?sslmode=disable&application_name=w",
		"TEMPORAL_ADDRESS=127.0.0.1:40002", "TEMPORAL_NAMESPACE=default",
		"PAYMENTS_BASE_URL=http://127.0.0.1:40003", "PAYMENTS_API_KEY=sk", "SMTP_ADDR=127.0.0.1:40004",
	}, got)
	assert.True(t, strings.HasPrefix(env[0], "DATABASE_URL=postgres://chaos:secret@db.internal:5432/"), "the shared environment is not changed")

	_, err = proxiedEnv([]string{"DATABASE_URL=postgres:///oncerun?host=/var/run/postgresql"}, via)
	assert.ErrorContains(t, err, "DATABASE_URL")
}

// Recovery is read per fault and worker from the workers' logs: the next
// attempt after the heal, and the cut-off and reachable-again lines of a
// link the fault cut.
func TestNetFigures(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_800_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	records := []*netRecord{
		{netFault: netFault{kind: netBlackHole, scope: scopePostgres, link: linkPostgres, worker: -1},
			workers: []int{0, 1, 2}, links: []string{linkPostgres}, began: at(10), healed: at(40)},
		{netFault: netFault{kind: netLatency, scope: scopeLink, link: linkSMTP, worker: 1},
			workers: []int{1}, links: []string{linkSMTP}, began: at(50), healed: at(60)},
		{netFault: netFault{kind: netRefuse, scope: scopeWorker, worker: 0}, workers: []int{0}, began: at(70)}, // never healed
	}
	logs := []workerLogs{
		{starts: []time.Time{at(5), at(42)}, links: []linkEvent{
			{at: at(15), cut: true, link: linkPostgres}, {at: at(43), link: linkPostgres},
		}},
		{starts: []time.Time{at(45)}, links: []linkEvent{{at: at(41), cut: true, link: linkPostgres}}},
		{links: []linkEvent{{at: at(12), cut: true, link: "postgres,temporal"}, {at: at(47)}}},
	}
	n := netFigures(records, logs)
	assert.Equal(t, []NetFaultTally{
		{Kind: netBlackHole, Scope: scopePostgres, Count: 1, Seconds: 30},
		{Kind: netLatency, Scope: scopeLink, Count: 1, Seconds: 10},
		{Kind: netRefuse, Scope: scopeWorker, Count: 1},
	}, n.Faults)
	assert.Equal(t, Delays{Count: 2, P50: 2, P90: 5, Max: 5}, n.Recovery[netBlackHole])
	assert.Equal(t, 2, n.NoAttempt, "worker 1 started nothing after the latency healed, worker 2 nothing at all")
	assert.Zero(t, n.HealedIntoAnother)

	// A heal while another fault still holds the worker is left out.
	overlapping := append(records[:2:2], &netRecord{netFault: netFault{kind: netBlackHole, scope: scopeWorker, worker: 1},
		workers: []int{1}, began: at(55), healed: at(80)})
	o := netFigures(overlapping, logs)
	assert.Equal(t, 1, o.HealedIntoAnother, "worker 1 was still black-holed when the latency healed")
	// Worker 1's cut-off line came after the heal: not the fault's. Worker
	// 2's names both links it was cut off from; its reachable-again line
	// names none.
	assert.Equal(t, Delays{Count: 2, P50: 2, P90: 5, Max: 5}, n.CutOff[netBlackHole])
	assert.Equal(t, Delays{Count: 2, P50: 3, P90: 7, Max: 7}, n.Reachable[netBlackHole])
	assert.Zero(t, n.NeverReachable)

	logs[0].links = logs[0].links[:1] // worker 0 died before it was reachable again
	assert.Equal(t, 1, netFigures(records, logs).NeverReachable)
	assert.NotContains(t, n.CutOff, netLatency, "an SMTP link is no cut from PostgreSQL or Temporal")
}

func TestParseUsage(t *testing.T) {
	t.Parallel()
	u := parseUsage(strings.NewReader(`# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 42
go_gc_duration_seconds{quantile="0"} 1e-05
process_open_fds 17
process_resident_memory_bytes 3.3554432e+07
`))
	assert.Equal(t, Usage{Goroutines: 42, OpenFDs: 17, RSSBytes: 32 << 20}, u)
	assert.NotEmpty(t, parseUsage(strings.NewReader("up 1\n")).Err)
}

// The worker's cut-off and reachable-again lines are read from its log,
// whatever else the log holds.
func TestReadLinkEvents(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "worker-0.log")
	require.NoError(t, os.WriteFile(path, []byte(`{"level":"info","ts":1796676700.5,"msg":"worker started"}
{"level":"warn","ts":1796676730.25,"caller":"worker/supervise.go:75","msg":"cut off; giving work back","link":"postgres,temporal","cut_off_after":0}
not json: cut off; giving work back
{"level":"info","ts":1796676733.5,"caller":"worker/supervise.go:94","msg":"reachable again; taking work","cut_off_for":3.007}
`), 0o644))
	got := readLinkEvents(path)
	require.Len(t, got, 2)
	assert.True(t, got[0].cut)
	assert.True(t, got[0].names(linkTemporal))
	assert.False(t, got[0].names(linkSMTP))
	assert.Equal(t, time.Unix(1796676730, 250_000_000), got[0].at)
	assert.False(t, got[1].cut)
	assert.True(t, got[1].names(linkPostgres), "a line that names no link is about every link")
	assert.Empty(t, readLinkEvents(filepath.Join(t.TempDir(), "none.log")))
}
