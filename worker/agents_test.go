package worker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/settings"
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
