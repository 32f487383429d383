package runs

import (
	"context"
	"sync"
)

// MaxUpdatesPerRun is how many updates this process sends one run at a
// time. Temporal admits 10 updates in flight per workflow by default
// (history.maxInFlightUpdates) and answers the 11th with
// ResourceExhausted, which its client retries only after a backoff of
// seconds: fifty messages sent to one run at once took 10 s each that
// way. Queued here, each waits for the ones before it, a few
// milliseconds apiece.
const MaxUpdatesPerRun = 8

// slots bounds the updates in flight to each run, across every Client of
// the process.
var slots = runSlots{runs: map[string]*runSlot{}}

type runSlots struct {
	mu   sync.Mutex
	runs map[string]*runSlot
}

type runSlot struct {
	sem   chan struct{}
	users int
}

// acquire waits for a slot of workflow id, or for ctx; release gives it
// back.
func (s *runSlots) acquire(ctx context.Context, id string) (release func(), err error) {
	s.mu.Lock()
	rs := s.runs[id]
	if rs == nil {
		rs = &runSlot{sem: make(chan struct{}, MaxUpdatesPerRun)}
		s.runs[id] = rs
	}
	rs.users++
	s.mu.Unlock()
	done := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if rs.users--; rs.users == 0 {
			delete(s.runs, id)
		}
	}
	select {
	case rs.sem <- struct{}{}:
		return func() { <-rs.sem; done() }, nil
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}
