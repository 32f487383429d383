package activities

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/idempotency"

	"github.com/oncerun/oncerun/internal/keys"
)

// intentOf is step in's claim on its intent in its run tree.
func intentOf(in ToolInput, key keys.Key, argsHash string) idempotency.IntentClaim {
	return idempotency.IntentClaim{Tenant: in.Tenant, Tree: in.Tree, Tool: in.Tool, ArgsHash: argsHash,
		RunID: in.RunID, Step: in.Step, Key: key.String()}
}

// duplicateOf is RunTool's answer for a step whose intent another step of
// its run tree made.
func duplicateOf(err error) (ToolOutput, bool) {
	var dup *idempotency.IntentDuplicateError
	if !errors.As(err, &dup) {
		return ToolOutput{}, false
	}
	return ToolOutput{Duplicate: &TreeDuplicate{RunID: dup.Holder.RunID, Step: dup.Holder.Step, Key: dup.Holder.Key,
		Result: dup.Result}}, true
}

// releaseIntent gives up intent, when it is set and its key holds nothing
// that may have taken effect (see idempotency.ReleaseIntent). A failure is
// logged: the claim then holds until its key is pruned, and a sibling
// that meets it waits, as for a call in flight.
func (a *Activities) releaseIntent(ctx context.Context, intent *idempotency.IntentClaim) {
	if intent == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := idempotency.ReleaseIntent(ctx, a.Pool, *intent); err != nil {
		a.log(ctx).Warn("the step's claim on its intent could not be given up", zap.String("key", intent.Key), zap.Error(err))
	}
}
