package cli

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/mcptest"
	"github.com/oncerun/oncerun/internal/sandbox/desk"
	"github.com/oncerun/oncerun/internal/settings"
)

// mcpEnv is an environment whose ONCERUN_MCP_CONFIG lists one http server
// at url, with open_ticket and find_ticket.
func mcpEnv(t *testing.T, url string) Env {
	t.Helper()
	return mcpEnvOf(t, url, map[string]any{
		"open_ticket": map[string]any{"idempotent": true, "paired_read": "find_ticket"},
		"find_ticket": map[string]any{"class": "read"},
	})
}

// mcpEnvOf is an environment whose ONCERUN_MCP_CONFIG lists one http
// server, desk, at url, with tools.
func mcpEnvOf(t *testing.T, url string, tools map[string]any) Env {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"servers": []any{map[string]any{
		"name": "desk", "transport": "http", "url": url, "tools": tools,
	}}})
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "mcp.json")
	require.NoError(t, os.WriteFile(p, raw, 0o600))
	return Env{Getenv: func(k string) string {
		if k == settings.EnvMCPConfig {
			return p
		}
		return ""
	}}
}

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func TestToolsNeverPrintsTheMCPServersPassword(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	d, err := desk.Serve(ctx, "127.0.0.1:0", desk.Config{})
	require.NoError(t, err)
	up := strings.Replace(d.URL(), "http://", "http://ops:s3cret@", 1)
	for name, tc := range map[string]struct {
		url     string
		failing bool
	}{
		"a server that answers": {url: up},
		"a server that is down": {url: "http://ops:s3cret@" + closedAddr(t) + "/mcp", failing: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, err := run(t, mcpEnv(t, tc.url), "tools", "--json")
			if tc.failing {
				require.Error(t, err)
				assert.Contains(t, out, "connect to MCP server desk (http http://ops:xxxxx@127.0.0.1:")
			} else {
				require.NoError(t, err, out)
				assert.Contains(t, out, `"desk_open_ticket"`)
			}
			assert.NotContains(t, out, "s3cret")
		})
	}
}

// `oncerun tools` lists the sub-agents of ONCERUN_AGENTS_CONFIG as tools of
// class delegate with the tools their child runs are granted, and refuses
// a sub-agent that names a tool the worker does not have.
func TestToolsListsTheSubAgents(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "agents.yaml")
	env := Env{Getenv: func(k string) string {
		if k == settings.EnvAgentsConfig {
			return p
		}
		return ""
	}}
	require.NoError(t, os.WriteFile(p, []byte("agents:\n  - name: refunds\n    description: credits\n    tools: [lookup_order, issue_credit]\n"), 0o600))
	out, err := run(t, env, "tools", "--json")
	require.NoError(t, err)
	var list []struct {
		Name, Source, Class string
		Grant               []string
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	last := list[len(list)-1]
	assert.Equal(t, "agent_refunds", last.Name)
	assert.Equal(t, "agents", last.Source)
	assert.Equal(t, "delegate", last.Class)
	assert.Equal(t, []string{"lookup_order", "issue_credit"}, last.Grant)

	require.NoError(t, os.WriteFile(p, []byte("agents:\n  - name: refunds\n    description: credits\n    tools: [wire_money]\n"), 0o600))
	_, err = run(t, env, "tools")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `agent refunds: tool "wire_money" does not exist`)
}

// `oncerun tools` says where an MCP tool's class and approval come from
// (the configuration, the server's annotations, or MCP's defaults), shows
// the annotations in --json, and warns of a configuration that contradicts
// one, naming the tool.
func TestToolsShowWhereEachMCPPropertyCameFrom(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	d, err := desk.Serve(ctx, "127.0.0.1:0", desk.Config{})
	require.NoError(t, err)
	env := mcpEnvOf(t, d.URL(), map[string]any{
		"open_ticket":   map[string]any{"paired_read": "find_ticket"},
		"find_ticket":   map[string]any{},
		"find_voucher":  map[string]any{"class": "external"},
		"issue_voucher": map[string]any{"approval": "always"},
	})

	out, err := run(t, env, "tools", "--json")
	require.NoError(t, err, out)
	var list []struct {
		Name         string          `json:"name"`
		Class        string          `json:"class"`
		ClassFrom    string          `json:"class_from"`
		ApprovalFrom string          `json:"approval_from"`
		Hints        map[string]bool `json:"hints"`
		Warnings     []string        `json:"warnings"`
	}
	require.NoError(t, json.Unmarshal([]byte(out[strings.Index(out, "["):]), &list), out)
	byName := map[string]int{}
	for i, tool := range list {
		byName[tool.Name] = i
	}
	find, open, voucher, issue := list[byName["desk_find_ticket"]], list[byName["desk_open_ticket"]],
		list[byName["desk_find_voucher"]], list[byName["desk_issue_voucher"]]
	assert.Equal(t, "read", find.Class)
	assert.Equal(t, "annotation", find.ClassFrom, "readOnlyHint makes a read")
	assert.True(t, find.Hints["readOnlyHint"])
	assert.Equal(t, "configuration", open.ClassFrom, "a paired read is said of an effect")
	assert.Equal(t, "annotation", open.ApprovalFrom, "destructiveHint false: no approval")
	assert.False(t, open.Hints["destructiveHint"])
	assert.Equal(t, "configuration", issue.ApprovalFrom)
	assert.Equal(t, "configuration", voucher.ClassFrom)
	require.Len(t, voucher.Warnings, 1)
	assert.Contains(t, voucher.Warnings[0], `tool "find_voucher" is configured class: external, and the server annotates it readOnlyHint`)
	assert.Contains(t, out, "warning: MCP server desk", "the warning goes to standard error too")

	out, err = run(t, env, "tools")
	require.NoError(t, err, out)
	assert.Regexp(t, `desk_find_ticket\s+mcp desk \(http, tool find_ticket\)\s+read \(annotation\)\s+never \(default\)`, out)
	assert.Regexp(t, `desk_open_ticket\s+mcp desk \(http, tool open_ticket\)\s+external\s+never \(annotation\)\s+once`, out)
	assert.Regexp(t, `desk_issue_voucher\s+mcp desk \(http, tool issue_voucher\)\s+external \(default\)\s+always\s`, out)
}

// `oncerun tools` leaves out the tools of an optional server that collide
// once normalised, as the worker does, lists the server's other tools, and
// says on standard error which were left out and why; a server down at
// start is said so too.
func TestToolsLeaveOutAnOptionalServersBadToolsAndSayWhy(t *testing.T) {
	t.Parallel()
	url := mcptest.ServeTools(t, &mcpsdk.Tool{Name: "ctl_out"}, &mcpsdk.Tool{Name: "CTL-OUT"}, &mcpsdk.Tool{Name: "status"})
	raw, err := json.Marshal(map[string]any{"servers": []any{
		map[string]any{"name": "ctl", "transport": "http", "url": url, "optional": true,
			"tools": map[string]any{"ctl_out": map[string]any{}, "CTL-OUT": map[string]any{}, "status": map[string]any{}}},
		map[string]any{"name": "gone", "transport": "http", "url": "http://" + closedAddr(t) + "/mcp", "optional": true,
			"tools": map[string]any{"status": map[string]any{}}},
	}})
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "mcp.json")
	require.NoError(t, os.WriteFile(p, raw, 0o600))
	env := Env{Getenv: func(k string) string {
		if k == settings.EnvMCPConfig {
			return p
		}
		return ""
	}}

	out, err := run(t, env, "tools")
	require.NoError(t, err, out)
	assert.Regexp(t, `ctl_status\s+mcp ctl`, out)
	assert.NotRegexp(t, `ctl_ctl_out\s+mcp`, out)
	assert.Contains(t, out, `warning: tool "CTL-OUT" of MCP server ctl is left out (name_collision): tool name ctl_ctl_out would name both`)
	assert.Contains(t, out, `warning: tool "ctl_out" of MCP server ctl is left out (name_collision)`)
	assert.Contains(t, out, `warning: MCP server gone is down; its tools are left out`)
}

// `oncerun tools` ends its table with the registry's digest, and --json
// gives every tool the registry's digest and its own: two configurations'
// outputs differ in the tools that differ, and in those only.
func TestToolsReportTheRegistryDigest(t *testing.T) {
	t.Parallel()
	envOf := func(threshold string) Env {
		return Env{Getenv: func(k string) string {
			if k == settings.EnvCreditThreshold {
				return threshold
			}
			return ""
		}}
	}
	digests := func(env Env) (string, map[string]string) {
		out, err := run(t, env, "tools", "--json")
		require.NoError(t, err, out)
		var list []struct {
			Name           string `json:"name"`
			RegistryDigest string `json:"registry_digest"`
			Digest         string `json:"digest"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &list), out)
		byTool := map[string]string{}
		for _, tool := range list {
			assert.Regexp(t, `^[0-9a-f]{64}$`, tool.Digest, tool.Name)
			assert.Equal(t, list[0].RegistryDigest, tool.RegistryDigest, "every object carries the registry's digest")
			byTool[tool.Name] = tool.Digest
		}
		require.Regexp(t, `^[0-9a-f]{64}$`, list[0].RegistryDigest)
		return list[0].RegistryDigest, byTool
	}
	base, baseTools := digests(envOf(""))
	changed, changedTools := digests(envOf("50000"))
	assert.NotEqual(t, base, changed)
	for tool, d := range baseTools {
		if tool == "issue_credit" || tool == "refund_payment" {
			assert.NotEqual(t, d, changedTools[tool], "the threshold is %s's", tool)
		} else {
			assert.Equal(t, d, changedTools[tool], tool)
		}
	}

	out, err := run(t, envOf(""), "tools")
	require.NoError(t, err, out)
	assert.True(t, strings.HasSuffix(out, "\nregistry digest: "+base[:12]+"\n"), "the table ends with the short digest:\n%s", out)
}
