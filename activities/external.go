package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/tools"
)

// runExternal makes an external call once: lease the key, call, complete. A
// key whose earlier attempt has an unknown outcome is resolved by the tool's
// paired read before anything is sent again; resolved reports that the read
// found the effect applied.
func (a *Activities) runExternal(ctx context.Context, tool tools.Tool, claim idempotency.Claim, call tools.Call) (out idempotency.Outcome, resolved bool, err error) {
	begun, err := a.Store.Begin(ctx, claim)
	lease := begun.Lease
	var unknown *idempotency.OutcomeUnknownError
	switch {
	case errors.As(err, &unknown):
		lease = unknown.Lease
		if tool.PairedRead == "" {
			return idempotency.Outcome{}, false, a.escalate(ctx, lease, unknown, errors.New("the tool has no paired read"))
		}
		applied, result, rerr := a.pairedRead(ctx, tool, call)
		if rerr != nil {
			// The read may work on the next attempt; until then the outcome
			// stays unknown.
			f := idempotency.Failure{Message: fmt.Sprintf("paired read %s failed: %v", tool.PairedRead, rerr)}
			if ferr := a.Store.Fail(detached(ctx), lease, f); ferr != nil {
				rerr = errors.Join(rerr, fmt.Errorf("record failure: %w", ferr))
			}
			return idempotency.Outcome{}, false, fmt.Errorf("resolve unknown outcome of %s: %w", claim.Key, rerr)
		}
		if applied {
			out, err = a.Store.Complete(detached(ctx), lease, result)
			return out, err == nil, err
		}
		// The effect provably did not happen: make it under the new lease.
	case err != nil:
		return idempotency.Outcome{}, false, err
	case lease == nil:
		return begun.Outcome, false, nil
	}

	result, err := runTool(ctx, tool, call)
	if err != nil {
		f := idempotency.Failure{Message: err.Error(), BeforeEffect: errors.Is(err, tools.ErrNotApplied)}
		if ferr := a.Store.Fail(detached(ctx), lease, f); ferr != nil {
			err = errors.Join(err, fmt.Errorf("record failure: %w", ferr))
		}
		return idempotency.Outcome{}, false, err
	}
	// The effect happened: record it even if the attempt's deadline has just
	// passed, or the next attempt would have to resolve it again.
	out, err = a.Store.Complete(detached(ctx), lease, result)
	return out, false, err
}

// recordTimeout bounds the writes that record an outcome after the
// attempt's own context may have ended.
const recordTimeout = 10 * time.Second

// detached is ctx without its cancellation, bounded by recordTimeout.
func detached(ctx context.Context) context.Context {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	context.AfterFunc(c, cancel)
	return c
}

// pairedRead asks the tool's paired read, with the call's own arguments,
// whether the effect exists.
func (a *Activities) pairedRead(ctx context.Context, tool tools.Tool, call tools.Call) (applied bool, result json.RawMessage, err error) {
	if tool.PairedRead == "" {
		return false, nil, fmt.Errorf("tool %s has no paired read", tool.Name)
	}
	read, ok := a.Tools.Lookup(tool.PairedRead)
	if !ok {
		return false, nil, fmt.Errorf("paired read %s of %s is not registered", tool.PairedRead, tool.Name)
	}
	result, err = runTool(ctx, read, call)
	if err != nil {
		return false, nil, err
	}
	var found struct {
		Found *bool `json:"found"`
	}
	if err := json.Unmarshal(result, &found); err != nil || found.Found == nil {
		return false, nil, fmt.Errorf("paired read %s returned no boolean \"found\" field", read.Name)
	}
	return *found.Found, result, nil
}

// escalate gives up on a key whose outcome nobody can tell: the lease is
// failed (not before the effect, so the key stays unknown) and the step fails
// without retries, for a human to resolve.
func (a *Activities) escalate(ctx context.Context, lease *idempotency.Lease, unknown *idempotency.OutcomeUnknownError, cause error) error {
	msg := fmt.Sprintf("%v; the paired read could not resolve it (%v): a human must check the provider before this step is retried", unknown, cause)
	if ferr := a.Store.Fail(detached(ctx), lease, idempotency.Failure{Message: msg}); ferr != nil {
		msg += fmt.Sprintf(" (recording the failure failed too: %v)", ferr)
	}
	return temporal.NewNonRetryableApplicationError(msg, ErrTypeOutcomeUnknown, unknown)
}
