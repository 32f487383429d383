package workflows

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/oncerun/oncerun/internal/questions"
	"github.com/oncerun/oncerun/internal/untrusted"
)

// SignalAnswer is the signal that carries an [Answer].
const SignalAnswer = "answer"

// RunWaitingForInput is the state of a run one of whose steps waits for a
// person's answer to the questions its tool's server asked.
const RunWaitingForInput RunState = "waiting_for_input"

// StepWaitingForInput is the state of a step whose tool's server answered
// the call with questions for a person (an MCP server's elicitation): it
// completed nothing, and the run waits for an [Answer], which the call
// then sends back under the step's key.
const StepWaitingForInput StepState = "waiting_for_input"

// QuestionItem is one question of a round (its id, mode, message, the
// schema of its answer, or the page it asks the person to open).
type QuestionItem = questions.Item

// QuestionAnswer answers one question: accept (with content for a form
// question), decline or cancel.
type QuestionAnswer = questions.Answer

// States of a round of questions ([StepQuestion.State]).
const (
	QuestionPending   = "pending"
	QuestionAnswered  = "answered"
	QuestionExpired   = "expired"
	QuestionCancelled = "cancelled"
)

// Answer is the payload of the answer signal: a person's answers to round
// Round of the questions step Step's server asked, each by its question's
// id. The approvals service checks them against the questions' schemas
// before it records and sends them.
type Answer struct {
	Step     int64                     `json:"step"`
	Round    int                       `json:"round"`
	Answers  map[string]QuestionAnswer `json:"answers"`
	Answerer string                    `json:"answerer"`
	Note     string                    `json:"note,omitempty"`
}

// Validate reports what keeps an answer from being applied, naming the
// field: no answer, an action that is not accept, decline or cancel, no
// answerer, or an answerer's name or a note that is too long or holds
// control characters.
func (a Answer) Validate() error {
	if len(a.Answers) == 0 {
		return errors.New("no answer given")
	}
	// In the order of the ids, so that the same answer is refused for the
	// same reason on every replay.
	ids := slices.Sorted(maps.Keys(a.Answers)) //workflowcheck:ignore
	for _, id := range ids {
		switch act := a.Answers[id].Action; act {
		case questions.ActionAccept, questions.ActionDecline, questions.ActionCancel:
		default:
			return fmt.Errorf("answers.%s: action %q is not accept, decline or cancel", untrusted.Cut(id, questions.MaxIDBytes), untrusted.Cut(act, 32))
		}
	}
	if a.Answerer == "" {
		return errors.New("no answerer named")
	}
	if err := untrusted.Text("answerer", a.Answerer, MaxApproverBytes); err != nil {
		return err
	}
	return untrusted.Text("note", a.Note, MaxCommentBytes)
}

// StepQuestion is what a step records of one round of questions its
// tool's server asked in the call's answer, and what became of it.
type StepQuestion struct {
	Round  int            `json:"round"`
	Server string         `json:"server,omitempty"`
	Items  []QuestionItem `json:"items"`
	// AnswerBy names who may answer; empty: any approver or operator.
	AnswerBy    []string  `json:"answer_by,omitempty"`
	RequestedAt time.Time `json:"requested_at"`
	Deadline    time.Time `json:"deadline"`
	// State is QuestionPending, QuestionAnswered, QuestionExpired or
	// QuestionCancelled.
	State      string                    `json:"state"`
	Answers    map[string]QuestionAnswer `json:"answers,omitempty"`
	Answerer   string                    `json:"answerer,omitempty"`
	Note       string                    `json:"note,omitempty"`
	AnsweredAt time.Time                 `json:"answered_at,omitzero"`
	// requestState is what the server asked to have sent back with the
	// answers; it stays in the run's history, out of the status.
	requestState string
}
