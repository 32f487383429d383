package inbox

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/workflows"
)

// resultLineBytes bounds the one-line summary of a step's result.
const resultLineBytes = 160

// argRowsOf lists a call's arguments as argRows does, with the tool's
// amounts written as money ("259.00 EUR"); Raw keeps the value as the
// call has it.
func (s *Inbox) argRowsOf(toolName string, raw json.RawMessage) []argRow {
	rows := argRows(raw)
	t, ok := s.api.Tool(toolName)
	if !ok || len(t.Amounts) == 0 {
		return rows
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return rows
	}
	amounts := moneyValues(t, obj)
	for i, r := range rows {
		if m, ok := amounts[r.Name]; ok {
			rows[i].Raw, rows[i].Value, rows[i].Money = r.Value, m, true
		}
	}
	return rows
}

// resultLine sums a result up in one line of at most resultLineBytes: an
// object's scalar fields as "name: value" (the tool's amounts as money,
// nested values left out), anything else as compact JSON.
func (s *Inbox) resultLine(toolName string, raw json.RawMessage) string {
	if len(bytes.TrimSpace(raw)) == 0 {
		return ""
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil || obj == nil {
		return ellipsis(untrusted.Compact(raw), resultLineBytes)
	}
	var amounts map[string]string
	if t, ok := s.api.Tool(toolName); ok {
		amounts = moneyValues(t, obj)
	}
	names := make([]string, 0, len(obj))
	for k := range obj {
		names = append(names, k)
	}
	slices.Sort(names)
	parts := make([]string, 0, len(names))
	for _, k := range names {
		v := bytes.TrimSpace(obj[k])
		switch {
		case amounts[k] != "":
			parts = append(parts, k+": "+amounts[k])
		case len(v) > 0 && (v[0] == '{' || v[0] == '['):
			// Nested: in the full result only.
		default:
			var str string
			if json.Unmarshal(v, &str) == nil {
				parts = append(parts, k+": "+str)
			} else {
				parts = append(parts, k+": "+string(v))
			}
		}
	}
	if len(parts) == 0 {
		return ellipsis(untrusted.Compact(raw), resultLineBytes)
	}
	return ellipsis(strings.Join(parts, " · "), resultLineBytes)
}

// ellipsis cuts s to at most maxBytes bytes on a character boundary, and
// says so with a trailing "…".
func ellipsis(s string, maxBytes int) string {
	if len(s) <= maxBytes {
		return s
	}
	return untrusted.Cut(s, maxBytes) + "…"
}

// expiryText says what the deadline does to an undecided step.
func expiryText(onExpiry string) string {
	if onExpiry == workflows.ExpiryReject {
		return "then it is rejected"
	}
	return "then it expires and does not run"
}

// urgentSeconds: a deadline closer than this is shown as urgent.
const urgentSeconds = 3600

// argChange is one argument an edit changed: its value as proposed and as
// it ran ("" for an argument one side does not have).
type argChange struct {
	Name     string
	Proposed string
	Ran      string
}

// argChanges lists the arguments whose values differ between two
// argument lists, by name.
func argChanges(proposed, ran []argRow) []argChange {
	was := make(map[string]string, len(proposed))
	for _, r := range proposed {
		was[r.Name] = r.Value
	}
	now := make(map[string]string, len(ran))
	for _, r := range ran {
		now[r.Name] = r.Value
	}
	var out []argChange
	for _, r := range proposed {
		if v, ok := now[r.Name]; !ok || v != r.Value {
			out = append(out, argChange{Name: r.Name, Proposed: r.Value, Ran: v})
		}
	}
	for _, r := range ran {
		if _, ok := was[r.Name]; !ok {
			out = append(out, argChange{Name: r.Name, Ran: r.Value})
		}
	}
	slices.SortFunc(out, func(a, b argChange) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// stepView is a step of a run as the run page and the inbox show it.
type stepView struct {
	workflows.Step
	// Args are the arguments that ran (or will run).
	Args []argRow
	// When is the step's latest moment: finished, started or planned.
	When     time.Time
	WhenWhat string
	// ResultLine is the result in one line; ResultJSON the whole of it.
	ResultLine string
	ResultJSON string
	// Lineage is set when an approver edited the step's arguments.
	Lineage *lineage
}

// lineage is what an edit changed: what was proposed, what ran, by whom.
type lineage struct {
	Proposed     []argRow
	ProposedHash string
	RanHash      string
	Changes      []argChange
	By           string
	At           time.Time
	Comment      string
}

// stepViews turns a run's steps into what the pages show.
func (s *Inbox) stepViews(steps []workflows.Step) []stepView {
	out := make([]stepView, len(steps))
	for i, st := range steps {
		v := stepView{Step: st, Args: s.argRowsOf(st.Tool, st.Args)}
		switch {
		case !st.FinishedAt.IsZero():
			v.When, v.WhenWhat = st.FinishedAt, "finished"
		case !st.StartedAt.IsZero():
			v.When, v.WhenWhat = st.StartedAt, "started"
		default:
			v.When, v.WhenWhat = st.PlannedAt, "planned"
		}
		if len(bytes.TrimSpace(st.Result)) > 0 {
			v.ResultLine = s.resultLine(st.Tool, st.Result)
			v.ResultJSON = indentJSON(st.Result)
		}
		if e := st.Edit; e != nil {
			proposed := s.argRowsOf(st.Tool, e.OriginalArgs)
			ran := v.Args
			if len(bytes.TrimSpace(e.Args)) > 0 {
				ran = s.argRowsOf(st.Tool, e.Args)
			}
			v.Lineage = &lineage{Proposed: proposed, ProposedHash: e.OriginalArgsHash, RanHash: e.ArgsHash,
				Changes: argChanges(proposed, ran), By: e.EditedBy, At: e.EditedAt, Comment: e.Comment}
		}
		out[i] = v
	}
	return out
}

// indentJSON writes raw indented, or as it is when it is not JSON.
func indentJSON(raw json.RawMessage) string {
	var buf bytes.Buffer
	if json.Indent(&buf, raw, "", "  ") != nil {
		return string(raw)
	}
	return buf.String()
}
