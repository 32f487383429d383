// Package agents is a deployment's sub-agents: the agents a run may
// delegate to, each a child run with its own planner, the tools its parent
// grants it and limits of its own. A planner sees each sub-agent as a tool,
// agent_<name>, whose arguments are the child's goal (and, for a scripted
// sub-agent, its plan). The declarations come from the worker's
// configuration and from ONCERUN_AGENTS_CONFIG (YAML or JSON, read strictly,
// like the MCP configuration). See docs/agent-runs.md.
package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/oncerun/oncerun/internal/configfile"
	"github.com/oncerun/oncerun/tools"
)

// ToolPrefix begins the name of every sub-agent's tool.
const ToolPrefix = "agent_"

// Bounds on delegation, by default: how deep child runs nest (a run
// started by a person is at depth 0, its children at 1), and how many
// child runs one run may start.
const (
	DefaultMaxDepth    = 3
	DefaultMaxChildren = 8
	// MaxGoalBytes bounds the goal a run gives a child.
	MaxGoalBytes = 4000
	// MaxSteps and MaxParallel bound a sub-agent's limits, as a run's are
	// (workflows.MaxStepsLimit, workflows.MaxParallel).
	MaxSteps    = 10000
	MaxParallel = 64
)

// Agent declares one sub-agent.
type Agent struct {
	// Name is 1 to 32 lower-case letters, digits and '_', beginning with
	// a letter; its tool is agent_<name>.
	Name string `json:"name"`
	// Description tells a planner what the sub-agent is for.
	Description string `json:"description"`
	// Tools are the tools the sub-agent may use, by name. A child run gets
	// these less any its parent may not use. A sub-agent's tool
	// (agent_<name>) among them lets it delegate in turn.
	Tools []string `json:"tools"`
	// Planner names the child's planner: "openai" (the default) or
	// "script", whose plan the parent's call then gives.
	Planner string `json:"planner,omitempty"`
	// Model is the model an openai sub-agent's planner asks; default the
	// worker's (OPENAI_MODEL).
	Model string `json:"model,omitempty"`
	// Limits bound the child run.
	Limits Limits `json:"limits,omitzero"`
}

// Limits bound a child run; zero fields take the run defaults.
type Limits struct {
	MaxSteps int `json:"max_steps,omitempty"`
	Parallel int `json:"parallel,omitempty"`
}

// Config is a deployment's sub-agents and the bounds on delegation.
type Config struct {
	Agents []Agent `json:"agents"`
	// MaxDepth bounds how deep child runs nest. Default DefaultMaxDepth.
	MaxDepth int `json:"max_depth,omitempty"`
	// MaxChildren bounds the child runs one run starts. Default
	// DefaultMaxChildren.
	MaxChildren int `json:"max_children,omitempty"`
}

// Env names the variable that holds the path of the sub-agents'
// configuration file.
const Env = "ONCERUN_AGENTS_CONFIG"

// Load reads the configuration file at path (.json, .yaml or .yml),
// strictly: an unknown or repeated field is refused, naming its path.
func Load(path string) (Config, error) {
	raw, format, err := configfile.Read(path)
	if err == nil {
		var cfg Config
		if err = configfile.Decode(raw, format, &cfg); err == nil {
			return cfg, nil
		}
	}
	return Config{}, fmt.Errorf("agents config %s: %w", path, err)
}

var namePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// Planner names a child run may use.
const (
	PlannerOpenAI = "openai"
	PlannerScript = "script"
)

// Set is a deployment's checked sub-agents.
type Set struct {
	cfg    Config
	byTool map[string]Agent
	// reg checks a delegation's arguments like any call's: its schema,
	// canonical arguments and their hash. Its tools never run.
	reg *tools.Registry
}

// New checks cfg against the deployment's tools (known reports whether a
// tool of that name exists) and returns its set. Every problem is named,
// all at once: a bad or repeated name, a tool that does not exist (naming
// the sub-agent and the tool), an unknown planner, negative limits.
func New(cfg Config, known func(tool string) bool) (*Set, error) {
	if cfg.MaxDepth == 0 {
		cfg.MaxDepth = DefaultMaxDepth
	}
	if cfg.MaxChildren == 0 {
		cfg.MaxChildren = DefaultMaxChildren
	}
	var errs []error
	if cfg.MaxDepth < 1 || cfg.MaxDepth > 10 {
		errs = append(errs, fmt.Errorf("max_depth %d is not between 1 and 10", cfg.MaxDepth))
	}
	if cfg.MaxChildren < 1 || cfg.MaxChildren > 64 {
		errs = append(errs, fmt.Errorf("max_children %d is not between 1 and 64", cfg.MaxChildren))
	}
	s := &Set{cfg: cfg, byTool: map[string]Agent{}}
	var pseudo []tools.Tool
	for i, a := range cfg.Agents {
		at := fmt.Sprintf("agents[%d]", i)
		if !namePattern.MatchString(a.Name) {
			errs = append(errs, fmt.Errorf("%s: name %q is not 1 to 32 lower-case letters, digits and '_' beginning with a letter", at, a.Name))
			continue
		}
		at = fmt.Sprintf("agent %s", a.Name)
		if _, dup := s.byTool[ToolPrefix+a.Name]; dup {
			errs = append(errs, fmt.Errorf("%s: declared twice", at))
			continue
		}
		if strings.TrimSpace(a.Description) == "" {
			errs = append(errs, fmt.Errorf("%s: description is empty: the planner chooses a sub-agent by it", at))
		}
		if a.Planner == "" {
			a.Planner = PlannerOpenAI
		}
		if a.Planner != PlannerOpenAI && a.Planner != PlannerScript {
			errs = append(errs, fmt.Errorf("%s: planner %q is neither %s nor %s", at, a.Planner, PlannerOpenAI, PlannerScript))
		}
		if a.Model != "" && a.Planner != PlannerOpenAI {
			errs = append(errs, fmt.Errorf("%s: model %q is for the %s planner, not %s", at, a.Model, PlannerOpenAI, a.Planner))
		}
		if len(a.Tools) == 0 {
			errs = append(errs, fmt.Errorf("%s: tools is empty: a sub-agent may use only the tools it is granted", at))
		}
		if a.Limits.MaxSteps < 0 || a.Limits.MaxSteps > MaxSteps || a.Limits.Parallel < 0 || a.Limits.Parallel > MaxParallel {
			errs = append(errs, fmt.Errorf("%s: limits.max_steps must be 0 to %d and limits.parallel 0 to %d", at, MaxSteps, MaxParallel))
		}
		if known(ToolPrefix + a.Name) {
			errs = append(errs, fmt.Errorf("%s: the worker has a tool named %s%s already", at, ToolPrefix, a.Name))
		}
		s.byTool[ToolPrefix+a.Name] = a
		pseudo = append(pseudo, tools.Tool{Name: ToolPrefix + a.Name, Description: a.Description, Class: tools.ClassRead,
			Schema: schema(a.Planner == PlannerScript), Run: neverRun})
	}
	for _, a := range s.byTool {
		for _, t := range a.Tools {
			_, sub := s.byTool[t]
			if !sub && (strings.HasPrefix(t, ToolPrefix) || !known(t)) {
				errs = append(errs, fmt.Errorf("agent %s: tool %q does not exist", a.Name, t))
			}
		}
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
		return nil, fmt.Errorf("agents config: %w", errors.Join(errs...))
	}
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, pseudo...)
	if err != nil {
		return nil, fmt.Errorf("agents config: %w", err)
	}
	s.reg = reg
	return s, nil
}

// neverRun is the Run of a sub-agent's tool: a delegation is a child run,
// which the run starts itself; no worker runs it as a tool.
func neverRun(context.Context, tools.Call) (any, error) {
	return nil, tools.Permanent(errors.New("a delegation is a child run, not a tool call"))
}

// schema is a sub-agent's arguments: its goal, and for a scripted one its
// plan.
func schema(scripted bool) json.RawMessage {
	goal := fmt.Sprintf(`"goal":{"type":"string","minLength":1,"maxLength":%d,"description":"What the sub-agent should achieve, in words."}`, MaxGoalBytes)
	if !scripted {
		return json.RawMessage(`{"type":"object","properties":{` + goal + `},"required":["goal"],"additionalProperties":false}`)
	}
	plan := `"plan":{"type":"array","minItems":1,"maxItems":100,"items":{"type":"object","properties":{"tool":{"type":"string"},"args":{"type":"object"}},"required":["tool"],"additionalProperties":false}}`
	return json.RawMessage(`{"type":"object","properties":{` + goal + `,` + plan + `},"required":["goal","plan"],"additionalProperties":false}`)
}

// Bounds are the set's MaxDepth and MaxChildren.
func (s *Set) Bounds() (maxDepth, maxChildren int) {
	if s == nil {
		return DefaultMaxDepth, DefaultMaxChildren
	}
	return s.cfg.MaxDepth, s.cfg.MaxChildren
}

// Lookup returns the sub-agent whose tool is named tool.
func (s *Set) Lookup(tool string) (Agent, bool) {
	if s == nil {
		return Agent{}, false
	}
	a, ok := s.byTool[tool]
	return a, ok
}

// Specs are the sub-agents' tools as a planner sees them.
func (s *Set) Specs() []tools.Spec {
	if s == nil {
		return nil
	}
	return s.reg.Specs()
}

// Prepare checks a call of a sub-agent's tool: its arguments against the
// tool's schema, in canonical form with their hash.
func (s *Set) Prepare(call tools.ProposedCall) (tools.Prepared, error) {
	return s.reg.Prepare(call)
}

// Tools are the sub-agents' tools, for a registry that checks plans
// which call them (the approvals service's). They never run.
func (s *Set) Tools() []tools.Tool {
	if s == nil {
		return nil
	}
	out := make([]tools.Tool, 0, len(s.byTool))
	for _, name := range s.reg.Names() {
		t, _ := s.reg.Lookup(name)
		out = append(out, t)
	}
	return out
}

// Names are the sub-agents' tools, sorted.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	return s.reg.Names()
}

// Grant is what a child run of a may use: a's tools that its parent may
// use too. A parent that is a child run itself (granted) may use only
// parent; one a person started may use every tool.
func Grant(a Agent, granted bool, parent []string) []string {
	out := []string{}
	for _, t := range a.Tools {
		if !granted || slices.Contains(parent, t) {
			out = append(out, t)
		}
	}
	return out
}
