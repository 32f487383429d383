package tools

import (
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/planner"
)

// Key identifies one tool call: the Step-th call of run RunID of tenant
// Tenant, made to tool Tool. Key.String() is the idempotency key, in the
// form v1/<tenant>/<run id>/<step>/<tool>, each part escaped; an external
// tool sends it as the provider's idempotency key.
type Key = keys.Key

// ProposedCall is one tool call as a planner proposed it or a plan file
// lists it: the tool's name and its arguments as a JSON object.
type ProposedCall = planner.Call

// Spec describes a tool to a planner: name, description and argument
// schema.
type Spec = planner.ToolSpec
