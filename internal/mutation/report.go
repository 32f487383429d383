package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// printList prints the table of mutations.
func printList(w io.Writer, ms []numbered, asJSON bool) error {
	if asJSON {
		type row struct {
			Number int `json:"number"`
			Mutation
		}
		rows := make([]row, len(ms))
		for i, m := range ms {
			rows[i] = row{m.N, m.Mutation}
		}
		return writeJSON(w, rows)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tmutation\tfile\ttests\tbug")
	for _, m := range ms {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", m.N, m.Name, m.File, testsRun(m.Mutation), m.Bug)
	}
	return tw.Flush()
}

// printReport prints what became of each mutation run, and a last line
// that counts them.
func printReport(w io.Writer, results []Result, asJSON bool) error {
	if asJSON {
		return writeJSON(w, struct {
			Results []Result `json:"results"`
			OK      bool     `json:"ok"`
		}{results, allCaught(results)})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tmutation\tfile\ttests run\tresult\tcaught by\tseconds")
	for _, r := range results {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%.1f\n", r.Number, r.Name, r.File, testsRun(r.Mutation), r.Result,
			strings.Join(r.CaughtBy, ", "), r.Seconds)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	counts := map[string]int{}
	for _, r := range results {
		counts[r.Result]++
	}
	fmt.Fprintf(w, "\n%d of %d mutations caught", counts[resultCaught], len(results))
	for _, k := range []string{resultSurvived, resultBroken, resultStale, resultInterrupted} {
		if counts[k] > 0 {
			fmt.Fprintf(w, ", %d %s", counts[k], k)
		}
	}
	fmt.Fprintln(w)
	for _, r := range results {
		if r.Detail != "" {
			fmt.Fprintf(w, "\nmutation %d (%s) %s: %s\n", r.Number, r.Name, r.Result, r.Detail)
		}
		if r.Result == resultSurvived {
			fmt.Fprintf(w, "\nmutation %d (%s) SURVIVED: no test noticed that %s\n", r.Number, r.Name, r.Bug)
		}
	}
	return nil
}

// testsRun names the tests a mutation runs: their packages and how many.
func testsRun(m Mutation) string {
	pkgs := make([]string, len(m.Packages))
	for i, p := range m.Packages {
		pkgs[i] = strings.TrimPrefix(p, "./")
	}
	return fmt.Sprintf("%s (%d)", strings.Join(pkgs, ", "), len(m.Tests))
}

func allCaught(results []Result) bool {
	for _, r := range results {
		if r.Result != resultCaught {
			return false
		}
	}
	return len(results) > 0
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
