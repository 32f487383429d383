package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPairResumesMeasuresFromTheDeathToTheNextStartElsewhere(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	step := activityRef{"run-a", "r1", "acme/run-a/2/issue_credit", "RunTool", false}
	other := activityRef{"run-b", "r1", "acme/run-b/2/issue_credit", "RunTool", false}
	plan := activityRef{"run-a", "r1", "3", "Plan", true}
	start := func(worker string, pid int, s float64, a activityRef, n int32) attempt {
		return attempt{worker: worker, pid: pid, at: at(s), activity: a, number: n}
	}
	finish := func(worker string, pid int, s float64, a activityRef, n int32) attempt {
		x := start(worker, pid, s, a, n)
		x.finished = true
		return x
	}
	kill := func(worker string, pid int, s float64) death {
		return death{worker: worker, pid: pid, at: at(s), cause: deathKill}
	}
	for _, tc := range []struct {
		name     string
		deaths   []death
		attempts []attempt
		want     []resumed
		// inFlight, notResumed, superseded
		counts [3]int
		// digests are the processes' registries, when the case names them.
		digests map[procRef]string
	}{
		{
			name:   "a step killed mid-attempt runs again on another worker",
			deaths: []death{kill("worker-0", 100, 10)},
			attempts: []attempt{
				start("worker-0", 100, 8, step, 1),
				start("worker-1", 200, 17.5, step, 2),
				finish("worker-1", 200, 18, step, 2),
			},
			want:   []resumed{{kind: "RunTool", cause: deathKill, delay: 7500 * time.Millisecond}},
			counts: [3]int{1, 0, 0},
		},
		{
			name:   "an attempt that finished before the death is not in flight",
			deaths: []death{kill("worker-0", 100, 10)},
			attempts: []attempt{
				start("worker-0", 100, 8, step, 1),
				finish("worker-0", 100, 9, step, 1),
				start("worker-1", 200, 12, step, 2),
			},
			counts: [3]int{0, 0, 0},
		},
		{
			name:   "only the dead process's attempts count, not its name's next process",
			deaths: []death{kill("worker-0", 100, 10)},
			attempts: []attempt{
				start("worker-0", 99, 2, other, 1), // an earlier process of worker-0, killed unseen
				start("worker-0", 100, 8, step, 1),
				start("worker-0", 101, 14, step, 2), // worker-0 started again
			},
			want:   []resumed{{kind: "RunTool", cause: deathKill, delay: 4 * time.Second}},
			counts: [3]int{1, 0, 0},
		},
		{
			name:   "the next start of another activity does not resume it",
			deaths: []death{kill("worker-0", 100, 10)},
			attempts: []attempt{
				start("worker-0", 100, 8, step, 1),
				start("worker-1", 200, 11, other, 1),
				start("worker-1", 200, 20, step, 2),
			},
			want:   []resumed{{kind: "RunTool", cause: deathKill, delay: 10 * time.Second}},
			counts: [3]int{1, 0, 0},
		},
		{
			name:   "the first start after the death counts, not a later one",
			deaths: []death{kill("worker-0", 100, 10)},
			attempts: []attempt{
				start("worker-0", 100, 8, step, 1),
				start("worker-2", 300, 30, step, 3),
				start("worker-1", 200, 13, step, 2),
			},
			want:   []resumed{{kind: "RunTool", cause: deathKill, delay: 3 * time.Second}},
			counts: [3]int{1, 0, 0},
		},
		{
			name:   "a chain: each death measured to its own next start",
			deaths: []death{kill("worker-0", 100, 10), {worker: "worker-1", pid: 200, at: at(20), cause: deathCrash}},
			attempts: []attempt{
				start("worker-0", 100, 8, step, 1),
				start("worker-1", 200, 12, step, 2),
				start("worker-2", 300, 26, step, 3),
				finish("worker-2", 300, 27, step, 3),
			},
			want:   []resumed{{kind: "RunTool", cause: deathKill, delay: 2 * time.Second}, {kind: "RunTool", cause: deathCrash, delay: 6 * time.Second}},
			counts: [3]int{2, 0, 0},
		},
		{
			name:   "started again elsewhere before the death: superseded, not a resume",
			deaths: []death{kill("worker-0", 100, 30)},
			attempts: []attempt{
				start("worker-0", 100, 8, step, 1),
				start("worker-1", 200, 20, step, 2),
				finish("worker-1", 200, 21, step, 2),
			},
			counts: [3]int{1, 0, 1},
		},
		{
			name:   "never started again",
			deaths: []death{{worker: "worker-0", pid: 100, at: at(10), cause: deathCrash}},
			attempts: []attempt{
				start("worker-0", 100, 8, step, 1),
			},
			counts: [3]int{1, 1, 0},
		},
		{
			name:   "a process that did not die has nothing in flight",
			deaths: []death{kill("worker-0", 100, 10)},
			attempts: []attempt{
				start("worker-1", 200, 8, step, 1),
				start("worker-2", 300, 15, step, 2),
			},
			counts: [3]int{0, 0, 0},
		},
		{
			name:   "a pid used again by the worker's next process: each death owns the lines before it",
			deaths: []death{kill("worker-0", 100, 10), kill("worker-0", 100, 30)},
			attempts: []attempt{
				start("worker-0", 100, 8, step, 1),
				start("worker-0", 100, 19, step, 2),
				finish("worker-0", 100, 20, step, 2),
				start("worker-0", 100, 25, other, 1),
				start("worker-1", 200, 41, other, 2),
			},
			want:   []resumed{{kind: "RunTool", cause: deathKill, delay: 9 * time.Second}, {kind: "RunTool", cause: deathKill, delay: 11 * time.Second}},
			counts: [3]int{2, 0, 0},
		},
		{
			name:   "an activity whose hung attempt its worker retried is in flight once",
			deaths: []death{kill("worker-0", 100, 10)},
			attempts: []attempt{
				start("worker-0", 100, 5, plan, 1),
				start("worker-0", 100, 8, plan, 2),
				start("worker-1", 200, 14, plan, 1),
			},
			want:   []resumed{{kind: "Plan (local)", cause: deathKill, delay: 4 * time.Second}},
			counts: [3]int{1, 0, 0},
		},
		{
			name:   "a step run again by a worker of another registry",
			deaths: []death{kill("worker-0", 100, 10)},
			attempts: []attempt{
				start("worker-0", 100, 8, step, 1),
				start("worker-1", 200, 17.5, step, 2),
			},
			digests: map[procRef]string{{"worker-0", 100}: "aaaaaaaaaaaa", {"worker-1", 200}: "bbbbbbbbbbbb"},
			want:    []resumed{{kind: "RunTool", cause: deathKill, delay: 7500 * time.Millisecond, across: true}},
			counts:  [3]int{1, 0, 0},
		},
		{
			name:   "a local activity, run again when another worker replays the workflow task",
			deaths: []death{kill("worker-0", 100, 10)},
			attempts: []attempt{
				start("worker-0", 100, 9.9, plan, 1),
				start("worker-1", 200, 21, plan, 1),
			},
			want:   []resumed{{kind: "Plan (local)", cause: deathKill, delay: 11 * time.Second}},
			counts: [3]int{1, 0, 0},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := pairResumes(tc.deaths, tc.attempts, tc.digests)
			assert.ElementsMatch(t, tc.want, got.resumed)
			assert.Equal(t, tc.counts, [3]int{got.inFlight, got.notResumed, got.superseded})
		})
	}
}

func TestDelaysAreNearestRankPercentiles(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 10; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Second)
	}
	assert.Equal(t, Delays{Count: 10, P50: 5, P90: 9, Max: 10}, delays(ds))
	assert.Equal(t, Delays{Count: 1, P50: 3, P90: 3, Max: 3}, delays(ds[7:8]))
	assert.Equal(t, Delays{}, delays(nil))
	r := pairing{resumed: []resumed{{kind: "RunTool", cause: deathKill, delay: time.Second}, {kind: "Deliver", cause: deathCrash, delay: 4 * time.Second}, {kind: "RunTool", cause: deathCrash, delay: 2 * time.Second}},
		inFlight: 4, notResumed: 1}.summary()
	assert.Equal(t, Resume{InFlight: 4, NotResumed: 1, All: Delays{Count: 3, P50: 2, P90: 4, Max: 4},
		ByType:  map[string]Delays{"RunTool": {Count: 2, P50: 1, P90: 2, Max: 2}, "Deliver": {Count: 1, P50: 4, P90: 4, Max: 4}},
		ByCause: map[string]Delays{deathKill: {Count: 1, P50: 1, P90: 1, Max: 1}, deathCrash: {Count: 2, P50: 2, P90: 4, Max: 4}}}, r)
	assert.Equal(t, "2.0s / 4.0s / 4.0s", r.All.String())
	assert.Equal(t, "none", Delays{}.String())
}

func TestAttemptsAreReadFromTheWorkersLogs(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "worker-0.log")
	require.NoError(t, os.WriteFile(log, []byte(strings.Join([]string{
		`{"level":"info","ts":1700000008.25,"msg":"worker started"}`,
		`{"level":"info","ts":1700000008.5,"caller":"host/activitylog.go:63","msg":"activity started","pid":100,"workflow_id":"run-a","workflow_run_id":"r1","activity_id":"k","activity_type":"RunTool","attempt":2,"local":false,"tenant":"acme","run_id":"run-a","step":2,"tool":"issue_credit"}`,
		`{"level":"warn","ts":1700000009,"msg":"fault injection: killing this worker after the step committed","point":"after-commit"}`,
		`{"level":"info","ts":1700000009.75,"msg":"activity finished","pid":101,"workflow_id":"run-b","workflow_run_id":"r2","activity_id":"3","activity_type":"Plan","attempt":1,"local":true,"took":0.001,"failed":false}`,
		`{"level":"info","ts":1700000010,"msg":"activity started","pid":0}`,
		`not json at all`,
	}, "\n")), 0o644))
	got := readAttempts("worker-0", log)
	require.Len(t, got, 2)
	assert.Equal(t, attempt{worker: "worker-0", pid: 100, at: time.Unix(1_700_000_008, 500_000_000),
		activity: activityRef{"run-a", "r1", "k", "RunTool", false}, number: 2}, got[0])
	assert.Equal(t, attempt{worker: "worker-0", pid: 101, at: time.Unix(1_700_000_009, 750_000_000), finished: true,
		activity: activityRef{"run-b", "r2", "3", "Plan", true}, number: 1}, got[1])
	assert.Nil(t, readAttempts("worker-1", log+".missing"))
}

func TestTheRegistryOfEachWorkerProcessIsReadFromItsStartLine(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "worker-0.log")
	require.NoError(t, os.WriteFile(log, []byte(strings.Join([]string{
		`{"level":"info","ts":1700000008.25,"msg":"worker started","identity":"100@vm@0e6dd36be240"}`,
		`{"level":"info","ts":1700000009,"msg":"worker started","identity":"101@vm@a2f6134e67b0"}`,
		`{"level":"info","ts":1700000010,"msg":"worker started","identity":"102@vm"}`,
	}, "\n")), 0o644))
	got := map[procRef]string{}
	readDigests("worker-0", log, got)
	assert.Equal(t, map[procRef]string{{"worker-0", 100}: "0e6dd36be240", {"worker-0", 101}: "a2f6134e67b0"}, got)
}
