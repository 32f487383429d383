package workflows

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/tools"
)

// Updates an operator sends a run. Each is validated by the run before it
// is accepted: a refusal reaches the caller as an error of type
// ErrTypeUpdateInvalid or ErrTypeUpdateConflict and leaves no trace in the
// run's history.
const (
	// UpdateCancel carries a [Control] and answers the run's [Status], its
	// receipt filled in.
	UpdateCancel = "cancel"
	// UpdatePause and UpdateResume carry a [Control] and answer the run's
	// [Status].
	UpdatePause  = "pause"
	UpdateResume = "resume"
	// UpdateMessage carries a [Message] and answers a [MessageReceipt].
	UpdateMessage = "message"
)

// Error types of a refused update.
const (
	// ErrTypeUpdateInvalid: the request itself is malformed (a field is
	// missing, too long or not text).
	ErrTypeUpdateInvalid = "InvalidUpdate"
	// ErrTypeUpdateConflict: the request is well formed but the run cannot
	// take it in its state (it has ended, it is cancelled, it is scripted,
	// a message id was used for another text).
	ErrTypeUpdateConflict = "UpdateConflict"
)

// Run and step states the operator's controls add.
const (
	// RunPaused: an operator paused the run; it starts no step and asks no
	// planner until resumed. Steps already running finish.
	RunPaused RunState = "paused"
	// RunCancelling: an operator cancelled the run and a step of it is
	// still running; it ends on its own terms.
	RunCancelling RunState = "cancelling"
	// RunCancelled: an operator cancelled the run and no step of it runs.
	// A step whose outcome is unknown still waits for a person, listed in
	// the receipt's unresolved.
	RunCancelled RunState = "cancelled"
	// StepCancelled: the step never ran because the run was cancelled:
	// its approval was withdrawn, it had not started, or a person answered
	// that its effect did not happen and it was not sent again.
	StepCancelled StepState = "cancelled"
)

// Bounds of the operator's controls and messages.
const (
	// MaxReasonBytes bounds why a run was cancelled or paused.
	MaxReasonBytes = MaxCommentBytes
	// MaxMessageIDBytes bounds a message's id and MaxMessageTextBytes its
	// text, which follows the goal's rules.
	MaxMessageIDBytes   = 128
	MaxMessageTextBytes = MaxGoalBytes
	// MaxMessages is the most messages one run accepts, and
	// MaxMessagesBytes their text together: they travel in the run's
	// state, and its history, to every later planning turn.
	MaxMessages      = 200
	MaxMessagesBytes = 256 << 10
)

// Control is the payload of the cancel, pause and resume updates: who asks
// and why.
type Control struct {
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
}

// Validate reports what keeps c from being applied, naming the field.
func (c Control) Validate() error {
	if c.By == "" {
		return errors.New("by: who asks must be named")
	}
	if err := untrusted.Text("by", c.By, MaxApproverBytes); err != nil {
		return err
	}
	return untrusted.Text("reason", c.Reason, MaxReasonBytes)
}

// ValidateCancel reports what keeps c from cancelling a run, naming the
// field: a cancel withdraws people's work, so its reason must say why, and
// one of spaces alone says nothing. The clients check it (the API, the
// inbox, the CLI); the run's own validator checks Validate only.
func (c Control) ValidateCancel() error {
	if err := c.Validate(); err != nil {
		return err
	}
	if strings.TrimSpace(c.Reason) == "" {
		return errors.New("reason is required: say why the run is cancelled")
	}
	return nil
}

// ControlRecord is a control as the run recorded it: who, when and why.
type ControlRecord struct {
	By     string    `json:"by"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// Message is the payload of the message update: a person's words for the
// run's planner, deduplicated by MessageID.
type Message struct {
	MessageID string `json:"message_id"`
	Text      string `json:"text"`
	By        string `json:"by"`
}

// Validate reports what keeps m from being accepted, naming the field.
func (m Message) Validate() error {
	if m.MessageID == "" {
		return errors.New("message_id is required")
	}
	if err := untrusted.Text("message_id", m.MessageID, MaxMessageIDBytes); err != nil {
		return err
	}
	if m.Text == "" {
		return errors.New("text is required")
	}
	if err := untrusted.Text("text", m.Text, MaxMessageTextBytes); err != nil {
		return err
	}
	if m.By == "" {
		return errors.New("by: who sends the message must be named")
	}
	return untrusted.Text("by", m.By, MaxApproverBytes)
}

// AcceptedMessage is a message the run accepted, numbered in the order
// accepted. DeliveredTurn is the planning turn that first saw it, 0 while
// it waits for the next turn.
type AcceptedMessage struct {
	Message
	Position      int       `json:"position"`
	AcceptedAt    time.Time `json:"accepted_at"`
	DeliveredTurn int       `json:"delivered_turn,omitempty"`
}

// MessageReceipt answers the message update. Duplicate says the run had
// accepted this message id, with the same text, before: nothing changed.
type MessageReceipt struct {
	MessageID  string    `json:"message_id"`
	Position   int       `json:"position"`
	AcceptedAt time.Time `json:"accepted_at"`
	Duplicate  bool      `json:"duplicate,omitempty"`
}

// Receipt is what a cancelled run says about its steps: every step and how
// it ended, and the steps whose outcome is unknown, which a person must
// resolve (the inbox lists them). State is RunCancelling while a step is
// still running, RunCancelled once none is.
type Receipt struct {
	State       RunState      `json:"state"`
	CancelledBy string        `json:"cancelled_by"`
	CancelledAt time.Time     `json:"cancelled_at"`
	Reason      string        `json:"reason,omitempty"`
	Steps       []ReceiptStep `json:"steps"`
	// Unresolved lists the steps whose effect may or may not have
	// happened: each waits for a person's answer.
	Unresolved []ReceiptStep `json:"unresolved,omitempty"`
	// InFlight lists the steps still running, which end on their own
	// terms.
	InFlight []int64 `json:"in_flight,omitempty"`
}

// ReceiptStep is one step of a receipt.
type ReceiptStep struct {
	Step  int64     `json:"step"`
	Tool  string    `json:"tool"`
	Key   string    `json:"key"`
	State StepState `json:"state"`
	// Ended says in words how the step ended, or where it stands.
	Ended string `json:"ended"`
}

// receipt builds the receipt of a cancelled run from its steps.
func (s Status) receipt() *Receipt {
	c := s.Cancel
	if c == nil {
		return nil
	}
	rc := &Receipt{State: RunCancelled, CancelledBy: c.By, CancelledAt: c.At, Reason: c.Reason, Steps: []ReceiptStep{}}
	for _, st := range s.Steps {
		r := ReceiptStep{Step: st.Step, Tool: st.Tool, Key: st.Key, State: st.State, Ended: ended(st)}
		rc.Steps = append(rc.Steps, r)
		if st.delivering {
			rc.InFlight = append(rc.InFlight, st.Step)
			rc.State = RunCancelling
			continue
		}
		switch st.State {
		case StepNeedsResolution:
			rc.Unresolved = append(rc.Unresolved, r)
		case StepRunning, StepApproved, StepPendingApproval:
			rc.InFlight = append(rc.InFlight, st.Step)
			rc.State = RunCancelling
		}
	}
	return rc
}

// ended says how step st ended, in words.
func ended(st Step) string {
	switch st.State {
	case StepDone:
		if st.delivering {
			return "done: its effect was applied once; its follow-on messages are being delivered"
		}
		if st.Class == tools.ClassRead {
			return "done: it read, and changed nothing"
		}
		if st.Replayed {
			return "done: its effect was applied once (the result came from the dedup store)"
		}
		return "done: its effect was applied once"
	case StepDuplicate:
		return fmt.Sprintf("not run: it repeated step %d, which had made the effect", st.DuplicateOf)
	case StepNeedsResolution:
		return "unknown: whether its effect happened waits for a person's answer (resolve it in the inbox)"
	case StepRunning, StepApproved:
		return "running: it ends on its own terms"
	case StepPendingApproval:
		return "waiting for approval"
	case StepWaitingForInput:
		return "waiting for an answer to its server's questions"
	}
	if st.Error != "" {
		return string(st.State) + ": " + st.Error
	}
	return string(st.State)
}
