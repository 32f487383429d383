package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/tools"
)

// A run under step identity never records a step as not made (refused,
// held for approval, a duplicate, cancelled, held by a pause) while the
// dedup store holds the step's key completed: a worker made it and died
// before its workflow task, and so the run's record of it, completed
// (docs/agent-runs.md, "Step identity"). The store decides over the
// registry and over the run's own view. Plan reads the keys of the calls
// it refuses or holds for approval; the workflow reads, with MadeSteps,
// the keys of the steps it is about to leave unmade.

// findMade marks, in a turn of a run under step identity, each call that
// this worker refuses or holds for approval and whose key the store holds
// completed with the call's arguments: one read for the whole turn, and
// none when every call is valid and needs no decision.
func (a *Activities) findMade(ctx context.Context, in PlanInput, calls []PlannedCall) error {
	if in.FirstStep < 1 || a.Pool == nil {
		return nil
	}
	var refs []idempotency.KeyRef
	at := map[string]int{}
	for i, c := range calls {
		if c.Invalid == "" && !c.NeedsApproval {
			continue
		}
		k, err := keys.New(in.Tenant, in.RunID, in.FirstStep+int64(i), c.Proposed.Tool)
		if err != nil {
			// No registry takes a tool whose name makes no key: nothing
			// was made under it.
			continue
		}
		refs = append(refs, idempotency.KeyRef{Tenant: in.Tenant, Key: k.String()})
		at[k.String()] = i
	}
	if len(refs) == 0 {
		return nil
	}
	found, err := idempotency.KeysOf(ctx, a.Pool, refs)
	if err != nil {
		return fmt.Errorf("plan: read the keys of the turn's refused and held calls: %w", err)
	}
	for _, k := range found {
		if k.State != idempotency.StateCompleted {
			continue
		}
		c := &calls[at[k.Key]]
		args, hash := c.Args, c.ArgsHash
		if c.Invalid != "" {
			// This worker could not check the arguments; the store holds
			// their hash as the worker that made the step computed it.
			raw := c.Proposed.Args
			if len(bytes.TrimSpace(raw)) == 0 {
				raw = json.RawMessage(`{}`) // as tools.Registry.Prepare reads none
			}
			var err error
			if args, err = keys.Canonicalize(raw); err != nil {
				continue
			}
			if hash, err = keys.ArgsHash(args); err != nil {
				continue
			}
		}
		if hash != k.ArgsHash {
			// Another call under the same key: not this step's effect.
			continue
		}
		c.Made, c.Args, c.ArgsHash = true, args, hash
		if c.Timeout == 0 {
			c.Timeout = tools.DefaultTimeout
		}
		a.log(ctx).Info("a call this worker refuses or holds is a step the dedup store holds completed: the run makes it as that step",
			callFields(keys.Key{Tenant: in.Tenant, RunID: in.RunID, Step: k.Step, Tool: k.Tool})...)
	}
	return nil
}

// MadeQuery asks which steps of a run, from First to Last, the dedup
// store holds completed.
type MadeQuery struct {
	Tenant string `json:"tenant"`
	RunID  string `json:"run_id"`
	First  int64  `json:"first"`
	Last   int64  `json:"last"`
}

// MadeStep is a step whose key the store holds completed.
type MadeStep struct {
	Step     int64  `json:"step"`
	Tool     string `json:"tool"`
	ArgsHash string `json:"args_hash"`
}

// MadeSteps is what MadeSteps found, by step.
type MadeSteps struct {
	Steps []MadeStep `json:"steps,omitempty"`
}

// MadeSteps reads which of a run's steps the store holds completed. The
// workflow asks it, as a local activity, before it records a step as not
// made; only a worker that died in its workflow task leaves such a step
// behind, so the run asks only on the paths where one could have.
func (a *Activities) MadeSteps(ctx context.Context, q MadeQuery) (MadeSteps, error) {
	if a.Pool == nil {
		return MadeSteps{}, nil
	}
	ks, err := idempotency.CompletedSteps(ctx, a.Pool, q.Tenant, q.RunID, q.First, q.Last)
	if err != nil {
		return MadeSteps{}, fmt.Errorf("made steps: %w", err)
	}
	var out MadeSteps
	for _, k := range ks {
		out.Steps = append(out.Steps, MadeStep{Step: k.Step, Tool: k.Tool, ArgsHash: k.ArgsHash})
	}
	return out, nil
}

// madeBefore is RunTool's answer for a step whose tool or arguments this
// worker's registry refuses: when the store holds the step's key completed
// with the step's arguments, the step was made (by a worker of another
// registry, or before a deploy changed this one), and its stored result,
// with the follow-on messages its effect committed, is the step's. made is
// false when the store holds no such key: the refusal stands.
func (a *Activities) madeBefore(ctx context.Context, in ToolInput, key keys.Key) (out ToolOutput, made bool, err error) {
	if a.Pool == nil {
		return ToolOutput{}, false, nil
	}
	found, err := idempotency.KeysOf(ctx, a.Pool, []idempotency.KeyRef{{Tenant: key.Tenant, Key: key.String()}})
	if err != nil {
		return ToolOutput{}, false, temporalError(fmt.Errorf("step %d: read its key: %w", in.Step, err))
	}
	if len(found) == 0 || found[0].State != idempotency.StateCompleted || found[0].ArgsHash != in.ArgsHash {
		return ToolOutput{}, false, nil
	}
	followUps, err := a.committedFollowUps(ctx, key)
	if err != nil {
		return ToolOutput{}, false, temporalError(err)
	}
	a.log(ctx).Info("this worker's registry refuses the call, but the dedup store holds its step completed: replayed",
		callFields(key)...)
	out = ToolOutput{Key: key.String(), Result: found[0].Result, Replayed: true, FollowUps: followUps}
	if isLocal(ctx) {
		out.Key = ""
	}
	return out, true, nil
}

// toolElsewhereAttempts is how many attempts of a step whose tool the
// worker does not have are retried before the step fails: during a
// rolling deploy without Worker Versioning, workers of one task queue
// offer different tools, and a retry may land on one that has it.
const toolElsewhereAttempts = 5

// toolMissing is RunTool's error for a step whose tool this worker does not
// register and whose key the store does not hold made: retryable for the
// first toolElsewhereAttempts attempts of an activity, so that another
// worker may take it; non-retryable after, and at once in a local
// activity, which never leaves this worker.
func toolMissing(ctx context.Context, in ToolInput) error {
	msg := fmt.Sprintf("step %d: tool %q is not registered on this worker", in.Step, in.Tool)
	if !isLocal(ctx) && activity.IsActivity(ctx) && activity.GetInfo(ctx).Attempt < toolElsewhereAttempts {
		return temporal.NewApplicationError(msg+"; another worker of the task queue may have it", ErrTypeToolElsewhere)
	}
	return temporal.NewNonRetryableApplicationError(msg, ErrTypeUnknownTool, nil)
}
