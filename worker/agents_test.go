package worker

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/tools"
)

// A worker refuses to start with a sub-agent that names a tool it does
// not have, naming the variable, the sub-agent and the tool; the
// configuration's sub-agents and the file's are checked together.
func TestSubAgentsNamingAToolTheWorkerLacksStopTheStart(t *testing.T) {
	reg, _, err := workerRegistry(Config{}.WithDefaults())
	require.NoError(t, err)
	known := func(tool string) bool { _, ok := reg.Lookup(tool); return ok }
	path := filepath.Join(t.TempDir(), "agents.yaml")
	require.NoError(t, os.WriteFile(path, []byte("agents:\n  - name: refunds\n    description: credits\n    tools: [issue_credit, wire_money]\n"), 0o600))

	cfg := Config{AgentsConfig: path, Agents: []Agent{{Name: "notes", Description: "notes", Tools: []string{"add_order_note"}}}}
	_, err = agentSet(cfg, known)
	require.Error(t, err)
	assert.Contains(t, err.Error(), settings.EnvAgentsConfig)
	assert.Contains(t, err.Error(), `agent refunds: tool "wire_money" does not exist`)

	require.NoError(t, os.WriteFile(path, []byte("agents:\n  - name: refunds\n    description: credits\n    tools: [issue_credit, agent_notes]\n"), 0o600))
	set, err := agentSet(cfg, known)
	require.NoError(t, err)
	assert.Equal(t, []string{"agent_notes", "agent_refunds"}, set.Names())

	set, err = agentSet(Config{}, known)
	require.NoError(t, err)
	assert.Nil(t, set, "no sub-agents: no delegation tools")
}

// The registry plans are checked against (the approvals service's, the
// CLI's) holds the sub-agents' tools: a scripted plan a person starts may
// delegate, its call checked against the sub-agent's schema, and a plan
// naming a sub-agent the deployment lacks is refused.
func TestAScriptedPlanMayDelegateToADeclaredSubAgent(t *testing.T) {
	cfg := Config{Agents: []Agent{{Name: "refunds", Description: "credits", Tools: []string{"issue_credit"}, Planner: "script"}}}
	reg, err := Registry(cfg)
	require.NoError(t, err)
	call := func(args string) tools.ProposedCall {
		return tools.ProposedCall{Tool: "agent_refunds", Args: json.RawMessage(args)}
	}
	_, err = reg.Prepare(call(`{"goal":"credit 1001","plan":[{"tool":"issue_credit","args":{"order_id":"1001"}}]}`))
	require.NoError(t, err)
	_, err = reg.Prepare(call(`{"goal":"credit 1001"}`))
	require.Error(t, err, "a scripted sub-agent's call needs its plan")
	assert.Contains(t, err.Error(), "plan")
	_, ok := reg.Lookup("issue_credit")
	assert.True(t, ok, "the deployment's own tools stay")

	reg, err = Registry(Config{})
	require.NoError(t, err)
	_, err = reg.Prepare(call(`{"goal":"credit 1001","plan":[{"tool":"issue_credit","args":{}}]}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "agent_refunds")

	_, err = Registry(Config{Agents: []Agent{{Name: "refunds", Description: "credits", Tools: []string{"wire_money"}}}})
	require.Error(t, err, "a sub-agent naming a tool that does not exist stops the registry too")
	assert.Contains(t, err.Error(), `agent refunds: tool "wire_money" does not exist`)
}
