package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"go.temporal.io/sdk/activity"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/events"
	"github.com/oncerun/oncerun/internal/planner"
)

// RunFact is a fact of a run's story the run tells of itself (a step
// proposed, its state changed, the run ended): written to the run's event
// log (docs/events.md) once, by its source, whichever attempt writes it.
type RunFact struct {
	RunID string `json:"run_id"`
	// Source names the fact within the root run's log.
	Source string          `json:"source"`
	Step   int64           `json:"step,omitempty"`
	Type   string          `json:"type"`
	Data   json.RawMessage `json:"data,omitempty"`
	At     time.Time       `json:"at"`
}

// RecordFactsInput is the input of RecordFacts.
type RecordFactsInput struct {
	Tenant string    `json:"tenant"`
	Facts  []RunFact `json:"facts"`
}

// RecordFacts writes a run's facts to its event log, when the run waits or
// ends with facts that no activity of its own carried.
func (a *Activities) RecordFacts(ctx context.Context, in RecordFactsInput) error {
	return a.recordFacts(ctx, in.Tenant, in.Facts)
}

// recordFacts writes facts to their run's log in one round trip; a fact
// written before is skipped.
func (a *Activities) recordFacts(ctx context.Context, tenant string, facts []RunFact) error {
	if len(facts) == 0 || a == nil || a.Pool == nil {
		return nil
	}
	out := make([]events.Fact, len(facts))
	for i, f := range facts {
		out[i] = events.Fact{RunID: f.RunID, Source: f.Source, Step: f.Step, Type: f.Type, Data: f.Data, At: f.At}
	}
	return events.Record(ctx, a.Pool, tenant, out)
}

// textStream passes a model's text, as it writes it, to the run's
// followers as ephemeral text.delta events (docs/events.md), in pieces of
// at most textPiece bytes or textEvery apart. A turn tried again first
// tells, durably, that the text of the attempt before is discarded, so
// that no reader shows two answers run together.
type textStream struct {
	a        *Activities
	ctx      context.Context
	tenant   string
	run      string
	message  string
	buf      strings.Builder
	last     time.Time
	disabled bool
}

// Bounds of a text.delta event.
const (
	textPiece = 1024
	textEvery = 100 * time.Millisecond
)

// textStream returns the turn's text stream, or one that passes nothing on
// for a scripted run or a worker without a database.
func (a *Activities) textStream(ctx context.Context, in PlanInput) *textStream {
	t := &textStream{a: a, ctx: ctx, tenant: in.Tenant, run: in.RunID, disabled: true}
	if a == nil || a.Pool == nil || in.Turn == 0 || in.Planner == planner.NameScript || !activity.IsActivity(ctx) {
		return t
	}
	attempt := activity.GetInfo(ctx).Attempt
	t.disabled = false
	t.message = fmt.Sprintf("%s/turn-%d/%d", in.RunID, in.Turn, attempt)
	if attempt > 1 {
		data, _ := json.Marshal(map[string]any{"turn": in.Turn, "attempt": attempt - 1,
			"message_id": fmt.Sprintf("%s/turn-%d/%d", in.RunID, in.Turn, attempt-1)})
		err := a.recordFacts(ctx, in.Tenant, []RunFact{{RunID: in.RunID, Type: "turn.discarded", Data: data, At: time.Now(),
			Source: fmt.Sprintf("%s|turn:%d:discarded:%d", in.RunID, in.Turn, attempt-1)}})
		if err != nil {
			a.log(ctx).Warn("the discarded text of a model turn could not be told", zap.Error(err))
		}
	}
	return t
}

// write takes a piece of the model's text.
func (t *textStream) write(delta string) {
	if t.disabled {
		return
	}
	t.buf.WriteString(delta)
	if t.buf.Len() >= textPiece || time.Since(t.last) >= textEvery {
		t.flush()
	}
}

// flush passes on what the stream holds. Text is ephemeral: a piece that
// cannot be passed on is dropped, never retried.
func (t *textStream) flush() {
	if t.disabled || t.buf.Len() == 0 {
		return
	}
	text := t.buf.String()
	t.buf.Reset()
	t.last = time.Now()
	for text != "" {
		n := min(len(text), textPiece)
		for n > 1 && n < len(text) && !utf8.RuneStart(text[n]) {
			n--
		}
		data, _ := json.Marshal(map[string]string{"message_id": t.message, "text": text[:n]})
		if err := events.Publish(t.ctx, t.a.Pool, t.tenant, events.Event{RunID: t.run, Type: "text.delta", Data: data}); err != nil {
			t.a.log(t.ctx).Debug("a model's text could not be passed on", zap.Error(err))
			t.disabled = true
			return
		}
		text = text[n:]
	}
}
