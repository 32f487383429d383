package agents_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/agents"
	"github.com/oncerun/oncerun/tools"
)

// builtin are the tools of a worker with the shop, the payment provider
// and e-mail configured.
var builtin = []string{"lookup_order", "issue_credit", "add_order_note", "refund_payment", "get_refund", "send_email",
	"agent_lookup"}

func known(tool string) bool { return slices.Contains(builtin, tool) }

// The example file the docs quote is a valid configuration of the
// built-in tools.
func TestTheExampleConfigurationLoads(t *testing.T) {
	cfg, err := agents.Load("../../examples/agents.yaml")
	require.NoError(t, err)
	set, err := agents.New(cfg, known)
	require.NoError(t, err)
	assert.Equal(t, []string{"agent_refunds", "agent_support"}, set.Names())
	a, ok := set.Lookup("agent_refunds")
	require.True(t, ok)
	assert.Equal(t, agents.PlannerOpenAI, a.Planner, "the default planner")
	assert.Equal(t, 10, a.Limits.MaxSteps)
	depth, children := set.Bounds()
	assert.Equal(t, 3, depth)
	assert.Equal(t, 8, children)
}

// A configuration is read strictly, like the MCP configuration: an unknown
// field is refused with its path.
func TestLoadRefusesAnUnknownField(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agents.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"agents":[{"name":"a","description":"d","tools":["lookup_order"],"toolz":[]}]}`), 0o600))
	_, err := agents.Load(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "agents[0].toolz: unknown field")
	_, err = agents.Load(filepath.Join(t.TempDir(), "agents.toml"))
	assert.ErrorContains(t, err, `unknown file type ".toml"`)
}

// Every problem of a configuration is named at once, each with its
// sub-agent.
func TestNewNamesEveryProblemWithItsSubAgent(t *testing.T) {
	_, err := agents.New(agents.Config{MaxDepth: 11, Agents: []agents.Agent{
		{Name: "refunds", Description: "r", Tools: []string{"issue_credit", "wire_money"}},
		{Name: "refunds", Description: "again", Tools: []string{"issue_credit"}},
		{Name: "Bad Name", Description: "b", Tools: []string{"issue_credit"}},
		{Name: "quiet", Tools: []string{"agent_nobody"}, Planner: "llama"},
		{Name: "idle", Description: "i", Limits: agents.Limits{MaxSteps: 1 << 20}},
		{Name: "lookup", Description: "l", Tools: []string{"lookup_order"}},
		{Name: "scripted", Description: "s", Tools: []string{"lookup_order"}, Planner: agents.PlannerScript, Model: "gpt-4o"},
	}}, known)
	require.Error(t, err)
	for _, want := range []string{
		`agent refunds: tool "wire_money" does not exist`,
		"agent refunds: declared twice",
		`agents[2]: name "Bad Name" is not`,
		"agent quiet: description is empty",
		`agent quiet: planner "llama" is neither openai nor script`,
		`agent quiet: tool "agent_nobody" does not exist`,
		"agent idle: tools is empty",
		"agent idle: limits.max_steps must be 0 to 10000 and limits.parallel 0 to 64",
		"agent lookup: the worker has a tool named agent_lookup already",
		"max_depth 11 is not between 1 and 10",
		`agent scripted: model "gpt-4o" is for the openai planner, not script`,
	} {
		assert.Contains(t, err.Error(), want)
	}
}

// A sub-agent may name another's tool, which lets it delegate in turn.
func TestASubAgentMayDelegateToAnother(t *testing.T) {
	set, err := agents.New(agents.Config{Agents: []agents.Agent{
		{Name: "triage", Description: "t", Tools: []string{"lookup_order", "agent_refunds"}},
		{Name: "refunds", Description: "r", Tools: []string{"issue_credit"}},
	}}, known)
	require.NoError(t, err)
	assert.Len(t, set.Specs(), 2)
}

// A delegation's arguments are checked against its schema: a goal, and a
// plan only for a scripted sub-agent, which needs one.
func TestADelegationsArgumentsAreChecked(t *testing.T) {
	set, err := agents.New(agents.Config{Agents: []agents.Agent{
		{Name: "model", Description: "m", Tools: []string{"lookup_order"}},
		{Name: "scripted", Description: "s", Tools: []string{"lookup_order"}, Planner: agents.PlannerScript},
	}}, known)
	require.NoError(t, err)
	for _, tc := range []struct {
		tool, args string
		ok         bool
	}{
		{"agent_model", `{"goal":"look order 1001 up"}`, true},
		{"agent_model", `{"goal":""}`, false},
		{"agent_model", `{"goal":"x","plan":[{"tool":"lookup_order"}]}`, false},
		{"agent_scripted", `{"goal":"x","plan":[{"tool":"lookup_order","args":{"order_id":"1001"}}]}`, true},
		{"agent_scripted", `{"goal":"x"}`, false},
	} {
		p, err := set.Prepare(tools.ProposedCall{Tool: tc.tool, Args: []byte(tc.args)})
		if tc.ok {
			assert.NoError(t, err, tc.args)
			assert.Len(t, p.ArgsHash, 64)
		} else {
			assert.Error(t, err, tc.args)
		}
	}
}

// A child may use its sub-agent's tools that its parent may use, never
// more.
func TestGrantIsTheSubAgentsToolsWithinTheParents(t *testing.T) {
	a := agents.Agent{Tools: []string{"lookup_order", "issue_credit", "refund_payment"}}
	assert.Equal(t, a.Tools, agents.Grant(a, false, nil), "a run a person started may use every tool")
	assert.Equal(t, []string{"lookup_order", "issue_credit"}, agents.Grant(a, true, []string{"issue_credit", "lookup_order", "send_email"}))
	assert.Empty(t, agents.Grant(a, true, []string{"send_email"}))
	assert.Empty(t, agents.Grant(a, true, nil), "a child run granted nothing grants nothing")
}
