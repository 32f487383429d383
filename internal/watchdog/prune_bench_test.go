package watchdog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/internal/watchdog"
	"github.com/oncerun/oncerun/tools"
)

// runsClosed says every run has closed, as for keys long past their runs.
type runsClosed struct{}

func (runsClosed) RunState(context.Context, string, string) (bool, string, error) {
	return false, "completed", nil
}

// BenchmarkPruneExpiredKeys prunes ONCERUN_BENCH_KEYS (default 1,000,000)
// expired keys of closed runs in watchdog batches of ONCERUN_BENCH_BATCH
// (default watchdog.DefaultBatchSize) while one client
// claims new keys through Store.Do, and compares the claims' p99 latency
// with that of the same client on an idle table of the same size. Run it
// with -benchtime=1x (make bench-prune).
//
// Batches follow one another as in the watchdog's Workflow: after a full
// batch, the pause Input.Pause gives for the batch's database time,
// at the duty cycle ONCERUN_BENCH_DUTY (default
// watchdog.DefaultDutyCycle; 1 runs batches back to back). Unlike
// the workflow it has no round trip through Temporal between batches and no
// gap between passes of MaxBatches batches: the worst case for the claims.
func BenchmarkPruneExpiredKeys(b *testing.B) {
	n := 1_000_000
	if s := os.Getenv("ONCERUN_BENCH_KEYS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatalf("ONCERUN_BENCH_KEYS: %v", err)
		}
	}
	batch := watchdog.DefaultBatchSize
	if s := os.Getenv("ONCERUN_BENCH_BATCH"); s != "" {
		var err error
		if batch, err = strconv.Atoi(s); err != nil {
			b.Fatalf("ONCERUN_BENCH_BATCH: %v", err)
		}
	}
	pass := watchdog.Input{BatchSize: batch, DutyCycle: watchdog.DefaultDutyCycle}
	if s := os.Getenv("ONCERUN_BENCH_DUTY"); s != "" {
		var err error
		if pass.DutyCycle, err = strconv.ParseFloat(s, 64); err != nil || pass.DutyCycle <= 0 || pass.DutyCycle > 1 {
			b.Fatalf("ONCERUN_BENCH_DUTY %q is not in (0, 1]", s)
		}
	}
	ctx := context.Background()
	pool := pgtest.NewPool(b, 8)
	store, err := idempotency.New(pool, idempotency.Config{Owner: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, shop.Tools(shop.Config{})...)
	if err != nil {
		b.Fatal(err)
	}
	acts := &watchdog.Activities{Pool: pool, Tools: reg, Runs: runsClosed{}}

	for range b.N {
		b.StopTimer()
		if _, err := pool.Exec(ctx, `TRUNCATE idempotency_keys`); err != nil {
			b.Fatal(err)
		}
		// Ten keys per run, all expired an hour ago.
		if _, err := pool.Exec(ctx, `
INSERT INTO idempotency_keys (tenant, key, run_id, step, tool, state, args_hash, result, completed_at, expires_at)
SELECT 'bench', 'v1/bench/old-' || (n / 10) || '/' || (n % 10 + 1) || '/add_order_note', 'old-' || (n / 10),
       n % 10 + 1, 'add_order_note', 'completed', repeat('a', 64), '{}', now(), now() - interval '1 hour'
FROM generate_series(0, $1 - 1) AS n`, n); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE idempotency_keys`); err != nil {
			b.Fatal(err)
		}
		idle := claimLatencies(b, store, "idle", 5*time.Second, nil)

		b.StartTimer()
		start := time.Now()
		var pruned, dbTime atomic.Int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				out, err := acts.PruneExpired(ctx, watchdog.PruneInput{Cutoff: time.Now(), BatchSize: batch, Policy: watchdog.PolicyHold})
				if err != nil {
					b.Error(err)
					return
				}
				pruned.Add(int64(out.Pruned))
				dbTime.Add(int64(out.DBTime))
				if out.Selected < batch || out.Skipped > 0 {
					return
				}
				time.Sleep(pass.Pause(out.DBTime))
			}
		}()
		busy := claimLatencies(b, store, "busy", 0, done)
		<-done
		elapsed := time.Since(start)
		b.StopTimer()

		if got := pruned.Load(); got != int64(n) {
			b.Fatalf("pruned %d keys, want %d", got, n)
		}
		p99Idle, p99Busy := percentile(idle, 0.99), percentile(busy, 0.99)
		b.ReportMetric(float64(n)/elapsed.Seconds(), "keys/s")
		b.ReportMetric(float64(p99Idle.Microseconds())/1000, "p99-claim-idle-ms")
		b.ReportMetric(float64(p99Busy.Microseconds())/1000, "p99-claim-pruning-ms")
		b.ReportMetric(float64(p99Busy)/float64(p99Idle), "p99-ratio")
		b.ReportMetric(float64(len(busy)), "claims-during-pruning")
		b.ReportMetric(float64(dbTime.Load())/float64(elapsed), "db-share")
	}
}

// claimLatencies claims new keys one after another, each through Store.Do
// with an empty effect, for d or until stop closes, and returns each claim's
// latency.
func claimLatencies(b *testing.B, store *idempotency.Store, prefix string, d time.Duration, stop <-chan struct{}) []time.Duration {
	ctx := context.Background()
	var out []time.Duration
	deadline := time.Now().Add(d)
	for i := 0; ; i++ {
		if stop != nil {
			select {
			case <-stop:
				return out
			default:
			}
		} else if time.Now().After(deadline) {
			return out
		}
		k, err := keys.New("bench", fmt.Sprintf("%s-%d", prefix, i), 1, "add_order_note")
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		_, err = store.Do(ctx, idempotency.Claim{Key: k, ArgsHash: benchHash},
			func(context.Context, pgx.Tx) (json.RawMessage, error) { return json.RawMessage(`{}`), nil })
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, time.Since(t0))
	}
}

var benchHash = func() string {
	h, _ := keys.ArgsHash([]byte(`{}`))
	return h
}()

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}
