package approvals

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/events"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/runs"
)

// BenchmarkEventSubscribers follows 40 working runs with 1,000
// subscribers on one service (25 a run, over real HTTP, Server-Sent
// Events): each round, every run writes one fact, and each subscriber of
// the run receives it. It reports the time from a fact's commit to its
// arrival at a subscriber (p50, p99), and the memory and goroutines an idle
// subscriber costs, client and service together (both are in this
// process). make bench-events runs it.
func BenchmarkEventSubscribers(b *testing.B) {
	const (
		nRuns  = 40
		perRun = 25
		every  = 250 * time.Millisecond
	)
	ctx := context.Background()
	pool := pgtest.NewPool(b, 32)
	tok, entry, err := NewToken(Identity{Name: "vic", Tenant: "acme", Role: RoleViewer})
	require.NoError(b, err)
	raw, err := json.Marshal([]TokenEntry{entry})
	require.NoError(b, err)
	toks, err := ParseTokens(raw)
	require.NoError(b, err)
	s, err := New(Config{Runs: &runs.Client{Pool: pool}, Pool: pool, Tokens: toks})
	require.NoError(b, err)
	b.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler())
	b.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: nRuns * perRun, MaxConnsPerHost: 0}}

	run := func(i int) string { return fmt.Sprintf("bench-%d", i) }
	for i := range nRuns {
		require.NoError(b, events.Record(ctx, pool, "acme", []events.Fact{{RunID: run(i), Source: "started", Type: "run.started"}}))
	}

	var (
		committed sync.Map // "run/n" → time of the commit
		mu        sync.Mutex
		latencies []time.Duration
		ready     sync.WaitGroup
		got       atomic.Int64
	)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var done sync.WaitGroup
	for i := range nRuns {
		for range perRun {
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				req, _ := http.NewRequestWithContext(sctx, http.MethodGet, srv.URL+"/v1/runs/"+run(i)+"/events", nil)
				req.Header.Set("Authorization", "Bearer "+tok)
				req.Header.Set("Accept", "text/event-stream")
				resp, err := client.Do(req)
				if err != nil {
					ready.Done()
					return
				}
				defer resp.Body.Close()
				sc := bufio.NewScanner(resp.Body)
				first := true
				for sc.Scan() {
					line, ok := strings.CutPrefix(sc.Text(), "data: ")
					if !ok {
						continue
					}
					if first {
						first = false
						ready.Done()
						continue
					}
					at := time.Now()
					var e Event
					if json.Unmarshal([]byte(line), &e) != nil {
						continue
					}
					var d struct{ N int }
					_ = json.Unmarshal(e.Data, &d)
					key := fmt.Sprintf("%s/%d", e.RunID, d.N)
					var c any
					for c == nil {
						// The writer records its commit's time just after
						// the commit, which may be after the event came.
						if c, ok = committed.Load(key); !ok {
							time.Sleep(time.Millisecond)
						}
					}
					mu.Lock()
					latencies = append(latencies, max(at.Sub(c.(time.Time)), 0))
					mu.Unlock()
					got.Add(1)
				}
			}()
		}
	}
	ready.Wait()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	subs := float64(nRuns * perRun)
	heapPer := float64(after.HeapInuse-before.HeapInuse) / subs
	goroutinesPer := float64(runtime.NumGoroutine()-goroutines) / subs

	b.ResetTimer()
	var writers sync.WaitGroup
	for i := range nRuns {
		writers.Go(func() {
			tick := time.NewTicker(every)
			defer tick.Stop()
			for n := 1; n <= b.N; n++ {
				<-tick.C
				data, _ := json.Marshal(map[string]int{"n": n})
				if err := events.Record(ctx, pool, "acme", []events.Fact{{RunID: run(i), Source: fmt.Sprintf("f%d", n),
					Type: "step.completed", Step: int64(n), Data: data}}); err != nil {
					b.Error(err)
					return
				}
				committed.Store(fmt.Sprintf("%s/%d", run(i), n), time.Now())
			}
		})
	}
	writers.Wait()
	want := int64(b.N * nRuns * perRun)
	deadline := time.Now().Add(time.Minute)
	for got.Load() < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	b.StopTimer()
	stop()
	done.Wait()
	require.Equal(b, want, got.Load(), "every subscriber got every event")
	slices.Sort(latencies)
	q := func(p float64) float64 { return float64(latencies[int(p*float64(len(latencies)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(heapPer, "heap-B/subscriber")
	b.ReportMetric(goroutinesPer, "goroutines/subscriber")
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
}
