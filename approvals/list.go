package approvals

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/workflows"
)

// View selects the approvals a list shows.
type View string

// Views of the approvals list.
const (
	// ViewPending lists the steps that wait for a decision: no decision has
	// been recorded and the deadline has not passed.
	ViewPending View = "pending"
	// ViewDecided lists the steps that were decided or expired, those
	// withdrawn because their run was cancelled, and those whose decision
	// the run is applying.
	ViewDecided View = "decided"
	// ViewNeedsResolution lists the steps a person should look at: a
	// recorded decision the run did not apply (it recorded another outcome,
	// or has not applied it within the grace period), or a passed deadline
	// the run has not recorded.
	ViewNeedsResolution View = "needs_resolution"
)

// Bounds of a list.
const (
	DefaultListLimit = 100
	MaxListLimit     = 500
)

// Hop is one step of a child run's lineage: a run, and its step that
// delegated to the child.
type Hop = approvalstore.Hop

// Item is a step that asked for approval, or whose outcome waits to be
// resolved, as the approvals list shows it.
type Item struct {
	// Kind is KindApproval, KindQuestion for a step whose tool's server
	// asked a person questions (listed as pending), or KindOutcomeUnknown
	// for a step whose outcome waits to be resolved (listed under
	// needs_resolution).
	Kind     string          `json:"kind"`
	RunID    string          `json:"run_id"`
	Step     int64           `json:"step"`
	Tool     string          `json:"tool"`
	Args     json.RawMessage `json:"args"`
	ArgsHash string          `json:"args_hash"`
	// Amounts is the amounts the tool declares, read from Args and
	// written as money, in the tool's order.
	Amounts []Money `json:"amounts,omitempty"`
	Goal    string  `json:"goal"`
	// Lineage, for a step of a child run (a sub-agent's), lists the runs
	// and steps from the first run of the tree down to the step that
	// started the child; ParentGoal is the parent run's goal. Both absent
	// for a run a person started.
	Lineage    []Hop  `json:"lineage,omitempty"`
	ParentGoal string `json:"parent_goal,omitempty"`
	// Reason is why the step needs approval: the tool's rule, or, for an
	// ApprovalKind of "limit", the spend limit the step would cross.
	Reason string `json:"reason"`
	// ApprovalKind is "rule" when the tool's approval rule asked, "limit"
	// when the step would take a spend limit past its amount: approving
	// it is then an exception. Round numbers the step's waits (2 when a
	// step approved under its rule met a limit when it ran).
	ApprovalKind string `json:"approval_kind,omitempty"`
	Round        int    `json:"round,omitempty"`
	// RequestedBy names who started the run that asks.
	RequestedBy string    `json:"requested_by"`
	RequestedAt time.Time `json:"requested_at"`
	Deadline    time.Time `json:"deadline"`
	// SecondsLeft is, for a pending step, the time left before the
	// deadline when the list was read, in whole seconds; 0 once it has
	// passed, and for a decided step.
	SecondsLeft int64 `json:"seconds_left"`
	// OnExpiry is what the deadline does to the step undecided: expire or
	// reject, as the run's starter chose.
	OnExpiry string `json:"on_expiry,omitempty"`
	// Edit is the step's lineage when an approver's edit ran in place of
	// the proposed arguments (Args and ArgsHash stay the proposed ones).
	Edit *ItemEdit `json:"edit,omitempty"`
	// State is the step as its run recorded it: pending, approved,
	// rejected, expired, or cancelled when a cancel of its run withdrew
	// the request (DecidedBy, DecidedAt and Comment then say who cancelled
	// the run, when and why).
	State     string     `json:"state"`
	DecidedBy string     `json:"decided_by,omitempty"`
	DecidedAt *time.Time `json:"decided_at,omitempty"`
	Comment   string     `json:"comment,omitempty"`
	// Withdrawn says, for a cancelled step, in words, that its approval
	// was withdrawn, by whom, when and why.
	Withdrawn string `json:"withdrawn,omitempty"`
	// Decision is the decision of record, if any.
	Decision *DecisionRecord `json:"decision,omitempty"`
	// Problem says why a step needs resolution.
	Problem string `json:"problem,omitempty"`
	// Resolution says what was sent, when, and what is known, for an item
	// of KindOutcomeUnknown.
	Resolution *ResolutionInfo `json:"resolution,omitempty"`
	// Question is what a step's server asked, for an item of KindQuestion
	// (listed as pending).
	Question *QuestionInfo `json:"question,omitempty"`
}

// ItemEdit is what an edit put in place of a step's proposed arguments.
type ItemEdit struct {
	Args     json.RawMessage `json:"args"`
	ArgsHash string          `json:"args_hash"`
}

// DecisionRecord is a decision of record.
type DecisionRecord struct {
	RunID    string             `json:"run_id"`
	Step     int64              `json:"step"`
	Decision workflows.Decision `json:"decision"`
	Approver string             `json:"approver"`
	Role     Role               `json:"role,omitempty"`
	Comment  string             `json:"comment,omitempty"`
	ArgsHash string             `json:"args_hash"`
	// EditedArgs and EditedArgsHash are, for an edit, the arguments asked
	// to run in place of those reviewed (ArgsHash), and their hash.
	EditedArgs     json.RawMessage `json:"edited_args,omitempty"`
	EditedArgsHash string          `json:"edited_args_hash,omitempty"`
	DecidedAt      time.Time       `json:"decided_at"`
	// Via is where the decision was made: api or inbox through this
	// service, cli with the CLI without ONCERUN_API.
	Via string `json:"via"`
	// Exception is set on an approval that let the step past a spend
	// limit.
	Exception bool `json:"exception,omitempty"`
}

// decisionOf is the decision of record rec as the API shows it.
func decisionOf(rec approvalstore.DecisionRecord) DecisionRecord {
	return DecisionRecord{RunID: rec.RunID, Step: rec.Step, Decision: workflows.Decision(rec.Decision), Approver: rec.Approver,
		Role: Role(rec.Role), Comment: rec.Comment, ArgsHash: rec.ArgsHash, EditedArgs: rec.EditedArgs,
		EditedArgsHash: rec.EditedArgsHash, DecidedAt: rec.DecidedAt, Via: rec.Via, Exception: rec.Exception}
}

// list returns the tenant's approvals in one view: pending and needing
// resolution oldest first, decided newest first.
func (s *Server) list(ctx context.Context, tenant string, q ListQuery) ([]Item, error) {
	view, limit := q.View, q.Limit
	listView := map[View]func(context.Context, approvalstore.DB, approvalstore.Page) ([]approvalstore.Listed, error){
		ViewPending: approvalstore.ListPending, ViewDecided: approvalstore.ListDecided, ViewNeedsResolution: approvalstore.ListNeedsResolution,
	}[view]
	if listView == nil {
		return nil, errorf(http.StatusBadRequest, "invalid_request", "state %q is not pending, decided or needs_resolution", view)
	}
	ctx, cancel := s.dbContext(ctx)
	defer cancel()
	now := s.cfg.Now()
	rows, err := listView(ctx, s.cfg.Pool, approvalstore.Page{Tenant: tenant, Now: now, Cutoff: now.Add(-s.cfg.ResolveGrace), Limit: limit,
		Offset: q.Offset})
	if err != nil {
		return nil, err
	}
	items := make([]Item, 0, len(rows))
	for _, row := range rows {
		it := itemOf(row, now)
		if view == ViewNeedsResolution {
			it.Problem = problem(it)
		}
		items = append(items, it)
	}
	if view == ViewPending {
		// Steps whose server asked a person: their own query, on their
		// own index.
		asked, err := s.pendingQuestions(ctx, tenant, now, limit)
		if err != nil {
			return nil, err
		}
		items = mergeByDeadline(items, asked, limit)
	}
	if view == ViewNeedsResolution {
		// Steps whose outcome is unknown: their own query, on their own
		// index.
		unknown, err := s.pendingResolutions(ctx, tenant, now, limit)
		if err != nil {
			return nil, err
		}
		items = mergeItems(items, unknown, limit)
	}
	for i, it := range items {
		if t, ok := s.Tool(it.Tool); ok {
			items[i].Amounts = DeclaredAmounts(t, it.Args)
		}
	}
	return items, nil
}

// itemOf is an approvals row as the lists show it, at now.
func itemOf(row approvalstore.Listed, now time.Time) Item {
	a := row.Approval
	it := Item{Kind: KindApproval, RunID: a.RunID, Step: a.Step, Tool: a.Tool, Args: a.Args, ArgsHash: a.ArgsHash,
		Goal: a.Goal, Reason: a.Reason, RequestedBy: a.RequestedBy, RequestedAt: a.RequestedAt, Deadline: a.Deadline,
		State: a.State, DecidedBy: a.DecidedBy, DecidedAt: a.DecidedAt, Comment: a.Comment,
		OnExpiry: a.OnExpiry, ApprovalKind: a.Kind, Round: a.Round, ParentGoal: a.ParentGoal}
	if len(a.Lineage) > 0 {
		it.Lineage = a.Lineage
	}
	if a.State == approvalstore.StatePending {
		it.SecondsLeft = secondsLeft(now, a.Deadline)
	}
	if a.EditedArgsHash != "" {
		it.Edit = &ItemEdit{Args: a.EditedArgs, ArgsHash: a.EditedArgsHash}
	}
	if row.Record != nil {
		d := decisionOf(*row.Record)
		it.Decision = &d
	}
	if a.State == approvalstore.StateCancelled {
		it.Withdrawn = withdrawnText(it)
	}
	return it
}

// withdrawnText says why a step's approval was withdrawn: who cancelled
// its run, when and why, and what had been decided, if anything.
func withdrawnText(it Item) string {
	var b strings.Builder
	b.WriteString("withdrawn: the run was cancelled")
	if it.DecidedBy != "" {
		b.WriteString(" by " + it.DecidedBy)
	}
	if it.DecidedAt != nil {
		b.WriteString(" at " + it.DecidedAt.UTC().Format(time.RFC3339))
	}
	if it.Comment != "" {
		b.WriteString(" (" + it.Comment + ")")
	}
	if d := it.Decision; d != nil {
		fmt.Fprintf(&b, "; %s had %s it at %s, but the step never ran", d.Approver, d.Decision.PastTense(), d.DecidedAt.UTC().Format(time.RFC3339))
	} else {
		b.WriteString(" before anyone decided; the step never ran")
	}
	return b.String()
}

// withdrawn lists the tenant's approvals withdrawn since the time given
// because their run was cancelled, newest first.
func (s *Server) withdrawn(ctx context.Context, tenant string, since time.Time, limit int) ([]Item, error) {
	rows, err := approvalstore.ListWithdrawn(ctx, s.cfg.Pool, tenant, since, limit)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now()
	items := make([]Item, 0, len(rows))
	for _, row := range rows {
		items = append(items, itemOf(row, now))
	}
	return items, nil
}

// TimeLeft says how long is left before a deadline, in words a glance
// takes in: "2 d 4 h", "3 h 20 min", "45 min", "less than a minute";
// "" once it has passed. The inbox and `oncerun approvals` show it.
func TimeLeft(seconds int64) string {
	if seconds <= 0 {
		return ""
	}
	d, h, m := seconds/86400, seconds%86400/3600, seconds%3600/60
	switch {
	case d > 0 && h > 0:
		return fmt.Sprintf("%d d %d h", d, h)
	case d > 0:
		return fmt.Sprintf("%d d", d)
	case h > 0 && m > 0:
		return fmt.Sprintf("%d h %d min", h, m)
	case h > 0:
		return fmt.Sprintf("%d h", h)
	case m > 0:
		return fmt.Sprintf("%d min", m)
	}
	return "less than a minute"
}

// secondsLeft is the time from now to deadline in whole seconds, 0 once
// it has passed.
func secondsLeft(now, deadline time.Time) int64 {
	return max(0, int64(deadline.Sub(now)/time.Second))
}

// problem says why an item needs resolution.
func problem(it Item) string {
	d := it.Decision
	switch {
	case d != nil && it.State != approvalstore.StatePending:
		return fmt.Sprintf("%s %s this step at %s, but the run recorded it as %s", d.Approver, d.Decision.PastTense(),
			d.DecidedAt.UTC().Format(time.RFC3339), it.State)
	case d != nil:
		return fmt.Sprintf("%s %s this step at %s, but the run has not applied the decision: is a worker running, is the run still open?",
			d.Approver, d.Decision.PastTense(), d.DecidedAt.UTC().Format(time.RFC3339))
	default:
		return fmt.Sprintf("the deadline %s passed, but the run has not recorded the expiry: is a worker running, is the run still open?",
			it.Deadline.UTC().Format(time.RFC3339))
	}
}

// pendingResolutions lists the tenant's steps whose outcome waits to be
// resolved, oldest first, with their answers of record.
func (s *Server) pendingResolutions(ctx context.Context, tenant string, now time.Time, limit int) ([]Item, error) {
	rows, err := approvalstore.ListUnresolved(ctx, s.cfg.Pool, tenant, limit)
	if err != nil {
		return nil, err
	}
	items := make([]Item, 0, len(rows))
	for _, row := range rows {
		r := row.Resolution
		info := ResolutionInfo{Round: r.Round, Key: r.Key, FirstSentAt: r.FirstSentAt, Known: r.Known,
			RequestedAt: r.RequestedAt, Deadline: r.Deadline}
		if row.Record != nil {
			d := resolutionRecordOf(*row.Record)
			info.Decision = &d
		}
		it := Item{Kind: KindOutcomeUnknown, RunID: r.RunID, Step: r.Step, Tool: r.Tool, Args: r.Args, ArgsHash: r.ArgsHash,
			Goal: r.Goal, RequestedAt: r.RequestedAt, Deadline: r.Deadline, State: r.State, Resolution: &info,
			SecondsLeft: secondsLeft(now, r.Deadline)}
		it.Problem = resolutionProblem(it, now)
		items = append(items, it)
	}
	return items, nil
}

// resolutionProblem says in words what was sent, when, what is known, and
// what the step waits for.
func resolutionProblem(it Item, now time.Time) string {
	info := it.Resolution
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s was sent under key %s, first at %s, and nobody could tell whether it was applied",
		it.Tool, untrusted.Cut(untrusted.Compact(it.Args), 200), info.Key, info.FirstSentAt.UTC().Format(time.RFC3339))
	if info.Known != "" {
		fmt.Fprintf(&b, "; what we know: %s", info.Known)
	}
	if d := info.Decision; d != nil {
		fmt.Fprintf(&b, ". %s answered %s at %s, but the run has not applied the answer: is a worker running, is the run still open?",
			d.Resolver, d.Outcome, d.DecidedAt.UTC().Format(time.RFC3339))
		return b.String()
	}
	if round := info.Round; round > 1 {
		fmt.Fprintf(&b, " (round %d: it was resolved as not applied before)", round)
	}
	if now.Before(info.Deadline) {
		fmt.Fprintf(&b, ". Say whether the provider applied it; an alert is raised at %s if nobody answers.", info.Deadline.UTC().Format(time.RFC3339))
	} else {
		fmt.Fprintf(&b, ". Say whether the provider applied it; nobody has answered since the deadline %s passed.", info.Deadline.UTC().Format(time.RFC3339))
	}
	return b.String()
}

// mergeItems merges two lists sorted oldest first into one of at most limit
// items.
func mergeItems(a, b []Item, limit int) []Item {
	out := append(a, b...)
	slices.SortStableFunc(out, func(x, y Item) int {
		return cmp.Or(x.RequestedAt.Compare(y.RequestedAt), strings.Compare(x.RunID, y.RunID), cmp.Compare(x.Step, y.Step))
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}
