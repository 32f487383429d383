package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/oncerun/oncerun/internal/untrusted"
)

// SignalResolve is the signal that carries a [Resolution].
const SignalResolve = "resolve"

// RunNeedsResolution is the state of a run one of whose steps waits for a
// person to say whether its external effect happened.
const RunNeedsResolution RunState = "needs_resolution"

// StepNeedsResolution is the state of a step of an external tool whose
// outcome nobody could tell: the provider may or may not have applied it,
// and the paired read could not say (or the tool has none). The run waits
// for a [Resolution]; nothing is guessed and nothing is sent meanwhile.
const StepNeedsResolution StepState = "needs_resolution"

// Outcome is a person's answer about an effect whose outcome was unknown.
type Outcome string

// Outcomes.
const (
	// OutcomeApplied: the effect happened. The step completes with the
	// result given (the provider's, if known).
	OutcomeApplied Outcome = "applied"
	// OutcomeNotApplied: the effect did not happen. The step runs again
	// under the same key.
	OutcomeNotApplied Outcome = "not_applied"
)

// MaxResultBytes bounds the result a resolution may carry.
const MaxResultBytes = 64 << 10

// Resolution is the payload of the resolve signal: a person's answer about
// round Round of step Step (a step can need resolution again after a
// not_applied answer; zero means the step's current round).
type Resolution struct {
	Step    int64   `json:"step"`
	Round   int     `json:"round,omitempty"`
	Outcome Outcome `json:"outcome"`
	// Result is the effect's result when Outcome is applied: any JSON value
	// (the provider's answer, if known). Default null.
	Result   json.RawMessage `json:"result,omitempty"`
	Resolver string          `json:"resolver"`
	Note     string          `json:"note,omitempty"`
}

// Validate reports what keeps a resolution from being applied, naming the
// field.
func (r Resolution) Validate() error {
	if r.Outcome != OutcomeApplied && r.Outcome != OutcomeNotApplied {
		return fmt.Errorf("outcome %q is not applied or not_applied", untrusted.Cut(string(r.Outcome), 64))
	}
	if r.Resolver == "" {
		return errors.New("no resolver named")
	}
	if err := untrusted.Text("resolver", r.Resolver, MaxApproverBytes); err != nil {
		return err
	}
	if err := untrusted.Text("note", r.Note, MaxCommentBytes); err != nil {
		return err
	}
	if len(r.Result) > 0 {
		if r.Outcome != OutcomeApplied {
			return errors.New("result is given only with outcome applied")
		}
		if len(r.Result) > MaxResultBytes {
			return fmt.Errorf("result is %d bytes; at most %d", len(r.Result), MaxResultBytes)
		}
		if !json.Valid(r.Result) {
			return errors.New("result is not valid JSON")
		}
		if err := untrusted.JSON("result", r.Result); err != nil {
			return err
		}
	}
	return nil
}

// StepResolution is what a step records about its unknown outcome and the
// answer it got.
type StepResolution struct {
	// Round counts the times this step needed resolution.
	Round int `json:"round"`
	// Known is what oncerun knows of the outcome: the failure met, the
	// paired read's answer.
	Known string `json:"known"`
	// FirstSentAt is when the step's first attempt began.
	FirstSentAt time.Time `json:"first_sent_at"`
	RequestedAt time.Time `json:"requested_at"`
	// Deadline is when an alert is raised if nobody has answered; the run
	// keeps waiting after it.
	Deadline  time.Time `json:"deadline"`
	Overdue   bool      `json:"overdue,omitempty"`
	Outcome   Outcome   `json:"outcome,omitempty"`
	Resolver  string    `json:"resolver,omitempty"`
	Note      string    `json:"note,omitempty"`
	DecidedAt time.Time `json:"decided_at,omitzero"`
	// Result is the result the person gave with an applied answer.
	Result json.RawMessage `json:"result,omitempty"`
}

// FollowUp is a follow-on message a step's effect committed (an e-mail
// after a credit), delivered by the run after the step.
type FollowUp struct {
	Seq  int    `json:"seq"`
	Tool string `json:"tool"`
	Key  string `json:"key"`
	// State is pending, delivered, unknown (the receiver may have it; it is
	// not resent) or failed.
	State string `json:"state"`
	Error string `json:"error,omitempty"`
}
