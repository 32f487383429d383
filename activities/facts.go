package activities

import (
	"context"
	"encoding/json"
	"time"

	"github.com/oncerun/oncerun/internal/events"
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
