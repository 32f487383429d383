package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oncerun/oncerun/internal/deployment"
	"github.com/oncerun/oncerun/worker"
)

// How a worker process died.
const (
	deathKill  = "kill"  // the harness's SIGKILL
	deathCrash = "crash" // a crash fault: the worker SIGKILLed itself
)

// death is a worker process's death, at the moment the harness saw the
// process gone.
type death struct {
	worker string // the worker's name, which names its log
	pid    int
	at     time.Time
	cause  string
}

// attempt is one line a worker logged as an activity attempt started or
// returned (worker.LogActivityStarted, worker.LogActivityFinished).
type attempt struct {
	worker   string
	pid      int
	at       time.Time
	finished bool
	activity activityRef
	number   int32
}

// activityRef names an activity across its attempts and workers: a local
// activity's ID is the same when another worker replays the workflow task
// and runs it again.
type activityRef struct {
	workflowID, runID, activityID, activityType string
	local                                       bool
}

// kind is the activity's type, " (local)" after a local activity's.
func (r activityRef) kind() string {
	if r.local {
		return r.activityType + " (local)"
	}
	return r.activityType
}

// procRef names one worker process. A pid may be used again, by another
// worker or by a later process of the same one; pairResumes tells the
// latter apart by their deaths.
type procRef struct {
	worker string
	pid    int
}

// resumed is an attempt that was running when its worker died, and the
// delay from the death to the next attempt of its activity starting on
// another worker process.
type resumed struct {
	kind, cause string
	delay       time.Duration
	// across says the process that started it again offered another tool
	// registry than the dead one (both known from their start lines).
	across bool
}

// pairing is what pairResumes found.
type pairing struct {
	resumed []resumed
	// inFlight counts the attempts running at a death; notResumed those of
	// them that never started again; superseded those another worker had
	// already started again before the death (the attempt had timed out
	// while its worker lived on).
	inFlight, notResumed, superseded int
}

// pairResumes finds, for each death, the activities whose attempts the
// dead process had started and not finished, and for each the first start
// of the same activity after the dead process's latest attempt of it.
func pairResumes(deaths []death, attempts []attempt, digests map[procRef]string) pairing {
	// Each process's lines in order; a pid may be used again by a later
	// process of the same worker, so a death owns the lines up to it since
	// the previous death of the same pid.
	lines := map[procRef][]attempt{}
	starts := map[activityRef][]attempt{}
	for _, a := range attempts {
		p := procRef{a.worker, a.pid}
		lines[p] = append(lines[p], a)
		if !a.finished {
			starts[a.activity] = append(starts[a.activity], a)
		}
	}
	for _, ss := range starts {
		slices.SortStableFunc(ss, func(a, b attempt) int { return a.at.Compare(b.at) })
	}
	deaths = slices.Clone(deaths)
	slices.SortStableFunc(deaths, func(a, b death) int { return a.at.Compare(b.at) })
	owned := map[procRef]int{} // lines owned by earlier deaths
	var out pairing
	for _, d := range deaths {
		p := procRef{d.worker, d.pid}
		ls := lines[p][owned[p]:]
		n := slices.IndexFunc(ls, func(a attempt) bool { return a.at.After(d.at) })
		if n < 0 {
			n = len(ls)
		}
		owned[p] += n
		type attemptKey struct {
			activity activityRef
			number   int32
		}
		running := map[attemptKey]attempt{}
		for _, a := range ls[:n] {
			if a.finished {
				delete(running, attemptKey{a.activity, a.number})
			} else {
				running[attemptKey{a.activity, a.number}] = a
			}
		}
		// An activity is in flight once, at its latest attempt: a local
		// activity whose attempt hangs is retried by the same worker.
		latest := map[activityRef]attempt{}
		for _, a := range running {
			if l, ok := latest[a.activity]; !ok || a.at.After(l.at) {
				latest[a.activity] = a
			}
		}
		for _, a := range latest {
			out.inFlight++
			// The dead process logged nothing of the activity after its
			// latest attempt: any later start is another process's.
			i := slices.IndexFunc(starts[a.activity], func(s attempt) bool { return s.at.After(a.at) })
			switch {
			case i < 0:
				out.notResumed++
			case starts[a.activity][i].at.Before(d.at):
				out.superseded++
			default:
				next := starts[a.activity][i]
				from, to := digests[procRef{a.worker, a.pid}], digests[procRef{next.worker, next.pid}]
				out.resumed = append(out.resumed, resumed{kind: a.activity.kind(), cause: d.cause, delay: next.at.Sub(d.at),
					across: from != "" && to != "" && from != to})
			}
		}
	}
	return out
}

// Resume is how soon the activity attempts that died with their worker
// ran again: from the death (the harness's SIGKILL or a crash fault) to
// the next attempt of the same activity starting on another worker
// process.
type Resume struct {
	// InFlight counts the attempts that were running when their worker
	// died.
	InFlight int `json:"attempts_in_flight_at_deaths"`
	// NotResumed counts those that never started again; Superseded those
	// another worker had started again before the death.
	NotResumed int `json:"not_resumed"`
	Superseded int `json:"superseded_before_death"`
	// AcrossRegistries counts the attempts started again by a worker
	// process of another tool registry than the dead one's.
	AcrossRegistries int `json:"across_registries"`
	// All is every attempt that started again; ByType the same by activity
	// type, ByCause by how the worker died (deathKill, deathCrash).
	All     Delays            `json:"all"`
	ByType  map[string]Delays `json:"by_activity_type,omitempty"`
	ByCause map[string]Delays `json:"by_death,omitempty"`
}

// Delays summarises resume delays, in seconds.
type Delays struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_seconds"`
	P90   float64 `json:"p90_seconds"`
	Max   float64 `json:"max_seconds"`
}

func (d Delays) String() string {
	if d.Count == 0 {
		return "none"
	}
	return fmt.Sprintf("%.1fs / %.1fs / %.1fs", d.P50, d.P90, d.Max)
}

func (p pairing) summary() Resume {
	r := Resume{InFlight: p.inFlight, NotResumed: p.notResumed, Superseded: p.superseded}
	byType, byCause := map[string][]time.Duration{}, map[string][]time.Duration{}
	var all []time.Duration
	for _, x := range p.resumed {
		if x.across {
			r.AcrossRegistries++
		}
		all = append(all, x.delay)
		byType[x.kind] = append(byType[x.kind], x.delay)
		byCause[x.cause] = append(byCause[x.cause], x.delay)
	}
	r.All, r.ByType, r.ByCause = delays(all), delaysBy(byType), delaysBy(byCause)
	return r
}

func delaysBy(groups map[string][]time.Duration) map[string]Delays {
	if len(groups) == 0 {
		return nil
	}
	out := make(map[string]Delays, len(groups))
	for k, ds := range groups {
		out[k] = delays(ds)
	}
	return out
}

// delays summarises ds with nearest-rank percentiles.
func delays(ds []time.Duration) Delays {
	if len(ds) == 0 {
		return Delays{}
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(ds)))) - 1
		return ds[max(i, 0)].Seconds()
	}
	return Delays{Count: len(ds), P50: rank(0.5), P90: rank(0.9), Max: ds[len(ds)-1].Seconds()}
}

// resume measures the resume delays from the workers' deaths and logs.
func (h *harness) resume() Resume {
	var (
		deaths   []death
		attempts []attempt
	)
	digests := map[procRef]string{}
	for _, w := range h.workers {
		w.mu.Lock()
		deaths = append(deaths, w.deaths...)
		w.mu.Unlock()
		attempts = append(attempts, readAttempts(w.name, w.logPath)...)
		readDigests(w.name, w.logPath, digests)
	}
	return pairResumes(deaths, attempts, digests).summary()
}

// readDigests reads, from a worker's log, the short registry digest each of
// its processes offered, by the worker's start line's identity
// (<pid>@<host>@<digest>).
func readDigests(workerName, path string, into map[procRef]string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `"msg":"worker started"`) {
			continue
		}
		var e struct {
			Identity string `json:"identity"`
		}
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		pid, _, _ := strings.Cut(e.Identity, "@")
		n, err := strconv.Atoi(pid)
		if digest := deployment.DigestOfIdentity(e.Identity); err == nil && digest != "" {
			into[procRef{workerName, n}] = digest
		}
	}
}

// readAttempts reads the attempt lines of a worker's log, in order; a log
// that cannot be read has none.
func readAttempts(workerName, path string) []attempt {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	started, finished := `"msg":"`+worker.LogActivityStarted+`"`, `"msg":"`+worker.LogActivityFinished+`"`
	var out []attempt
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		isStart := strings.Contains(line, started)
		if !isStart && !strings.Contains(line, finished) {
			continue
		}
		var e struct {
			TS           float64 `json:"ts"`
			PID          int     `json:"pid"`
			WorkflowID   string  `json:"workflow_id"`
			RunID        string  `json:"workflow_run_id"`
			ActivityID   string  `json:"activity_id"`
			ActivityType string  `json:"activity_type"`
			Attempt      int32   `json:"attempt"`
			Local        bool    `json:"local"`
		}
		if json.Unmarshal([]byte(line), &e) != nil || e.PID == 0 {
			continue
		}
		sec, frac := math.Modf(e.TS)
		out = append(out, attempt{worker: workerName, pid: e.PID, at: time.Unix(int64(sec), int64(frac*1e9)), finished: !isStart,
			activity: activityRef{e.WorkflowID, e.RunID, e.ActivityID, e.ActivityType, e.Local}, number: e.Attempt})
	}
	return out
}
