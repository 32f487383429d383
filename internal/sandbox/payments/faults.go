package payments

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// HeaderFault is the request header that injects a fault into that request
// alone.
const HeaderFault = "Sandbox-Fault"

// Fault modes. The first four are modes as they are; a delay is
// FaultDelayPrefix followed by a Go duration, for example "delay=2s".
const (
	// FaultDropAfterApply applies the refund, then closes the connection
	// without answering.
	FaultDropAfterApply = "drop_after_apply"
	// FaultErrorAfterApply applies the refund, then answers 500 api_error.
	FaultErrorAfterApply = "error_after_apply"
	// FaultErrorBeforeApply answers 500 api_error and applies nothing.
	FaultErrorBeforeApply = "error_before_apply"
	// FaultReadUnavailable makes GET /v1/refunds answer 503.
	FaultReadUnavailable = "read_unavailable"
	// FaultDelayPrefix starts a delay mode: the request is held for the
	// duration, then applied and answered normally.
	FaultDelayPrefix = "delay="
)

// ErrUnknownFault is wrapped by SetFault for a mode it does not know or a
// negative count.
var ErrUnknownFault = errors.New("unknown fault")

// Fault is a fault queued for the next Count requests it applies to.
type Fault struct {
	// Mode is one of the Fault* modes, a delay written as "delay=2s".
	Mode string `json:"mode"`
	// Count is how many more requests it will hit.
	Count int `json:"count"`
}

// fault is a parsed mode.
type fault struct {
	mode  string        // canonical spelling
	kind  string        // the mode without a duration; FaultDelayPrefix for delays
	delay time.Duration // for delays
}

// read reports whether the fault applies to GET /v1/refunds rather than to
// POST /v1/refunds.
func (f fault) read() bool { return f.kind == FaultReadUnavailable }

// parseFault parses a mode, writing delays canonically ("delay=2000ms"
// becomes "delay=2s").
func parseFault(mode string) (fault, error) {
	switch mode {
	case FaultDropAfterApply, FaultErrorAfterApply, FaultErrorBeforeApply, FaultReadUnavailable:
		return fault{mode: mode, kind: mode}, nil
	}
	if rest, ok := strings.CutPrefix(mode, FaultDelayPrefix); ok {
		d, err := time.ParseDuration(rest)
		if err != nil || d <= 0 {
			return fault{}, fmt.Errorf("%w %q: a delay needs a positive duration such as delay=2s", ErrUnknownFault, mode)
		}
		return fault{mode: FaultDelayPrefix + d.String(), kind: FaultDelayPrefix, delay: d}, nil
	}
	return fault{}, fmt.Errorf("%w %q: want %s, %s, %s, %s or delay=<duration>", ErrUnknownFault, mode,
		FaultDropAfterApply, FaultErrorAfterApply, FaultErrorBeforeApply, FaultReadUnavailable)
}

// faultQueue holds the queued faults in the order they were first set. It
// is not safe for concurrent use; the Server guards it.
type faultQueue struct {
	queued []Fault
}

// set queues mode for the next count requests, replacing its earlier count;
// count 0 clears it.
func (q *faultQueue) set(mode string, count int) (fault, error) {
	f, err := parseFault(mode)
	if err != nil {
		return fault{}, err
	}
	if count < 0 {
		return fault{}, fmt.Errorf("%w %q: count must not be negative, got %d", ErrUnknownFault, mode, count)
	}
	i := slices.IndexFunc(q.queued, func(x Fault) bool { return x.Mode == f.mode })
	switch {
	case count == 0 && i >= 0:
		q.queued = slices.Delete(q.queued, i, i+1)
	case count > 0 && i >= 0:
		q.queued[i].Count = count
	case count > 0:
		q.queued = append(q.queued, Fault{Mode: f.mode, Count: count})
	}
	return f, nil
}

// take consumes one count of the oldest queued fault for reads (read true)
// or for refund requests.
func (q *faultQueue) take(read bool) (fault, bool) {
	for i, qf := range q.queued {
		f, err := parseFault(qf.Mode)
		if err != nil || f.read() != read {
			continue
		}
		q.queued[i].Count--
		if q.queued[i].Count == 0 {
			q.queued = slices.Delete(q.queued, i, i+1)
		}
		return f, true
	}
	return fault{}, false
}

// list returns a copy of the queued faults; never nil.
func (q *faultQueue) list() []Fault {
	return append([]Fault{}, q.queued...)
}
