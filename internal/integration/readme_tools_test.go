package integration

import (
	"cmp"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/internal/sandbox/desk"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/worker"
)

// toolRows returns the rows `oncerun tools` prints, by tool: the SOURCE,
// CLASS, APPROVAL and GUARANTEE cells of each.
func toolRows(t *testing.T, out string) map[string][]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.Regexp(t, `^TOOL\s+SOURCE\s+CLASS\s+APPROVAL\s+GUARANTEE\s+PAIRED READ\s+EDITS$`, lines[0], "the list's header")
	cells := regexp.MustCompile(`\s{2,}`)
	rows := map[string][]string{}
	last := len(lines) - 1
	require.Regexp(t, `^registry digest: [0-9a-f]{12}$`, lines[last], "the list ends with the registry's short digest")
	for _, l := range lines[1:last] {
		c := cells.Split(l, -1)
		require.Len(t, c, 7, "a row of seven cells: %q", l)
		require.NotContains(t, rows, c[0], "one row per tool")
		rows[c[0]] = c[1:5]
	}
	return rows
}

// TestTheREADMEMCPToolsRunAsWritten runs the sh block of the README's
// "Tools from MCP servers" (starting `./oncerun-dev sandbox-desk`) as
// written, with the yaml block right above it as its mcp.yaml, and checks
// that `oncerun tools` lists every tool with its source, class, approval
// and guarantee as that file and the built-in tools say.
//
// The two oncerun-dev lines (serve the sandbox desk, run the dev stack
// with it) are out of scope: the desk is served in-process here, as the
// MCP tests serve it, and the dev tests run oncerun-dev. The tools line
// runs the production binary, in a folder holding mcp.yaml, with the
// variables the block sets and none of the test's (but the
// TEMPORAL_CONFIG_FILE naming no file that every child of these tests
// gets): the MCP client reads bearer_token_env's variable from its
// process's environment, not from the CLI's Env, so an in-process CLI of
// a parallel test could not be given the block's DESK_TOKEN.
func TestTheREADMEMCPToolsRunAsWritten(t *testing.T) {
	t.Parallel()
	lines, first := readBlock(t, readmePath, "sh", "./oncerun-dev sandbox-desk")
	config, configFirst := readBlock(t, readmePath, "yaml", "- name: desk")
	raw, err := os.ReadFile(readmePath)
	require.NoError(t, err)
	for _, l := range strings.Split(string(raw), "\n")[configFirst+len(config) : first-2] {
		require.False(t, strings.HasPrefix(strings.TrimSpace(l), "```"), "mcp.yaml is the yaml block right above the block that uses it")
	}
	cmds := parseCommands(t, readmePath, lines, first, "./oncerun", func(l string) bool { return runsProgram(l, "./oncerun-dev") })

	// The README's mcp.yaml reaches the desk at its default address, where
	// the block's sandbox-desk line (no --addr) serves it. That port cannot
	// be counted on here (the package's tests run in parallel, and other
	// runs, a CI job or a reader's own desk may hold it), so the test's
	// desk listens on a free port and mcp.yaml names that one: the only
	// change made to the README's yaml.
	for _, l := range lines {
		if strings.Contains(l, "sandbox-desk") {
			require.NotContains(t, l, "--addr", "the desk serves at its default address, which mcp.yaml names")
		}
	}
	readers := "url: http://" + desk.DefaultAddr + "/mcp"
	yaml := strings.Join(config, "\n") + "\n"
	require.Equal(t, 1, strings.Count(yaml, readers), "the README's mcp.yaml names the desk's default address once: %s", readers)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	d, err := desk.Serve(ctx, "127.0.0.1:0", desk.Config{DataDir: t.TempDir()})
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mcp.yaml"), []byte(strings.Replace(yaml, readers, "url: "+d.URL(), 1)), 0o600))

	bin := buildOncerun(t)
	oncerun := func(vars map[string]string, args ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = dir
		cmd.Env = localEnv(t, nil)
		for name, v := range vars {
			cmd.Env = append(cmd.Env, name+"="+v)
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// The built-in tools, as the workers describe them.
	builtin, err := worker.Describe(worker.Config{})
	require.NoError(t, err)
	steps := []docStep{{
		words: "export DESK_TOKEN=sandbox", claim: "mcp.yaml's bearer_token_env: the sandbox desk takes any token",
		check: func(string, error) {
			mc, err := mcp.LoadConfig(filepath.Join(dir, "mcp.yaml"))
			require.NoError(t, err)
			require.Len(t, mc.Servers, 1)
			assert.Equal(t, "DESK_TOKEN", mc.Servers[0].BearerTokenEnv)
			// Another token than the block's: the desk serves its tools
			// all the same.
			out, err := oncerun(map[string]string{settings.EnvMCPConfig: "mcp.yaml", "DESK_TOKEN": "another"}, "tools")
			require.NoError(t, err, out)
			assert.Contains(t, toolRows(t, out), "desk_open_ticket")
		},
	}, {
		words: "ONCERUN_MCP_CONFIG=mcp.yaml tools", claim: "every tool, its source, class, approval and guarantee",
		check: func(out string, err error) {
			require.NoError(t, err, out)
			want := map[string][]string{
				// What the file does not say comes from the desk's annotations
				// (open_ticket destroys nothing) or MCP's defaults.
				"desk_open_ticket":   {"mcp desk (http, tool open_ticket)", "external", "never (annotation)", "once (key unverified)"},
				"desk_find_ticket":   {"mcp desk (http, tool find_ticket)", "read", "never (default)", "-"},
				"desk_issue_voucher": {"mcp desk (http, tool issue_voucher)", "external (default)", "when amount_cents above 5000", "at-least-once"},
			}
			for _, ti := range builtin {
				want[ti.Name] = []string{ti.Source, ti.Class, ti.Approval, cmp.Or(ti.Guarantee, "-")}
			}
			assert.Equal(t, want, toolRows(t, out), "the built-in tools and the three mcp.yaml lists (the desk's find_voucher is not listed: refused)")
		},
	}}
	runPage(t, readmePath, cmds, steps, fromTheRoot(t, nil), oncerun)
}
