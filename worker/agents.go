package worker

import (
	"fmt"

	"github.com/oncerun/oncerun/internal/agents"
	"github.com/oncerun/oncerun/internal/settings"
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
