package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/telemetry"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/tools"
)

// ErrTypeNeedsResolution is the type of the error a step of an external
// tool ends with when its outcome is unknown and could not be resolved: the
// run then waits for a person's resolve. Its details carry a
// [NeedsResolution].
const ErrTypeNeedsResolution = "NeedsResolution"

// NeedsResolution is what a step whose outcome is unknown tells its run.
type NeedsResolution struct {
	// Key is the step's key.
	Key string `json:"key"`
	// FirstSentAt is when the key was first claimed.
	FirstSentAt time.Time `json:"first_sent_at"`
	// Known is what is known of the outcome.
	Known string `json:"known"`
}

// externalLease is the lease of an external call's key, renewed every
// third of it while the call runs: a worker that dies holding it leaves the
// key to another within this time, not after the call's whole timeout. It
// is a little longer than the steps' heartbeat timeout, after which
// Temporal retries a dead worker's attempt.
const externalLease = 12 * time.Second

// runExternal makes an external call once through the store's external
// protocol (see idempotency.Store.External): the tool's errors are
// classified by tools.ErrNotApplied, an unknown outcome is resolved by the
// tool's paired read or its provider's key lifetime, and one that cannot be
// resolved is an ErrTypeNeedsResolution error. The lease is renewed, and
// the activity heartbeats, while the call runs.
//
// intent, for a step that claimed its intent in its run tree, is checked
// once the key's lease is held, before anything is sent: a step whose
// claim another took over sends nothing, and its attempt ends not applied.
func (a *Activities) runExternal(ctx context.Context, tool tools.Tool, claim idempotency.Claim, call tools.Call,
	intent *idempotency.IntentClaim) (idempotency.ExternalOutcome, error) {
	claim.Lease = externalLease
	ext := idempotency.External{
		Call: func(ctx context.Context) (json.RawMessage, error) {
			if intent != nil {
				held, err := idempotency.HoldsIntent(ctx, a.Pool, *intent)
				switch {
				case err != nil:
					return nil, fmt.Errorf("tool %s: %w: %w", tool.Name, err, tools.ErrNotApplied)
				case !held:
					return nil, fmt.Errorf("tool %s: another step of the run tree holds the intent now: %w", tool.Name, tools.ErrNotApplied)
				}
			}
			ctx, span := telemetry.Tracer().Start(ctx, "oncerun.external "+tool.Name)
			res, err := runTool(ctx, tool, call)
			endCall(span, "oncerun.not_applied", err, errors.Is(err, tools.ErrNotApplied))
			return res, err
		},
		BeforeEffect: func(err error) bool { return errors.Is(err, tools.ErrNotApplied) },
		KeyLifetime:  tool.KeyLifetime,
		OnRenew:      func() { heartbeat(ctx) },
	}
	if tool.PairedRead != "" {
		ext.Read = func(ctx context.Context) (bool, json.RawMessage, error) { return a.pairedRead(ctx, tool, call) }
	}
	if tool.Resume != nil {
		ext.Resume = func(ctx context.Context, handle json.RawMessage) (json.RawMessage, error) {
			ctx, span := telemetry.Tracer().Start(ctx, "oncerun.resume "+tool.Name)
			res, err := resumeTool(ctx, tool, call, handle)
			endCall(span, "oncerun.not_applied", err, errors.Is(err, tools.ErrNotApplied))
			return res, err
		}
	}
	out, err := a.Store.External(ctx, claim, ext)
	var (
		unresolved *idempotency.UnresolvedError
		app        *temporal.ApplicationError
	)
	switch {
	case errors.As(err, &unresolved):
		return out, temporal.NewNonRetryableApplicationError(unresolved.Error(), ErrTypeNeedsResolution, err,
			NeedsResolution{Key: unresolved.Key, FirstSentAt: unresolved.FirstAttemptAt, Known: unresolved.Known})
	case errors.As(err, &app) && app.NonRetryable() && !errors.Is(err, tools.ErrNotApplied):
		// A tool's permanent failure that does not say nothing happened
		// leaves the outcome unknown: the next attempt settles it (the
		// paired read, or a person) instead of the step failing with its
		// key in doubt.
		return out, fmt.Errorf("%s; the outcome is unknown, and the next attempt settles it", err.Error())
	}
	return out, err
}

// OutcomeCheck is what CheckOutcome found of a step's key.
type OutcomeCheck struct {
	// Unknown is true when an attempt may have made the effect without its
	// outcome being recorded.
	Unknown bool `json:"unknown"`
	// Resolution describes it, for the run to wait for a person.
	Resolution NeedsResolution `json:"resolution"`
}

// CheckOutcome reads the key of an external step that failed, so that a
// step whose effect may have happened is never reported as failed (and
// proposed again under a new key) when its retries ran out: the run waits
// for a person instead.
func (a *Activities) CheckOutcome(ctx context.Context, in ToolInput) (OutcomeCheck, error) {
	key, err := keys.New(in.Tenant, in.RunID, in.Step, in.Tool)
	if err != nil {
		return OutcomeCheck{}, temporalError(err)
	}
	// The call's retries ran out: a live question its last attempt left
	// pending has nobody to take its answer to the server.
	a.loseLiveQuestions(ctx, in, true)
	info, found, err := a.Store.Peek(ctx, idempotency.Claim{Key: key, ArgsHash: in.ArgsHash})
	if err != nil {
		return OutcomeCheck{}, temporalError(err)
	}
	if !found || !info.OutcomeUnknown() {
		return OutcomeCheck{}, nil // nothing in doubt: the step failed
	}
	known := "the last attempt's lease expired without an outcome"
	if info.Failure != nil {
		known = info.Failure.Message
	}
	if len(info.Handle) > 0 {
		// The provider may still be making it: say what to look for.
		known += "; the effect was in progress at the provider, recorded as " + untrusted.Cut(untrusted.Compact(info.Handle), 300)
	}
	return OutcomeCheck{Unknown: true, Resolution: NeedsResolution{Key: key.String(), FirstSentAt: info.FirstAttemptAt,
		Known: known + "; the step's retries ran out before anything settled it"}}, nil
}

// heartbeat records an activity heartbeat when ctx belongs to one.
func heartbeat(ctx context.Context) {
	if activity.IsActivity(ctx) {
		activity.RecordHeartbeat(ctx)
	}
}

// pairedRead asks the tool's paired read, with the call's own arguments,
// whether the effect exists.
func (a *Activities) pairedRead(ctx context.Context, tool tools.Tool, call tools.Call) (applied bool, result json.RawMessage, err error) {
	ctx, span := telemetry.Tracer().Start(ctx, "oncerun.paired_read "+tool.PairedRead)
	defer func() { endCall(span, "oncerun.found", err, applied) }()
	read, ok := a.Tools.Lookup(tool.PairedRead)
	if !ok {
		return false, nil, fmt.Errorf("paired read %s of %s is not registered", tool.PairedRead, tool.Name)
	}
	result, err = runTool(ctx, read, call)
	if err != nil {
		return false, nil, err
	}
	applied, err = tools.Found(read.Name, result)
	if err != nil {
		return false, nil, err
	}
	return applied, result, nil
}

// resumeTool follows an earlier attempt's effect in progress by its
// handle, as runTool runs the tool, and encodes its result as JSON.
func resumeTool(ctx context.Context, tool tools.Tool, call tools.Call, handle json.RawMessage) (json.RawMessage, error) {
	res, err := tool.Resume(ctx, call, handle)
	return encoded(tool, res, err)
}
