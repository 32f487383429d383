package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// userHZ is the kernel's clock ticks per second, the unit of /proc's CPU
// times, when `getconf CLK_TCK` cannot tell.
const userHZ = 100

// clockTicks asks getconf for the clock ticks per second.
func clockTicks() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		return userHZ
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil || n <= 0 {
		return userHZ
	}
	return n
}

// cpuTimes is CPU time, user and system, split by who spent it.
type cpuTimes struct {
	Process  time.Duration `json:"process"`
	Temporal time.Duration `json:"temporal"`
	Postgres time.Duration `json:"postgres"`
}

// sample is what a probe read at one moment: the CPU time, in clock
// ticks, of this process and of each process of the Temporal server and of
// PostgreSQL that it counts.
type sample struct {
	self     int64
	temporal map[int]int64
	postgres map[int]int64
}

// since returns the CPU time spent between s0 and s, and how many of the
// PostgreSQL processes s0 counted have ended since, taking the CPU time
// they spent meanwhile with them. Each process counts for what it spent
// between the samples: a process that began meanwhile counts whole.
func (s sample) since(s0 sample, p *probe) (cpuTimes, int) {
	delta := func(now, then map[int]int64) int64 {
		var d int64
		for pid, ticks := range now {
			d += ticks - then[pid]
		}
		return d
	}
	ended := 0
	for pid := range s0.postgres {
		if _, ok := s.postgres[pid]; !ok {
			ended++
		}
	}
	return cpuTimes{
		Process:  p.duration(s.self - s0.self),
		Temporal: p.duration(delta(s.temporal, s0.temporal)),
		Postgres: p.duration(delta(s.postgres, s0.postgres)),
	}, ended
}

// procStat is a process's line of /proc/<pid>/stat, in clock ticks.
type procStat struct {
	pid, ppid      int
	comm           string
	utime, stime   int64
	cutime, cstime int64
}

// readStat reads /proc/<pid>/stat. The command name is in parentheses and
// may hold spaces and parentheses itself: the fields follow its last ')'.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	// Fields from the state on: state is field 3, ppid 4, utime 14,
	// stime 15, cutime 16 and cstime 17.
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	num := func(i int) int64 { n, _ := strconv.ParseInt(f[i-3], 10, 64); return n }
	return procStat{pid: pid, ppid: int(num(4)), comm: string(b[open+1 : end]),
		utime: num(14), stime: num(15), cutime: num(16), cstime: num(17)}, nil
}

// backendTitle matches the process title of a client backend, which names
// its client's address: "… 127.0.0.1(53412) idle" or "… [local] idle".
var backendTitle = regexp.MustCompile(`\(\d+\)|\[local\]`)

// probe reads the CPU times of this process, of the Temporal server's
// process tree and of PostgreSQL's processes.
type probe struct {
	ticks       int64
	self        int
	temporalPID int // 0: no Temporal server
}

func newProbe() *probe { return &probe{ticks: clockTicks(), self: os.Getpid()} }

// read takes a sample. Of PostgreSQL's client backends it counts those
// whose title names one of dbs; its other processes (the postmaster, the
// checkpointer, the WAL writer …) are counted whoever made them work.
func (p *probe) read(dbs []string) (sample, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return sample{}, err
	}
	stats := map[int]procStat{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(pid); err == nil { // a process may end meanwhile
			stats[pid] = st
		}
	}
	self, ok := stats[p.self]
	if !ok {
		return sample{}, fmt.Errorf("no /proc entry for this process (%d)", p.self)
	}
	s := sample{self: self.utime + self.stime, temporal: map[int]int64{}, postgres: map[int]int64{}}
	for pid, st := range stats {
		if p.temporalPID != 0 && descends(stats, pid, p.temporalPID) {
			s.temporal[pid] = st.utime + st.stime + st.cutime + st.cstime
		}
		if st.comm != "postgres" {
			continue
		}
		title, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err != nil {
			continue
		}
		if !backendTitle.Match(title) || namesOneOf(string(title), dbs) {
			s.postgres[pid] = st.utime + st.stime
		}
	}
	return s, nil
}

func (p *probe) duration(ticks int64) time.Duration {
	return time.Duration(ticks) * time.Second / time.Duration(p.ticks)
}

// descends reports whether pid is root or one of its descendants.
func descends(stats map[int]procStat, pid, root int) bool {
	for range 64 { // deeper trees are not a server's
		if pid == root {
			return true
		}
		st, ok := stats[pid]
		if !ok || st.ppid <= 1 {
			return false
		}
		pid = st.ppid
	}
	return false
}

// namesOneOf reports whether a backend's title, "postgres: [cluster: ]user
// database client state", has one of dbs as a word.
func namesOneOf(title string, dbs []string) bool {
	for _, w := range strings.Fields(strings.ReplaceAll(title, "\x00", " ")) {
		if slices.Contains(dbs, w) {
			return true
		}
	}
	return false
}
