package replay

import (
	"cmp"
	"fmt"
	"io"
	"strings"

	"github.com/oncerun/oncerun/internal/untrusted"
)

// Result is the check of one run.
type Result struct {
	// WorkflowID is the run's workflow ID, and Tenant and RunID the
	// tenant and run id it names (the run's input's, when it has one).
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id"`
	Tenant     string `json:"tenant"`
	// TemporalRunID is Temporal's run ID of the execution checked; File
	// the history file it was read from.
	TemporalRunID string `json:"temporal_run_id,omitempty"`
	File          string `json:"file,omitempty"`
	// OK says the run replays and no step of it would change identity.
	OK bool `json:"ok"`
	// Open says the run has not closed.
	Open bool `json:"open"`
	// ReplayError is the replay's error, and FirstEvent the first event of
	// the history that this build's code no longer produces, when it could
	// be told.
	ReplayError string `json:"replay_error,omitempty"`
	FirstEvent  *Event `json:"first_event,omitempty"`
	// Identity lists the steps, and the calls of recorded planning turns,
	// whose identity this build's registry would change.
	Identity []Change `json:"identity"`
	// Skipped says which calls of recorded planning turns could not be
	// checked again, and why.
	Skipped []string `json:"skipped,omitempty"`
	// Error says why the run was not checked (its history could not be
	// read).
	Error string `json:"error,omitempty"`
}

// What a check found of a run (Result.Outcome).
const (
	OutcomeOK           = "ok"
	OutcomeReplayFailed = "replay failed"
	OutcomeIdentity     = "identity would change"
	OutcomeNotChecked   = "not checked"
)

// Outcome says what the check found: OutcomeOK, OutcomeReplayFailed,
// OutcomeIdentity or OutcomeNotChecked.
func (r Result) Outcome() string {
	switch {
	case r.OK:
		return OutcomeOK
	case r.ReplayError != "":
		return OutcomeReplayFailed
	case len(r.Identity) > 0:
		return OutcomeIdentity
	}
	return OutcomeNotChecked
}

// Name names the run for people: "run r1 of tenant acme", with the file
// it was read from, or its workflow ID when it is not an agent run's.
func (r Result) Name() string {
	name := "workflow " + cmp.Or(r.WorkflowID, "(unknown)")
	if r.RunID != "" {
		name = fmt.Sprintf("run %s of tenant %s", r.RunID, r.Tenant)
	}
	if r.File != "" {
		return fmt.Sprintf("history %s (%s)", r.File, name)
	}
	return name
}

// maxErrorBytes bounds a replay's error on a line of the text report: the
// SDK's message renders both the event and the command in full. --json
// carries all of it.
const maxErrorBytes = 400

// Line is the run's line of the text report: its name, the outcome, and
// the reasons.
func (r Result) Line() string {
	var b strings.Builder
	b.WriteString(r.Name() + ": " + r.Outcome())
	switch r.Outcome() {
	case OutcomeReplayFailed:
		if r.FirstEvent != nil {
			b.WriteString(" at " + r.FirstEvent.String())
		}
		msg := oneLine(r.ReplayError)
		if cut := untrusted.Cut(msg, maxErrorBytes); len(cut) < len(msg) {
			msg = cut + "…"
		}
		b.WriteString(": " + msg)
	case OutcomeIdentity:
		reasons := make([]string, len(r.Identity))
		for i, c := range r.Identity {
			reasons[i] = oneLine(c.String())
		}
		b.WriteString(": " + strings.Join(reasons, "; "))
	case OutcomeNotChecked:
		b.WriteString(": " + oneLine(r.Error))
	}
	if len(r.Skipped) > 0 {
		b.WriteString(" (not checked again: " + oneLine(strings.Join(r.Skipped, "; ")) + ")")
	}
	return b.String()
}

// oneLine is s with each run of white space, line breaks included, one
// space: a panic's message carries its stack.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// Report is the check of every run.
type Report struct {
	Runs []Result `json:"runs"`
	// Checked counts the runs, Failed those whose replay failed or whose
	// identity would change, NotChecked those whose history could not be
	// read.
	Checked    int `json:"checked"`
	Failed     int `json:"failed"`
	NotChecked int `json:"not_checked"`
	// More says the query matched more runs than were listed (the limit).
	More bool `json:"more,omitempty"`
}

// newReport counts results.
func newReport(results []Result) Report {
	rep := Report{Runs: results, Checked: len(results)}
	for _, r := range results {
		switch r.Outcome() {
		case OutcomeReplayFailed, OutcomeIdentity:
			rep.Failed++
		case OutcomeNotChecked:
			rep.NotChecked++
		}
	}
	return rep
}

// count counts the runs of outcome o.
func (r Report) count(o string) int {
	n := 0
	for _, run := range r.Runs {
		if run.Outcome() == o {
			n++
		}
	}
	return n
}

// Summary says "checked 3 runs: 1 ok, 1 replay failed, 1 identity would
// change", and how many were not checked, if any.
func (r Report) Summary() string {
	runs := "runs"
	if r.Checked == 1 {
		runs = "run"
	}
	s := fmt.Sprintf("checked %d %s: %d ok, %d replay failed, %d identity would change",
		r.Checked, runs, r.count(OutcomeOK), r.count(OutcomeReplayFailed), r.count(OutcomeIdentity))
	if r.NotChecked > 0 {
		s += fmt.Sprintf(", %d not checked", r.NotChecked)
	}
	return s
}

// WriteText prints one line per run, then the summary.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, run := range r.Runs {
		b.WriteString(run.Line() + "\n")
	}
	b.WriteString(r.Summary() + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}
