package worker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/deployment"
	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/tools"
)

// ticketTool stands for a tool an MCP server lists.
var ticketTool = tools.Tool{
	Name: "desk_open_ticket", Class: tools.ClassExternal, Approval: tools.Always(),
	Schema: json.RawMessage(`{"type":"object","properties":{"subject":{"type":"string"}}}`),
	Run:    func(context.Context, tools.Call) (any, error) { return nil, nil },
}

// ticketSource is where ticketTool comes from.
func ticketSource() mcp.Source {
	return mcp.Source{Server: "desk", Transport: mcp.TransportHTTP, Tool: "open_ticket", KeyClaim: mcp.KeyUnverified,
		Hints: mcp.Hints{Annotated: true, Destructive: true}, TaskSupport: "optional"}
}

// digestConfig is a worker configuration with ticketTool from an MCP
// server described by src, and the sub-agents of the YAML agents.
func digestConfig(t *testing.T, src mcp.Source, agents string) Config {
	t.Helper()
	cfg := Config{Tools: []tools.Tool{ticketTool}, mcp: &mcpFound{sources: map[string]mcp.Source{ticketTool.Name: src}}}
	if agents != "" {
		cfg.AgentsConfig = filepath.Join(t.TempDir(), "agents.yaml")
		require.NoError(t, os.WriteFile(cfg.AgentsConfig, []byte(agents), 0o600))
	}
	return cfg
}

// digestsOf are the registry's digest and each tool's, as `oncerun tools`
// reports them for cfg.
func digestsOf(t *testing.T, cfg Config) (string, map[string]string) {
	t.Helper()
	list, err := Describe(cfg)
	require.NoError(t, err)
	byTool := map[string]string{}
	for _, info := range list {
		require.Equal(t, list[0].RegistryDigest, info.RegistryDigest, "every tool carries the registry's digest")
		byTool[info.Name] = info.Digest
	}
	return list[0].RegistryDigest, byTool
}

const agentsYAML = `max_depth: 2
max_children: 4
agents:
  - name: refunds
    description: credits
    tools: [issue_credit]
    planner: openai
    model: gpt-small
    limits: {max_steps: 10, parallel: 2}
`

// TestRegistryDigestCoversMCPServersAndSubAgents: what the worker knows of
// an MCP tool and of a sub-agent beyond the registry's definitions is in
// the tool's digest and the registry's; the key claim a worker's probe
// verifies is not, so that the CLI, which does not probe, reports the
// worker's digest.
func TestRegistryDigestCoversMCPServersAndSubAgents(t *testing.T) {
	t.Parallel()
	base, baseTools := digestsOf(t, digestConfig(t, ticketSource(), agentsYAML))
	require.Contains(t, baseTools, "agent_refunds")
	for name, c := range map[string]struct {
		tool   string
		src    func(*mcp.Source)
		agents string
	}{
		"server":                 {tool: ticketTool.Name, src: func(s *mcp.Source) { s.Server = "desk2" }},
		"server tool":            {tool: ticketTool.Name, src: func(s *mcp.Source) { s.Tool = "open_issue" }},
		"transport":              {tool: ticketTool.Name, src: func(s *mcp.Source) { s.Transport = mcp.TransportStdio }},
		"annotations":            {tool: ticketTool.Name, src: func(s *mcp.Source) { s.Hints.Annotated = false }},
		"readOnlyHint":           {tool: ticketTool.Name, src: func(s *mcp.Source) { s.Hints.ReadOnly = true }},
		"destructiveHint":        {tool: ticketTool.Name, src: func(s *mcp.Source) { s.Hints.Destructive = false }},
		"idempotentHint":         {tool: ticketTool.Name, src: func(s *mcp.Source) { s.Hints.Idempotent = true }},
		"task support":           {tool: ticketTool.Name, src: func(s *mcp.Source) { s.TaskSupport = "required" }},
		"calls run as tasks":     {tool: ticketTool.Name, src: func(s *mcp.Source) { s.Tasks = true }},
		"grant":                  {tool: "agent_refunds", agents: strings.Replace(agentsYAML, "[issue_credit]", "[issue_credit, lookup_order]", 1)},
		"planner":                {tool: "agent_refunds", agents: strings.Replace(agentsYAML, "planner: openai\n    model: gpt-small", "planner: script", 1)},
		"model":                  {tool: "agent_refunds", agents: strings.Replace(agentsYAML, "gpt-small", "gpt-large", 1)},
		"limits' max_steps":      {tool: "agent_refunds", agents: strings.Replace(agentsYAML, "max_steps: 10", "max_steps: 11", 1)},
		"limits' parallel":       {tool: "agent_refunds", agents: strings.Replace(agentsYAML, "parallel: 2", "parallel: 3", 1)},
		"the bound max_depth":    {tool: "agent_refunds", agents: strings.Replace(agentsYAML, "max_depth: 2", "max_depth: 3", 1)},
		"the bound max_children": {tool: "agent_refunds", agents: strings.Replace(agentsYAML, "max_children: 4", "max_children: 5", 1)},
	} {
		src, agents := ticketSource(), agentsYAML
		if c.src != nil {
			c.src(&src)
		}
		if c.agents != "" {
			agents = c.agents
		}
		got, gotTools := digestsOf(t, digestConfig(t, src, agents))
		assert.NotEqual(t, base, got, "%s changes the registry's digest", name)
		for tool, sum := range baseTools {
			if tool == c.tool {
				assert.NotEqual(t, sum, gotTools[tool], "%s changes %s's digest", name, tool)
			} else {
				assert.Equal(t, sum, gotTools[tool], "%s leaves %s's digest", name, tool)
			}
		}
	}

	src := ticketSource()
	src.KeyClaim, src.Warnings, src.ClassFrom = mcp.KeyVerified, []string{"contradiction"}, mcp.FromAnnotation
	got, _ := digestsOf(t, digestConfig(t, src, agentsYAML))
	assert.Equal(t, base, got, "what the probe verified, the warnings and where a property came from are not part of it")
}

// TestTheWorkerAndTheCLIShareTheDigest: a worker's start computes the
// digest `oncerun tools` reports for the same configuration.
func TestTheWorkerAndTheCLIShareTheDigest(t *testing.T) {
	t.Parallel()
	cfg := digestConfig(t, ticketSource(), agentsYAML)
	cli, _ := digestsOf(t, cfg)

	reg, _, err := workerRegistry(cfg)
	require.NoError(t, err)
	set, err := agentSet(cfg, func(tool string) bool { _, ok := reg.Lookup(tool); return ok })
	require.NoError(t, err)
	planReg, err := planRegistry(reg, set)
	require.NoError(t, err)
	d, err := registryDigest(planReg, set, cfg.mcp)
	require.NoError(t, err)
	assert.Equal(t, cli, d.Registry)

	other := cfg
	other.Shop.CreditApprovalThresholdCents = 50000
	changed, _ := digestsOf(t, other)
	assert.NotEqual(t, cli, changed, "a threshold of the built-in tools is part of it")
}

func TestAWorkersIdentityCarriesItsDigest(t *testing.T) {
	t.Parallel()
	d := tools.Digest{Registry: "9e0d1c2b3a4f" + strings.Repeat("0", 52)}
	id := workerIdentity(d)
	host, _ := os.Hostname()
	assert.Regexp(t, `^\d+@`+regexp.QuoteMeta(host)+`@9e0d1c2b3a4f$`, id, "Temporal's usual form, the digest after the last @")
	assert.Equal(t, "9e0d1c2b3a4f", deployment.DigestOfIdentity(id))
	for _, other := range []string{"4242@host@", "4242@host@oncerun", "temporal-cli:alice", "4242@host@9E0D1C2B3A4F"} {
		assert.Empty(t, deployment.DigestOfIdentity(other), other)
	}
}
