package workflows

import (
	"time"

	"go.temporal.io/sdk/testsuite"
)

// updated is what one update sent to a test run came to: refused (Err
// set by the validator) or answered.
type updated struct {
	Done     bool
	Rejected error
	Err      error
	Value    any
}

// updateAt sends the update name with arg at d after the run started.
func (h *harness) updateAt(d time.Duration, name string, arg any) *updated {
	u := new(updated)
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(name, "", &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { u.Done, u.Rejected = true, err },
			OnComplete: func(v any, err error) {
				u.Done, u.Value, u.Err = true, v, err
			},
		}, arg)
	}, d)
	return u
}
