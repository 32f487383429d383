package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/workflows"
)

// serverMemory is the reference MCP memory server that `make test-deps`
// installs from npm, and node to run it.
func serverMemory(t *testing.T) (node, script string) {
	t.Helper()
	script, err := filepath.Abs("testdata/server-memory/node_modules/@modelcontextprotocol/server-memory/dist/index.js")
	require.NoError(t, err)
	if _, err := os.Stat(script); err != nil {
		t.Fatalf("the reference MCP memory server is not installed (%v): run `make test-deps`, which needs Node.js and npm", err)
	}
	node, err = exec.LookPath("node")
	require.NoError(t, err, "Node.js runs the reference MCP memory server: apt-get install nodejs npm")
	return node, script
}

// entitiesIn counts the entities of the memory server's own file, by name.
func entitiesIn(t *testing.T, path string) map[string]int {
	t.Helper()
	out := map[string]int{}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return out
	}
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var line struct{ Type, Name string }
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line), "a line of the memory file: %s", sc.Text())
		if line.Type == "entity" {
			out[line.Name]++
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// TestServerMemoryFromNPM runs @modelcontextprotocol/server-memory, a
// server oncerun did not write, over stdio as each worker's child: its
// create_entities is settled by a paired read by mapping, open_nodes
// asked for the call's entity names and found when it answers an entity.
// A worker SIGKILLed after the server applied create_entities leaves one
// entity in the server's own file, and the next worker ends the step done
// by the read, sending nothing again.
func TestServerMemoryFromNPM(t *testing.T) {
	t.Parallel()
	node, script := serverMemory(t)
	e := setup(t)
	memory := filepath.Join(t.TempDir(), "memory.jsonl")
	raw, err := json.Marshal(map[string]any{"servers": []any{map[string]any{
		"name": "mem", "transport": "stdio", "command": node, "args": []string{script},
		"env": map[string]string{"MEMORY_FILE_PATH": memory},
		"tools": map[string]any{
			"create_entities": map[string]any{"paired_read": map[string]any{
				"tool": "open_nodes", "args": map[string]string{"names": "/entities/*/name"},
				"found": map[string]string{"pointer": "/entities"}}},
			"open_nodes": map[string]any{},
		},
	}}})
	require.NoError(t, err)
	config := filepath.Join(t.TempDir(), "mcp.json")
	require.NoError(t, os.WriteFile(config, raw, 0o600))
	worker := func(extra ...string) *workerProcess {
		return startWorkerProcess(t, e, nil, append([]string{settings.EnvMCPConfig + "=" + config}, extra...)...)
	}

	p := worker(settings.EnvCrashAt + "=after-apply:mem_create_entities")
	run := e.id("memory")
	_, err = e.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Plan: []planner.Call{{
		Tool: "mem_create_entities",
		Args: json.RawMessage(`{"entities":[{"name":"order-1001","entityType":"order","observations":["plate arrived broken"]}]}`),
	}}})
	require.NoError(t, err)
	p.died("after the effect")
	require.Equal(t, map[string]int{"order-1001": 1}, entitiesIn(t, memory), "the server made the entity before the worker died")

	worker()
	st := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
	s := st.Steps[0]
	require.Equal(t, workflows.StepDone, s.State, s.Error)
	assert.Equal(t, "once", s.Guarantee, "a paired read can tell")
	var settled struct {
		Found  bool `json:"found"`
		Answer struct {
			Entities []struct{ Name string } `json:"entities"`
		} `json:"answer"`
	}
	require.NoError(t, json.Unmarshal(s.Result, &settled), "%s", s.Result)
	assert.True(t, settled.Found, "the step was settled by the paired read, not sent again: %s", s.Result)
	require.Len(t, settled.Answer.Entities, 1)
	assert.Equal(t, "order-1001", settled.Answer.Entities[0].Name)
	// The server makes an entity of a name once, resent or not: the
	// result above, the read's answer, is what shows nothing was resent.
	assert.Equal(t, map[string]int{"order-1001": 1}, entitiesIn(t, memory), "one entity, counted in the server's own file")
	assert.Equal(t, 1, e.count("idempotency_keys", "key = $1 AND state = 'completed'", s.Key))
}
