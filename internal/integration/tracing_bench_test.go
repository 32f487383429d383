package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/workflows"
)

// cpuTicks is the CPU time process pid has used, user and system, in clock
// ticks (Linux's /proc/<pid>/stat, fields 14 and 15).
func cpuTicks(tb testing.TB, pid int) int64 {
	tb.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(tb, err)
	// The command's name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis.
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	utime, err := strconv.ParseInt(fields[11], 10, 64)
	require.NoError(tb, err)
	stime, err := strconv.ParseInt(fields[12], 10, 64)
	require.NoError(tb, err)
	return utime + stime
}

// clockTicks is Linux's USER_HZ, the unit of /proc's CPU times.
const clockTicks = 100

// BenchmarkTracingCost measures what tracing costs a worker: an `oncerun
// worker` process runs scripted runs of 10 steps (5 reads, 5 keyed
// inserts), with tracing off, on at 100% sampling to an OTLP/HTTP
// receiver in this process, and on with a tenth of the runs sampled
// (tracing=tenth); it reports the worker's CPU per step (user and system,
// from /proc, measured from the first run's start to the last one's end)
// and steps/s. benchstat's /tracing column compares them (the
// goal: off costs nothing measurable, on at most 10% CPU per step).
func BenchmarkTracingCost(b *testing.B) {
	const (
		steps = 10
		batch = 50 // runs per iteration
	)
	plan := make([]planner.Call, 0, steps)
	for i := 0; i < steps; i++ {
		if i%2 == 0 {
			plan = append(plan, call(shop.ToolLookupOrder, `{"order_id":"1001"}`))
		} else {
			plan = append(plan, call(shop.ToolAddOrderNote, fmt.Sprintf(`{"order_id":"1001","text":"note %d"}`, i)))
		}
	}
	for _, mode := range []string{"off", "on", "tenth"} {
		b.Run("tracing="+mode, func(b *testing.B) {
			w := newTracedWorld(b)
			var env []string
			switch mode {
			case "off":
				env = append(env, "OTEL_SDK_DISABLED=true")
			case "tenth":
				// A tenth of the runs, whole: a production's sampling.
				env = append(env, "OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG=0.1")
			}
			p := w.start(env...)
			rc := &runs.Client{Temporal: temporalClient, TaskQueue: w.queue}
			ctx := context.Background()
			var ticks int64
			var wall time.Duration
			for i := 0; b.Loop(); i++ {
				before, start := cpuTicks(b, p.cmd.Process.Pid), time.Now()
				ids := make([]string, batch)
				for r := range ids {
					ids[r] = fmt.Sprintf("bench-%s-%d-%d", w.queue, i, r)
					_, err := rc.Start(ctx, workflows.RunInput{Tenant: "acme", RunID: ids[r], Plan: plan})
					require.NoError(b, err)
				}
				for _, id := range ids {
					var st workflows.Status
					require.NoError(b, temporalClient.GetWorkflow(ctx, workflows.WorkflowID("acme", id), "").Get(ctx, &st))
					require.Equal(b, workflows.RunCompleted, st.State)
				}
				wall += time.Since(start)
				ticks += cpuTicks(b, p.cmd.Process.Pid) - before
			}
			total := float64(b.N * batch * steps)
			b.ReportMetric(float64(ticks)*1e3/clockTicks/total, "worker-cpu-ms/step")
			b.ReportMetric(total/wall.Seconds(), "steps/s")
			p.stop()
			if mode != "off" {
				require.NotEmpty(b, w.recv.named("oncerun.step ", nil), "the spans reached the receiver")
			} else {
				require.Empty(b, w.recv.Spans(), "tracing off sends nothing")
			}
		})
	}
}
