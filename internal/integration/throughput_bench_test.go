//go:build unix

package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/devserver"
	"github.com/oncerun/oncerun/internal/devstack"
	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/worker"
	"github.com/oncerun/oncerun/workflows"
)

// envThroughputProfile names a directory: when set,
// BenchmarkDevStackThroughput writes a CPU profile of each half it
// measures there, as oncerun-*.pprof and plain-*.pprof (go tool pprof
// merges the files it is given). It cannot be combined with go test's
// -cpuprofile: a process has one CPU profile at a time.
const envThroughputProfile = "ONCERUN_BENCH_CPUPROFILE"

// Each measured half of BenchmarkDevStackThroughput starts throughputRuns
// runs of throughputSteps steps at once.
const (
	throughputRuns  = 40
	throughputSteps = 10
)

// BenchmarkDevStackThroughput brings up the dev stack as `oncerun-dev dev` does
// (an embedded Temporal server, the worker and the approvals service in this
// process, one PostgreSQL database) and measures, each iteration, two
// halves on it:
//
//   - oncerun: 40 runs started at once through POST /v1/runs, each a
//     scripted plan of 10 keyed add_order_note steps;
//   - plain: 40 PlainNotesWorkflow executions started at once with the
//     Temporal client, each making the same 10 inserts as activities, on a
//     worker of its own with a pool as large as the dev stack's.
//
// It reports the steps per second of each, their ratio (oncerun's time over
// plain's; the goal: at most 1.10) and the CPU time this process spent per
// step in each. The host shares its cores with whatever else runs: compare
// the figures of one run of the benchmark, not across runs. Run it with
//
//	ONCERUN_BENCH_CPUPROFILE=/tmp/tp go test -run '^$' -bench BenchmarkDevStackThroughput \
//	  -benchtime 2x -count 3 -timeout 30m ./internal/integration/
//	go tool pprof -top -nodecount 25 /tmp/tp/oncerun-*.pprof
func BenchmarkDevStackThroughput(b *testing.B) {
	ctx := context.Background()
	s := startDevStack(b)
	var plan []planner.Call
	for n := 1; n <= throughputSteps; n++ {
		plan = append(plan, call("add_order_note", fmt.Sprintf(`{"order_id":"1001","text":"note %d"}`, n)))
	}
	oncerun := func(prefix string, n int) error {
		return concurrently(n, func(j int) error {
			started, _, err := s.api.Start(ctx, approvals.StartRequest{RunID: fmt.Sprintf("%s-%d", prefix, j), Plan: plan})
			if err != nil {
				return err
			}
			var st workflows.Status
			if err := s.tc.GetWorkflow(ctx, started.WorkflowID, started.TemporalRunID).Get(ctx, &st); err != nil {
				return err
			}
			if st.State != workflows.RunCompleted || len(st.Steps) != throughputSteps {
				return fmt.Errorf("run %s ended %s with %d steps: %s", started.RunID, st.State, len(st.Steps), st.Error)
			}
			return nil
		})
	}
	plain := func(prefix string, n int) error {
		return concurrently(n, func(j int) error {
			run := fmt.Sprintf("%s-%d", prefix, j)
			wr, err := s.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "plain-" + run, TaskQueue: s.plainQueue},
				PlainNotesWorkflow, run, throughputSteps)
			if err != nil {
				return err
			}
			return wr.Get(ctx, nil)
		})
	}
	// A few runs of each first, so that neither half pays for cold
	// connections and caches.
	require.NoError(b, oncerun("warm", 4))
	require.NoError(b, plain("warm", 4))

	var oncerunTally, plainTally tally
	for i := 0; b.Loop(); i++ {
		prefix := fmt.Sprintf("tp-%d", i)
		halves := []func(){
			func() { oncerunTally.measure(b, "oncerun", func() error { return oncerun(prefix, throughputRuns) }) },
			func() { plainTally.measure(b, "plain", func() error { return plain(prefix, throughputRuns) }) },
		}
		// Each half goes first every other iteration, so that neither
		// always meets the history the other left behind.
		if i%2 == 1 {
			halves[0], halves[1] = halves[1], halves[0]
		}
		for _, h := range halves {
			h()
		}
	}
	steps := float64(b.N * throughputRuns * throughputSteps)
	b.ReportMetric(steps/oncerunTally.wall.Seconds(), "oncerun-steps/s")
	b.ReportMetric(steps/plainTally.wall.Seconds(), "plain-steps/s")
	b.ReportMetric(oncerunTally.wall.Seconds()/plainTally.wall.Seconds(), "ratio")
	b.ReportMetric(1000*oncerunTally.cpu.Seconds()/steps, "oncerun-cpu-ms/step")
	b.ReportMetric(1000*plainTally.cpu.Seconds()/steps, "plain-cpu-ms/step")
}

// devStack is a running dev stack and what the benchmark needs of it.
type devStack struct {
	api        *approvals.Client
	tc         client.Client
	plainQueue string
}

// startDevStack runs devstack.Dev in this process on an empty database, a
// data directory and ports of its own, with the development token it makes,
// and a worker of PlainNotesWorkflow beside it. All stop when b ends.
func startDevStack(b *testing.B) *devStack {
	b.Helper()
	db := pgtest.NewEmptyDB(b) // migrated by the dev stack, as `oncerun dev` does
	dataDir := b.TempDir()
	port, err := devserver.FreePort("127.0.0.1")
	require.NoError(b, err)
	httpAddr, err := devserver.FreeAddr("127.0.0.1")
	require.NoError(b, err)
	apAddr, err := devserver.FreeAddr("127.0.0.1")
	require.NoError(b, err)

	ctx, stop := context.WithCancel(context.Background())
	out := &syncBuffer{}
	exited := make(chan error, 1)
	go func() {
		exited <- devstack.Dev(ctx, devstack.DevConfig{
			DataDir: dataDir, TemporalPort: port, Out: out,
			Worker: worker.Config{
				DatabaseURL: db.URL, HTTPAddr: httpAddr, TaskQueue: fmt.Sprintf("oncerun-tp-%d", queues.Add(1)),
				Approvals: worker.ApprovalsConfig{Addr: apAddr}, Logger: devLogger(),
			},
		})
	}()
	b.Cleanup(func() {
		stop()
		if err := <-exited; err != nil {
			b.Errorf("dev stack: %v", err)
		}
	})
	for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(out.String(), "oncerun dev is running"); time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-exited:
			b.Fatalf("the dev stack stopped (%v):\n%s", err, out.String())
		default:
		}
		require.True(b, time.Now().Before(deadline), "the dev stack did not start in 2 minutes:\n%s", out.String())
	}
	token, err := os.ReadFile(filepath.Join(dataDir, "dev-token"))
	require.NoError(b, err)

	tc, err := client.Dial(client.Options{HostPort: fmt.Sprintf("127.0.0.1:%d", port),
		Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	require.NoError(b, err)
	b.Cleanup(tc.Close)
	pool, err := worker.NewPool(ctx, db.URL)
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	s := &devStack{
		api: &approvals.Client{BaseURL: "http://" + apAddr, Token: strings.TrimSpace(string(token))},
		tc:  tc, plainQueue: fmt.Sprintf("plain-tp-%d", queues.Add(1)),
	}
	pw := sdkworker.New(tc, s.plainQueue, sdkworker.Options{})
	pw.RegisterWorkflow(PlainNotesWorkflow)
	pw.RegisterActivity(&plainNotes{pool: pool})
	require.NoError(b, pw.Start())
	b.Cleanup(pw.Stop)
	return s
}

// devLogger is the logger `oncerun-dev dev` builds at its default level
// (LOG_LEVEL=info, console lines), writing to nothing rather than to the
// terminal: the benchmark pays for every line the dev stack formats.
func devLogger() *zap.Logger {
	enc := zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(io.Discard), zap.InfoLevel), zap.AddCaller())
}

// concurrently calls f(0) … f(n-1) at once and returns their errors.
func concurrently(n int, f func(j int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for j := range n {
		wg.Go(func() { errs[j] = f(j) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// tally is what one half of BenchmarkDevStackThroughput took: wall time,
// and this process's CPU time (the embedded server's, both workers', the
// API's and the clients'), which the machine's other load disturbs less.
type tally struct{ wall, cpu time.Duration }

// measure adds f's wall and CPU time to t, under a CPU profile named after
// half when ONCERUN_BENCH_CPUPROFILE is set.
func (t *tally) measure(b *testing.B, half string, f func() error) {
	b.Helper()
	if dir := os.Getenv(envThroughputProfile); dir != "" {
		require.NoError(b, os.MkdirAll(dir, 0o755))
		file, err := os.CreateTemp(dir, half+"-*.pprof")
		require.NoError(b, err)
		defer file.Close()
		require.NoError(b, pprof.StartCPUProfile(file), "%s cannot be combined with -cpuprofile", envThroughputProfile)
		defer pprof.StopCPUProfile()
	}
	start, startCPU := time.Now(), processCPU(b)
	require.NoError(b, f())
	t.wall += time.Since(start)
	t.cpu += processCPU(b) - startCPU
}

// processCPU is the CPU time, user and system, this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
