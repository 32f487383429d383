package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// spread is the median of a figure over the rounds, with its range.
type spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{Median: m, Min: s[0], Max: s[len(s)-1]}
}

func (s spread) String() string { return fmt.Sprintf("%.2f (%.2f–%.2f)", s.Median, s.Min, s.Max) }

// summary is an implementation's figures at one concurrency on one
// Temporal server, over the rounds.
type summary struct {
	Temporal string `json:"temporal"`
	Runs     int    `json:"runs"`
	Impl     string `json:"impl"`
	// CPU milliseconds per step: the total and its parts.
	CPU      spread `json:"cpu_ms_per_step"`
	Process  spread `json:"process_cpu_ms_per_step"`
	TempCPU  spread `json:"temporal_cpu_ms_per_step"`
	Postgres spread `json:"postgres_cpu_ms_per_step"`
	Rate     spread `json:"steps_per_s"`
	// CPURatio and RateRatio are the medians' ratios to the baseline's
	// (0 without a baseline).
	CPURatio  float64 `json:"cpu_ratio_to_baseline"`
	RateRatio float64 `json:"steps_per_s_ratio_to_baseline"`
	// EndedBackends adds up the halves' ended backends.
	EndedBackends int `json:"ended_backends"`
}

// summarize groups the halves by server, concurrency and implementation,
// in the order of cfg.
func summarize(cfg config, halves []half) []summary {
	var out []summary
	for _, kind := range cfg.temporal {
		for _, c := range cfg.runs {
			var group []summary
			for _, impl := range allImpls {
				var cpu, proc, temp, pg, rate []float64
				s := summary{Temporal: kind, Runs: c, Impl: impl}
				for _, h := range halves {
					if h.Temporal != kind || h.Runs != c || h.Impl != impl {
						continue
					}
					p, t, q, total := h.cpuPerStep()
					cpu, proc, temp, pg = append(cpu, total), append(proc, p), append(temp, t), append(pg, q)
					rate = append(rate, h.stepsPerSecond())
					s.EndedBackends += h.EndedBackends
				}
				if len(cpu) == 0 {
					continue
				}
				s.CPU, s.Process, s.TempCPU, s.Postgres, s.Rate = spreadOf(cpu), spreadOf(proc), spreadOf(temp), spreadOf(pg), spreadOf(rate)
				group = append(group, s)
			}
			if i := slices.IndexFunc(group, func(s summary) bool { return s.Impl == baseline }); i >= 0 {
				base := group[i]
				for j := range group {
					if base.CPU.Median > 0 { // less than a clock tick: no ratio
						group[j].CPURatio = group[j].CPU.Median / base.CPU.Median
					}
					group[j].RateRatio = group[j].Rate.Median / base.Rate.Median
				}
			}
			out = append(out, group...)
		}
	}
	return out
}

// goal is one of the benchmark's goals, as measured.
type goal struct {
	Temporal string  `json:"temporal"`
	Runs     int     `json:"runs"`
	What     string  `json:"what"`
	Ratio    float64 `json:"ratio"`
	Limit    float64 `json:"limit"`
	Met      bool    `json:"met"`
	Text     string  `json:"text"`
}

// goals checks oncerun against DBOS RunAsTransaction: its CPU per step at
// most twice DBOS's at every concurrency, its steps per second at 40 runs
// at once at least half DBOS's.
func goals(sums []summary) []goal {
	var out []goal
	for _, o := range sums {
		if o.Impl != implOncerun || o.CPURatio == 0 {
			continue
		}
		i := slices.IndexFunc(sums, func(s summary) bool { return s.Temporal == o.Temporal && s.Runs == o.Runs && s.Impl == baseline })
		base := sums[i]
		g := goal{Temporal: o.Temporal, Runs: o.Runs, What: "cpu", Ratio: o.CPURatio, Limit: 2, Met: o.CPURatio <= 2}
		g.Text = fmt.Sprintf("oncerun CPU/step ≤ 2× DBOS RunAsTransaction's: %.2f ms against %.2f, %.2f×: %s",
			o.CPU.Median, base.CPU.Median, o.CPURatio, metOrMissed(g.Met))
		out = append(out, g)
		if o.Runs == 40 {
			g := goal{Temporal: o.Temporal, Runs: o.Runs, What: "steps/s", Ratio: o.RateRatio, Limit: 0.5, Met: o.RateRatio >= 0.5}
			g.Text = fmt.Sprintf("oncerun steps/s ≥ ½ DBOS RunAsTransaction's: %.1f against %.1f, %.2f×: %s",
				o.Rate.Median, base.Rate.Median, o.RateRatio, metOrMissed(g.Met))
			out = append(out, g)
		}
	}
	return out
}

func metOrMissed(met bool) string {
	if met {
		return "met"
	}
	return "missed"
}

// printTables writes a table per server and concurrency, then the goals.
func printTables(w io.Writer, cfg config, sums []summary, gs []goal) {
	for i, s := range sums {
		if i == 0 || s.Temporal != sums[i-1].Temporal || s.Runs != sums[i-1].Runs {
			at := fmt.Sprintf("%d runs at once", s.Runs)
			if s.Runs == 1 {
				at = fmt.Sprintf("1 run at a time (%d one after the other)", max(1, cfg.minRuns))
			}
			fmt.Fprintf(w, "\nTemporal on %s, %s, %d steps a run; medians (min–max) of %d rounds\n\n", s.Temporal, at, cfg.steps, cfg.rounds)
			fmt.Fprintln(w, "| implementation | CPU ms/step | process | temporal | postgres | steps/s | CPU/step vs DBOS tx | steps/s vs DBOS tx |")
			fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
		}
		temporal := s.TempCPU.String()
		if s.Impl == implDBOSTx || s.Impl == implDBOSStep {
			temporal = "–"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", labels[s.Impl], s.CPU, s.Process, temporal, s.Postgres, s.Rate,
			ratio(s.CPURatio), ratio(s.RateRatio))
	}
	var ended []string
	for _, s := range sums {
		if s.EndedBackends > 0 {
			ended = append(ended, fmt.Sprintf("%s on %s at %d: %d", s.Impl, s.Temporal, s.Runs, s.EndedBackends))
		}
	}
	if len(ended) > 0 {
		fmt.Fprintf(w, "\nPostgreSQL backends that ended during the halves, the CPU time they spent before they ended is missing: %s\n", strings.Join(ended, "; "))
	}
	if len(gs) > 0 {
		fmt.Fprintln(w, "\ngoals")
		for _, g := range gs {
			fmt.Fprintf(w, "  temporal=%s runs=%d: %s\n", g.Temporal, g.Runs, g.Text)
		}
	}
}

func ratio(r float64) string {
	if r == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", r)
}

// printBenchmarks writes every half as a line of Go's benchmark format,
// one iteration whose ns/op is the wall time per step, so that benchstat
// reads the rounds as samples.
func printBenchmarks(w io.Writer, halves []half) {
	fmt.Fprintln(w, "\npkg: github.com/oncerun/oncerun/bench/peers")
	for _, h := range halves {
		p, t, q, total := h.cpuPerStep()
		fmt.Fprintf(w, "BenchmarkPeers/temporal=%s/runs=%d/impl=%s 1 %d ns/op %.3f cpu-ms/step %.1f steps/s %.3f process-cpu-ms/step %.3f temporal-cpu-ms/step %.3f postgres-cpu-ms/step\n",
			h.Temporal, h.Runs, h.Impl, h.Wall.Nanoseconds()/int64(h.Steps), total, h.stepsPerSecond(), p, t, q)
	}
}

// report is the -json output.
type report struct {
	Rounds   int                         `json:"rounds"`
	Steps    int                         `json:"steps"`
	MinRuns  int                         `json:"min_runs"`
	PoolSize int                         `json:"pool_size"`
	Halves   []half                      `json:"halves"`
	Summary  []summary                   `json:"summary"`
	Goals    []goal                      `json:"goals"`
	Tallies  map[string]map[string]tally `json:"tallies"`
}

func printJSON(w io.Writer, r report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
