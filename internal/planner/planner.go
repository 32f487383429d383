package planner

import (
	"context"
	"encoding/json"
	"errors"
)

// Names of the built-in planners, as a run's input spells them.
const (
	NameScript = "script"
	NameOpenAI = "openai"
)

// ErrPermanent marks a planner failure that retrying cannot fix, such as a
// rejected API key or a request the endpoint refuses as malformed. Activities
// turn it into a non-retryable error; every other error is retried.
var ErrPermanent = errors.New("planner: permanent failure")

// Planner proposes the next tool calls of a run.
type Planner interface {
	// Next returns the calls to make next, or Done when the goal is reached.
	// It must not have side effects: it may be called again for the same turn
	// when the activity that calls it is retried.
	Next(ctx context.Context, req Request) (Proposal, error)
}

// Call is one tool call, as proposed by a planner or listed in a plan.
type Call struct {
	// Tool is the tool's registered name.
	Tool string `json:"tool"`
	// Args is the tool's arguments as a JSON object.
	Args json.RawMessage `json:"args,omitempty"`
	// ID is the id a model gave the call in its turn ("call_…"), which the
	// model's next turns answer; a plan's calls need none.
	ID string `json:"id,omitempty"`
	// Malformed holds the arguments' raw text when a planner received
	// arguments that are not valid JSON; Args is then empty. The run refuses
	// such a call and tells the planner why.
	Malformed string `json:"malformed,omitempty"`
}

// Outcome is what became of a proposed call.
type Outcome string

// Outcomes of a proposed call.
const (
	// OutcomeDone: the tool ran (or its earlier result was replayed).
	OutcomeDone Outcome = "done"
	// OutcomeFailed: the tool ran and failed; Error says why.
	OutcomeFailed Outcome = "failed"
	// OutcomeInvalid: the call was refused before it ran (unknown tool,
	// arguments that do not match the schema); Error says why.
	OutcomeInvalid Outcome = "invalid"
	// OutcomeRejected: an approver rejected the step.
	OutcomeRejected Outcome = "rejected"
	// OutcomeExpired: no approver decided before the deadline.
	OutcomeExpired Outcome = "expired"
	// OutcomeDuplicate: the call repeated an earlier applied step of the
	// run (DuplicateOf) and was not executed again; Result is that step's.
	OutcomeDuplicate Outcome = "duplicate"
	// OutcomeCancelled: the run was cancelled before the call ran.
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeMessage is not a call's outcome: the observation is a
	// person's message to the run (Message), given to the planner as the
	// user's words.
	OutcomeMessage Outcome = "message"
)

// Edit tells the planner that a person changed its call before approving
// it: Args are the arguments that ran.
type Edit struct {
	Args    json.RawMessage `json:"ran_with"`
	By      string          `json:"by"`
	Comment string          `json:"comment,omitempty"`
}

// Observation is one earlier call and what became of it, in the order the
// calls were proposed, or a person's message to the run (OutcomeMessage).
type Observation struct {
	// Step is the call's step number; 0 for an invalid call, which never
	// got one.
	Step int `json:"step,omitempty"`
	// Turn is the planning turn that proposed the call: the calls of one
	// turn share it, and a model is shown them as one answer of its own.
	// 0 in observations of earlier releases, one call a turn.
	Turn int `json:"turn,omitempty"`
	// Message is a person's words, when Outcome is OutcomeMessage.
	Message string `json:"message,omitempty"`
	Call
	Outcome Outcome `json:"outcome"`
	// Result is the tool's result when Outcome is done.
	Result json.RawMessage `json:"result,omitempty"`
	// Error explains any other outcome.
	Error string `json:"error,omitempty"`
	// Edit is set when an approver edited the call: Call holds what the
	// planner proposed, Edit what ran.
	Edit *Edit `json:"edited,omitempty"`
	// DuplicateOf is the earlier step a duplicate call repeated.
	DuplicateOf int `json:"duplicate_of,omitempty"`
}

// ToolSpec describes a tool to a planner.
type ToolSpec struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Schema is the JSON Schema of the tool's arguments.
	Schema json.RawMessage `json:"schema"`
}

// Request is everything a planner is told on one turn.
type Request struct {
	Tenant string `json:"tenant"`
	RunID  string `json:"run_id"`
	Goal   string `json:"goal"`
	// Plan is the part of the run's scripted plan this turn needs, if the
	// run has one: the run sends its next call alone.
	Plan []Call `json:"plan,omitempty"`
	// Proposed counts the calls proposed on earlier turns, valid or not, less
	// the calls of the plan that were not sent: the script planner's position
	// in Plan.
	Proposed int `json:"proposed"`
	// History holds the earlier calls and their outcomes, oldest first.
	History []Observation `json:"history,omitempty"`
	// Tools are the tools the planner may call.
	Tools []ToolSpec `json:"tools"`
	// Model, when set, is the model a model planner asks instead of the
	// one it is configured with: a sub-agent's own.
	Model string `json:"model,omitempty"`
	// OnText, when set, is given the model's text as it writes it: a
	// model planner then asks for its answer as a stream.
	OnText func(delta string) `json:"-"`
}

// Proposal is a planner's answer for one turn.
type Proposal struct {
	// Calls are the next calls, to be made in order. Empty with Done unset
	// means the planner has nothing to propose, which ends the run as well.
	Calls []Call `json:"calls,omitempty"`
	// Done says the goal is reached; Calls is then ignored.
	Done bool `json:"done,omitempty"`
	// Parallel says the calls are independent of each other, as a model
	// that may call tools in parallel proposes them: the run makes them
	// all, at once. Otherwise the run makes them in order and asks again
	// after the first that is not done.
	Parallel bool `json:"parallel,omitempty"`
	// Message is the planner's own words, such as a final answer.
	Message string `json:"message,omitempty"`
}
