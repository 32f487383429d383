package workflows

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/money"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/spend"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/tools"
)

// Names under which clients reach a run.
const (
	// SignalApproval is the signal that carries an [Approval].
	SignalApproval = "approval"
	// QueryStatus is the query that returns a run's [Status].
	QueryStatus = "status"
	// DefaultTaskQueue is the task queue workers poll and runs start on.
	DefaultTaskQueue = "oncerun"
)

// Defaults and bounds of [Limits].
const (
	DefaultMaxSteps         = 50
	DefaultApprovalDeadline = 7 * 24 * time.Hour
	// MaxApprovalDeadline is the longest approval deadline a run accepts;
	// tool retention windows are validated against it.
	MaxApprovalDeadline = tools.DefaultMaxApprovalPause
	// DefaultHistoryLimit is the number of history events after which a run
	// continues as new, well below Temporal's own limits.
	DefaultHistoryLimit = 2000
	// DefaultParallel is how many steps of one planning turn run at once,
	// and MaxParallel the most a run may set.
	DefaultParallel = 4
	MaxParallel     = 64
	// MaxBudgetCurrencies is how many currencies limits.spend may name.
	MaxBudgetCurrencies = 16
)

// Bounds of a run's input, checked by [RunInput.Validate] where runs start.
const (
	// MaxStepsLimit is the largest Limits.MaxSteps, and MaxPlanCalls the
	// most calls a plan may list.
	MaxStepsLimit = 10_000
	MaxPlanCalls  = 10_000
	// MinHistoryLimit and MaxHistoryLimit bound Limits.HistoryLimit when it
	// is set.
	MinHistoryLimit = 16
	MaxHistoryLimit = 10_000
	// MaxGoalBytes bounds the goal.
	MaxGoalBytes = 16 << 10
	// MaxStartedByBytes bounds who started the run.
	MaxStartedByBytes = 128
	// MaxApproverBytes bounds an approver's name and MaxCommentBytes a
	// decision's comment.
	MaxApproverBytes = 128
	MaxCommentBytes  = 2000
	// MaxRunInputBytes bounds the whole input as JSON, plan and goal
	// included: it travels in the run's history, whose payloads Temporal
	// limits to 2 MiB.
	MaxRunInputBytes = 1 << 20
)

// ErrInvalidInput reports a run input that cannot start a run.
var ErrInvalidInput = errors.New("invalid run input")

// WorkflowID is the workflow ID of a tenant's run: the same tenant and run
// id always name the same workflow, so starting a run twice finds the first.
func WorkflowID(tenant, runID string) string { return keys.WorkflowID(tenant, runID) }

// Limits bound a run.
type Limits struct {
	// MaxSteps is the most tool calls the run makes. Default
	// DefaultMaxSteps. The run also ends after 2×MaxSteps proposed calls,
	// valid or not.
	MaxSteps int `json:"max_steps,omitempty"`
	// ApprovalDeadline is how long a step waits for a decision before it
	// expires. Default DefaultApprovalDeadline, at most MaxApprovalDeadline.
	ApprovalDeadline time.Duration `json:"approval_deadline,omitempty"`
	// HistoryLimit is the history length, in events, past which the run
	// continues as new. Default DefaultHistoryLimit.
	HistoryLimit int `json:"history_limit,omitempty"`
	// Parallel is how many steps of one planning turn run at once, when
	// the planner proposes several calls in a turn. Default
	// DefaultParallel, at most MaxParallel.
	Parallel int `json:"parallel,omitempty"`
	// Spend is the run's budget per currency, in minor units by ISO 4217
	// code ({"EUR": 50000}): the amounts its steps' tools declare count
	// against it where their effects commit, and a step that would take
	// the run past it waits for approval. An amount in a currency it does
	// not name waits for approval too, unless OtherCurrencies allows it.
	// See docs/limits.md.
	Spend map[string]int64 `json:"spend,omitempty"`
	// OtherCurrencies is what a budget does with an amount in a currency
	// it does not name: "park" (the default) waits for an approver,
	// "allow" lets it run. Without a budget it means nothing.
	OtherCurrencies string `json:"other_currencies,omitempty"`
}

// WithDefaults returns l with zero fields set to their defaults.
func (l Limits) WithDefaults() Limits {
	l.MaxSteps = cmp.Or(l.MaxSteps, DefaultMaxSteps)
	l.ApprovalDeadline = cmp.Or(l.ApprovalDeadline, DefaultApprovalDeadline)
	l.HistoryLimit = cmp.Or(l.HistoryLimit, DefaultHistoryLimit)
	l.Parallel = cmp.Or(l.Parallel, DefaultParallel)
	return l
}

// RunInput starts a run.
type RunInput struct {
	Tenant string `json:"tenant"`
	RunID  string `json:"run_id"`
	// Goal is what the agent should achieve, in words.
	Goal string `json:"goal,omitempty"`
	// Planner names the planner: "script" or "openai". Default: "script"
	// when Plan is set, "openai" otherwise.
	Planner string `json:"planner,omitempty"`
	// Plan lists the calls of a scripted run.
	Plan   []tools.ProposedCall `json:"plan,omitempty"`
	Limits Limits               `json:"limits,omitzero"`
	// StartedBy names who started the run (a token's name, a user); it is
	// shown beside the run's approval requests and is not part of the
	// run's identity.
	StartedBy string `json:"started_by,omitempty"`
	// OnApprovalExpiry is what a step's approval deadline does to it when
	// nobody decided: ExpiryExpire (default) or ExpiryReject. It is the
	// starter's choice; no planner can change it, nor the deadline.
	OnApprovalExpiry string `json:"on_approval_expiry,omitempty"`
	// Carry is the state handed over by Continue-As-New; callers leave it
	// nil.
	Carry *Carry `json:"carry,omitempty"`
	// Model, for a child run of a sub-agent that names one, is the model
	// its openai planner asks instead of the worker's.
	Model string `json:"model,omitempty"`
	// Grant, for a child run (Parent set), lists the tools it may use, and
	// none when it is empty (see docs/agent-runs.md). A run a person
	// started may use every tool of the deployment.
	Grant []string `json:"grant,omitempty"`
	// Parent is set by the run that started this one as its child run;
	// callers leave it nil.
	Parent *Parent `json:"parent,omitempty"`
}

// Parent is where a child run comes from: the run and step that delegated
// to it.
type Parent struct {
	RunID string `json:"run_id"`
	Step  int64  `json:"step"`
	// Goal is the parent run's goal, shown beside the child's.
	Goal string `json:"goal,omitempty"`
	// Agent names the sub-agent the child runs as.
	Agent string `json:"agent"`
	// Depth is the child's: 1 for a child of a run a person started.
	Depth int `json:"depth"`
	// BudgetRun is the run whose budget (limits.spend) the child's amounts
	// count against: the first run of the tree.
	BudgetRun string `json:"budget_run"`
	// Lineage lists the runs and steps from the first run of the tree down
	// to the step that started this run.
	Lineage []Hop `json:"lineage"`
	// Applied are the effects the run tree had applied when the child
	// started (its ancestors' steps and their other children's): a tool
	// that makes each intent once per run makes it once per tree.
	Applied []Intent `json:"applied,omitempty"`
}

// Intent is an applied step of a run tree: its run, its number, its tool
// and the hash of the arguments it ran with, and its result.
type Intent struct {
	RunID    string          `json:"run_id"`
	Step     int64           `json:"step"`
	Tool     string          `json:"tool"`
	ArgsHash string          `json:"args_hash"`
	Result   json.RawMessage `json:"result,omitempty"`
}

// Hop is one step of a child run's lineage: the run, and its step that
// delegated.
type Hop = approvalstore.Hop

// ChildRunID is the run id of the child run that step of run starts:
// "<run>.<step>". Runs started otherwise may not have such an id
// (Validate), so that no child run's id, keys or approvals are ever a
// run's that a person started.
func ChildRunID(run string, step int64) string { return fmt.Sprintf("%s.%d", run, step) }

// childRunID reports whether id has the form of a child run's id.
func childRunID(id string) bool {
	dot := strings.LastIndexByte(id, '.')
	if dot <= 0 || dot == len(id)-1 {
		return false
	}
	return strings.Trim(id[dot+1:], "0123456789") == ""
}

// WithDefaults returns in with its planner and limits defaulted.
func (in RunInput) WithDefaults() RunInput {
	if in.Planner == "" {
		in.Planner = planner.NameOpenAI
		if len(in.Plan) > 0 {
			in.Planner = planner.NameScript
		}
	}
	in.Limits = in.Limits.WithDefaults()
	return in
}

// Validate reports, naming the field, what keeps in from starting a run.
// It is the check where input enters oncerun (the approvals API, the CLI,
// runs.Client.Start): on top of what a run needs to work, the run id and
// the tenant are names people read and type (no control or invisible
// characters, no lookalikes, not "." or ".."), the goal is text with no
// control characters, each plan call's arguments are JSON whose strings are
// such text, and the limits and the input's size are bounded.
func (in RunInput) Validate() error {
	if err := in.runnable(); err != nil {
		return err
	}
	in = in.WithDefaults()
	invalid := func(err error) error { return fmt.Errorf("%w: %w", ErrInvalidInput, err) }
	if err := untrusted.Name("tenant", in.Tenant, keys.MaxTenantLen); err != nil {
		return invalid(err)
	}
	if err := untrusted.Name("run_id", in.RunID, keys.MaxRunIDLen); err != nil {
		return invalid(err)
	}
	if childRunID(in.RunID) {
		return invalid(fmt.Errorf("run_id %q ends in .<number>, which names child runs (<run>.<step>): choose another", in.RunID))
	}
	if err := untrusted.Text("goal", in.Goal, MaxGoalBytes); err != nil {
		return invalid(err)
	}
	if err := untrusted.Text("started_by", in.StartedBy, MaxStartedByBytes); err != nil {
		return invalid(err)
	}
	switch l := in.Limits; {
	case l.MaxSteps > MaxStepsLimit:
		return fmt.Errorf("%w: limits.max_steps %d is more than %d", ErrInvalidInput, l.MaxSteps, MaxStepsLimit)
	case l.HistoryLimit < MinHistoryLimit || l.HistoryLimit > MaxHistoryLimit:
		return fmt.Errorf("%w: limits.history_limit %d is not between %d and %d", ErrInvalidInput, l.HistoryLimit, MinHistoryLimit, MaxHistoryLimit)
	case l.Parallel < 0 || l.Parallel > MaxParallel:
		return fmt.Errorf("%w: limits.parallel %d is not between 1 and %d", ErrInvalidInput, l.Parallel, MaxParallel)
	case len(l.Spend) > MaxBudgetCurrencies:
		return fmt.Errorf("%w: limits.spend names %d currencies; at most %d", ErrInvalidInput, len(l.Spend), MaxBudgetCurrencies)
	case len(in.Plan) > MaxPlanCalls:
		return fmt.Errorf("%w: the plan has %d calls; at most %d", ErrInvalidInput, len(in.Plan), MaxPlanCalls)
	case in.Carry != nil:
		return fmt.Errorf("%w: carry is set only by Continue-As-New", ErrInvalidInput)
	case in.Parent != nil:
		return fmt.Errorf("%w: parent is set only by the run that delegates", ErrInvalidInput)
	case in.Grant != nil:
		return fmt.Errorf("%w: grant is set only by the run that delegates", ErrInvalidInput)
	}
	if _, err := spend.OtherRule(in.Limits.OtherCurrencies); err != nil {
		return fmt.Errorf("%w: limits.other_currencies: %w", ErrInvalidInput, err)
	}
	for _, code := range slices.Sorted(maps.Keys(in.Limits.Spend)) {
		if _, unit, ok := money.Scale(code); !ok || unit != code {
			return fmt.Errorf("%w: limits.spend: %q is not an ISO 4217 currency code in upper case, such as EUR", ErrInvalidInput, untrusted.Cut(code, 16))
		}
		if n := in.Limits.Spend[code]; n < 0 || n > spend.MaxAmount {
			return fmt.Errorf("%w: limits.spend.%s is %d: a budget is a whole number of minor units, from 0 to %d", ErrInvalidInput, code, n, int64(spend.MaxAmount))
		}
	}
	for i, c := range in.Plan {
		if c.Malformed != "" {
			return fmt.Errorf("%w: plan step %d: malformed is for planners, not plans", ErrInvalidInput, i+1)
		}
		if err := untrusted.JSON(fmt.Sprintf("plan step %d arguments", i+1), c.Args); len(c.Args) > 0 && err != nil {
			return invalid(err)
		}
	}
	raw, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("%w: encode: %w", ErrInvalidInput, err)
	}
	if len(raw) > MaxRunInputBytes {
		return fmt.Errorf("%w: the run input (goal and plan included) is %d bytes as JSON; the limit is %d",
			ErrInvalidInput, len(raw), MaxRunInputBytes)
	}
	return nil
}

// runnable reports what keeps in from running at all. AgentRun checks it
// on every start and replay, so it must never refuse what it accepted
// before: new rules for input belong in Validate.
func (in RunInput) runnable() error {
	in = in.WithDefaults()
	if _, err := keys.New(in.Tenant, in.RunID, 1, "x"); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	switch {
	case in.Planner != planner.NameScript && in.Planner != planner.NameOpenAI:
		return fmt.Errorf("%w: planner %q is not script or openai", ErrInvalidInput, in.Planner)
	case in.Planner == planner.NameScript && len(in.Plan) == 0:
		return fmt.Errorf("%w: the script planner needs a plan with at least one step", ErrInvalidInput)
	case in.Planner == planner.NameOpenAI && in.Goal == "":
		return fmt.Errorf("%w: the openai planner needs a goal", ErrInvalidInput)
	case in.Limits.MaxSteps < 0 || in.Limits.HistoryLimit < 0 || in.Limits.Parallel < 0:
		return fmt.Errorf("%w: limits must not be negative", ErrInvalidInput)
	case in.OnApprovalExpiry != "" && in.OnApprovalExpiry != ExpiryExpire && in.OnApprovalExpiry != ExpiryReject:
		return fmt.Errorf("%w: on_approval_expiry %q is not %s or %s", ErrInvalidInput, untrusted.Cut(in.OnApprovalExpiry, 32), ExpiryExpire, ExpiryReject)
	case in.Limits.ApprovalDeadline < 0 || in.Limits.ApprovalDeadline > MaxApprovalDeadline:
		return fmt.Errorf("%w: approval deadline %s is not between 0 and %s", ErrInvalidInput, in.Limits.ApprovalDeadline, MaxApprovalDeadline)
	}
	for i, c := range in.Plan {
		if c.Tool == "" {
			return fmt.Errorf("%w: plan step %d has no tool", ErrInvalidInput, i+1)
		}
	}
	return nil
}

// Carry is what a run hands to its next generation on Continue-As-New.
type Carry struct {
	Steps    []Step                   `json:"steps"`
	History  []activities.Observation `json:"history"`
	Proposed int                      `json:"proposed"`
	// Generation counts the Continue-As-News so far.
	Generation int       `json:"generation"`
	StartedAt  time.Time `json:"started_at"`
	// Bundled says the run began under bundledChanges; a run that began
	// before keeps its ways in every generation.
	Bundled bool `json:"bundled,omitempty"`
	// Limits says the run began under spendLimits: its steps may park at
	// a money limit. A run that began before never does, in any
	// generation.
	Limits bool `json:"limits,omitempty"`
	// Turns counts the planning turns so far; Paused is the pause in
	// force, if any; Messages are the messages accepted so far.
	Turns    int               `json:"turns,omitempty"`
	Paused   *ControlRecord    `json:"paused,omitempty"`
	Messages []AcceptedMessage `json:"messages,omitempty"`
	// Identity says the run began under step identity: every generation
	// numbers its steps so.
	Identity bool `json:"identity,omitempty"`
	// Events says the run began under runEvents: every generation tells
	// its story in the event log.
	Events bool `json:"events,omitempty"`
	// Format is the carry's format (carryFormat); a worker whose release
	// knows only older formats fails the generation's workflow task rather
	// than drop a field it does not know. 0 in carries of releases before
	// formats.
	Format int `json:"format,omitempty"`
}

// RunState is the state of a run.
type RunState string

// Run states.
const (
	RunRunning            RunState = "running"
	RunWaitingForApproval RunState = "waiting_for_approval"
	RunCompleted          RunState = "completed"
	RunFailed             RunState = "failed"
)

// StepState is the state of a step.
type StepState string

// Step states.
const (
	StepPendingApproval StepState = "pending_approval"
	StepApproved        StepState = "approved"
	StepRejected        StepState = "rejected"
	StepExpired         StepState = "expired"
	StepRunning         StepState = "running"
	StepDone            StepState = "done"
	StepFailed          StepState = "failed"
	// StepDuplicate is a call that repeated an earlier applied step of the
	// run (same tool, same canonical arguments) of a tool that makes each
	// intent once per run: it was not executed, and carries the earlier
	// step's result (see Step.DuplicateOf).
	StepDuplicate StepState = "duplicate"
)

// Decision is an approver's answer.
type Decision string

// Decisions.
const (
	DecisionApprove Decision = "approve"
	DecisionReject  Decision = "reject"
	// DecisionEdit approves the step with the approver's arguments in place
	// of the proposed ones.
	DecisionEdit Decision = "edit"
)

// PastTense says what decision d did to a step: "approved", "rejected",
// "edited and approved".
func (d Decision) PastTense() string {
	switch d {
	case DecisionApprove:
		return "approved"
	case DecisionEdit:
		return "edited and approved"
	}
	return "rejected"
}

// What a run does with a step whose approval deadline passes undecided,
// as its starter chose (RunInput.OnApprovalExpiry).
const (
	// ExpiryExpire records the step as expired (the default).
	ExpiryExpire = "expire"
	// ExpiryReject records the step as rejected at the deadline.
	ExpiryReject = "reject"
)

// DeadlineApprover is the approver named on a step rejected by its
// deadline under ExpiryReject.
const DeadlineApprover = "oncerun (deadline)"

// Approval is the payload of the approval signal: a decision on one step,
// bound to the arguments hash the approver saw. An edit also carries the
// approver's arguments (canonical JSON) and their hash. The approver's name is text
// of at most MaxApproverBytes bytes and the comment of at most
// MaxCommentBytes (see [Approval.Validate]).
type Approval struct {
	Step     int64    `json:"step"`
	Decision Decision `json:"decision"`
	Approver string   `json:"approver"`
	Comment  string   `json:"comment,omitempty"`
	ArgsHash string   `json:"args_hash"`
	// Args and EditedArgsHash are the edited arguments of an edit.
	Args           json.RawMessage `json:"args,omitempty"`
	EditedArgsHash string          `json:"edited_args_hash,omitempty"`
	// Round is the wait of the step the decision was for (see
	// StepApproval.Round); empty for the first.
	Round int `json:"round,omitempty"`
}

// Validate reports what keeps a decision from being applied: a decision
// that is not approve, reject or edit (an edit with its arguments), no approver, or an approver's name or a
// comment that is too long or holds control characters, which the
// approvals table could not record.
func (ap Approval) Validate() error {
	switch ap.Decision {
	case DecisionApprove, DecisionReject:
	case DecisionEdit:
		if len(ap.Args) == 0 {
			return errors.New("an edit carries the edited arguments (args)")
		}
	default:
		return fmt.Errorf("decision %q is not approve, reject or edit", ap.Decision)
	}
	if ap.Approver == "" {
		return errors.New("no approver named")
	}
	if err := untrusted.Text("approver", ap.Approver, MaxApproverBytes); err != nil {
		return err
	}
	return untrusted.Text("comment", ap.Comment, MaxCommentBytes)
}

// StepApproval is what a step records about its approval.
type StepApproval struct {
	Reason      string    `json:"reason"`
	RequestedAt time.Time `json:"requested_at"`
	Deadline    time.Time `json:"deadline"`
	Decision    Decision  `json:"decision,omitempty"`
	Approver    string    `json:"approver,omitempty"`
	Comment     string    `json:"comment,omitempty"`
	DecidedAt   time.Time `json:"decided_at,omitzero"`
	// OnExpiry is what the deadline does to the step undecided: ExpiryExpire
	// or ExpiryReject, as the run's starter chose.
	OnExpiry string `json:"on_expiry,omitempty"`
	// Warned lists the deadline warnings given, as durations before the
	// deadline ("24h0m0s").
	Warned []string `json:"warned,omitempty"`
	// EditRefused says why the run refused the latest edit of the step,
	// which then stayed pending.
	EditRefused string `json:"edit_refused,omitempty"`
	// Kind is "limit" for a wait at a spend limit (see StepLimit); empty
	// for a wait by the tool's approval rule.
	Kind string `json:"kind,omitempty"`
	// Round numbers the waits of one step: 2 when a step approved by its
	// rule met a limit when it ran and waited again. Empty means 1.
	Round int `json:"round,omitempty"`
	// recorded is set once the approvals row of the request exists.
	recorded bool
}

// Approval kinds.
const (
	// ApprovalKindLimit: the step waits because it would take a spend
	// limit past its amount; approving it is an exception.
	ApprovalKindLimit = "limit"
)

// StepLimit is set on a step that met a spend limit when it ran: the
// limit, its reason in words, the approval its rule gave before (when it
// had one), and whether an approver let it past as an exception.
type StepLimit struct {
	Reason string     `json:"reason"`
	Level  SpendLevel `json:"level"`
	At     time.Time  `json:"at"`
	// Prior is the decision the step's approval rule had, before the
	// limit made it wait again.
	Prior *StepApproval `json:"prior,omitempty"`
	// Exception is set once an approver approved the step past the limit.
	Exception bool `json:"exception,omitempty"`
}

// SpendLevel is where one limit stood when a step met it.
type SpendLevel = spend.Level

// SpendTotal is what a run counted in one currency, beside its budget.
type SpendTotal = spend.RunTotal

// StepEdit is a step's lineage when an approver edited its arguments: what
// the planner proposed, what ran, who changed it, when and why.
type StepEdit struct {
	OriginalArgs     json.RawMessage `json:"original_args"`
	OriginalArgsHash string          `json:"original_args_hash"`
	Args             json.RawMessage `json:"args"`
	ArgsHash         string          `json:"args_hash"`
	EditedBy         string          `json:"edited_by"`
	EditedAt         time.Time       `json:"edited_at"`
	Comment          string          `json:"comment,omitempty"`
}

// Step is one numbered tool call of a run.
type Step struct {
	Step int64 `json:"step"`
	// Turn is the planning turn that proposed the step: the steps of one
	// turn share it, and CallID is the id the planner gave the call.
	Turn   int         `json:"turn,omitempty"`
	CallID string      `json:"call_id,omitempty"`
	Tool   string      `json:"tool"`
	Class  tools.Class `json:"class"`
	Key    string      `json:"key"`
	// Child, for a step that delegates to a sub-agent, is the child run's
	// id (ChildRunID).
	Child string `json:"child_run_id,omitempty"`
	// childStarted is set once the child run has started: it can take
	// signals from then on.
	childStarted bool
	Args         json.RawMessage `json:"args"`
	ArgsHash     string          `json:"args_hash"`
	State        StepState       `json:"state"`
	// Result is the tool's result once done; Summary is its first bytes.
	Result  json.RawMessage `json:"result,omitempty"`
	Summary string          `json:"summary,omitempty"`
	Error   string          `json:"error,omitempty"`
	// Replayed says the result came from the dedup store: an earlier
	// attempt had applied the effect.
	Replayed bool          `json:"replayed,omitempty"`
	Approval *StepApproval `json:"approval,omitempty"`
	// Edit is set when an approver edited the arguments: Args and ArgsHash
	// above are then the edited ones, which ran.
	Edit *StepEdit `json:"edit,omitempty"`
	// Limit is set once the step met a spend limit (see StepLimit).
	Limit *StepLimit `json:"limit,omitempty"`
	// DuplicateOf is the earlier step a StepDuplicate repeated, and
	// DuplicateRun, when that step is another run's of the tree (a
	// parent's, or a child's), that run.
	DuplicateOf  int64  `json:"duplicate_of,omitempty"`
	DuplicateRun string `json:"duplicate_of_run,omitempty"`
	// Applied, for a step that delegated, are the effects its child run
	// (and the child's own children) applied, done or not.
	Applied []Intent `json:"applied,omitempty"`
	// Resolution is set once the step's outcome was unknown and waited for
	// a person.
	Resolution *StepResolution `json:"resolution,omitempty"`
	// Questions are the rounds of questions the step's server asked a
	// person in the call's answer, and what became of each.
	Questions []StepQuestion `json:"questions,omitempty"`
	// reply is what the call sends back since its last round of questions
	// was answered; sendReply is set for the attempt right after an
	// answer, which runs in an activity of its own.
	reply     *activities.Reply
	sendReply bool
	// asking is set while the step's round of questions is being
	// recorded: an answer that comes meanwhile is kept (run.early).
	asking bool
	// Refused says the call was refused before it ran (by the worker's
	// registry, or a child run's grant): the step failed, and Error, which
	// begins with RefusedPrefix, says why. Only runs under step identity
	// number refused calls; earlier runs gave them no step.
	Refused bool `json:"refused,omitempty"`
	// made is set once the run knows the dedup store holds the step's key
	// completed: its effect exists, whatever the run's own view says.
	made bool
	// Guarantee is what the tool promises about its effect: "once", or
	// "at-least-once" for an external tool whose provider neither honours
	// our key nor can be asked (e-mail).
	Guarantee string `json:"guarantee,omitempty"`
	// FollowUps are the step's follow-on messages (see the outbox) and
	// where their delivery stands.
	FollowUps []FollowUp `json:"follow_ups,omitempty"`
	// delivering is set while the step's follow-on messages are sent.
	delivering bool
	PlannedAt  time.Time `json:"planned_at"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
}

// Status is a run's state, as the status query returns it and as the
// workflow's result.
type Status struct {
	Tenant string `json:"tenant"`
	RunID  string `json:"run_id"`
	Goal   string `json:"goal,omitempty"`
	// Parent, for a child run, is the run and step that started it.
	Parent  *Parent  `json:"parent,omitempty"`
	Planner string   `json:"planner"`
	State   RunState `json:"state"`
	Steps   []Step   `json:"steps"`
	// Message is the planner's final word, or why the run ended.
	Message    string    `json:"message,omitempty"`
	Error      string    `json:"error,omitempty"`
	Generation int       `json:"generation"`
	StartedAt  time.Time `json:"started_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	// Paused is the pause in force, if any.
	Paused *ControlRecord `json:"paused,omitempty"`
	// Budget is the run's budget (limits.spend); Spend is what its steps
	// counted against it, per currency, filled in from the database by
	// whoever reads the status (the approvals service, the CLI).
	Budget map[string]int64 `json:"budget,omitempty"`
	Spend  []SpendTotal     `json:"spend,omitempty"`
	// Cancel is set once an operator cancelled the run, and Receipt then
	// says how each step ended.
	Cancel  *ControlRecord `json:"cancel,omitempty"`
	Receipt *Receipt       `json:"receipt,omitempty"`
	// Messages are the messages the run accepted, in the order accepted.
	Messages []AcceptedMessage `json:"messages,omitempty"`
}
