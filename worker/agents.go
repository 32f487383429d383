package worker

import (
	"fmt"

	"github.com/oncerun/oncerun/internal/agents"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/tools"
)

// Agent declares a sub-agent: a run's planner sees it as the tool
// agent_<name>, and a call of it starts a child run that may use only the
// tools the sub-agent is granted (see docs/agent-runs.md).
type Agent = agents.Agent

// agentSet checks the deployment's sub-agents, cfg.Agents and those of the
// file cfg.AgentsConfig names, against the tools of reg: every problem is
// named at once, with the sub-agent and the tool.
func agentSet(cfg Config, known func(string) bool) (*agents.Set, error) {
	var ac agents.Config
	if cfg.AgentsConfig != "" {
		var err error
		if ac, err = agents.Load(cfg.AgentsConfig); err != nil {
			return nil, fmt.Errorf("%s: %w", settings.EnvAgentsConfig, err)
		}
	}
	ac.Agents = append(append([]agents.Agent(nil), cfg.Agents...), ac.Agents...)
	if len(ac.Agents) == 0 {
		return nil, nil
	}
	set, err := agents.New(ac, known)
	if err != nil && cfg.AgentsConfig != "" {
		return nil, fmt.Errorf("%s %s: %w", settings.EnvAgentsConfig, cfg.AgentsConfig, err)
	}
	return set, err
}

// planRegistry is reg with the sub-agents' tools beside its own, for the
// approvals service: a scripted plan a person starts may delegate, and its
// calls of agent_<name> are checked against the sub-agent's schema like
// any call. The sub-agents' tools never run.
func planRegistry(reg *tools.Registry, set *agents.Set) (*tools.Registry, error) {
	if set == nil {
		return reg, nil
	}
	all := set.Tools()
	for _, name := range reg.Names() {
		t, _ := reg.Lookup(name)
		all = append(all, t)
	}
	return tools.NewRegistry(reg.Config(), all...)
}
