package activities

import (
	"errors"

	"github.com/oncerun/oncerun/internal/intents"
	"github.com/oncerun/oncerun/internal/keys"
)

// intentOf is step in's claim on its intent in its run tree.
func intentOf(in ToolInput, key keys.Key, argsHash string) intents.Claim {
	return intents.Claim{Tenant: in.Tenant, Tree: in.Tree, Tool: in.Tool, ArgsHash: argsHash,
		RunID: in.RunID, Step: in.Step, Key: key.String()}
}

// duplicateOf is RunTool's answer for a step whose intent another step of
// its run tree made.
func duplicateOf(err error) (ToolOutput, bool) {
	var dup *intents.DuplicateError
	if !errors.As(err, &dup) {
		return ToolOutput{}, false
	}
	return ToolOutput{Duplicate: &TreeDuplicate{RunID: dup.Holder.RunID, Step: dup.Holder.Step, Key: dup.Holder.Key,
		Result: dup.Result}}, true
}
