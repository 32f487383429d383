// Package mcptest runs, for tests, the MCP servers written in TypeScript
// that `make test-deps` installs from npm under
// internal/integration/testdata/mcp-tasks: the reference everything server
// and tasks-server.mjs, both on the official TypeScript SDK, whose tools run
// as MCP tasks; and, with [ServeTools], a server of the official Go SDK
// that offers the tools a test describes.
package mcptest

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

// Scripts of the servers, under the installed folder.
const (
	// Everything is the reference everything server: `stdio`, or
	// `streamableHttp` with PORT set.
	Everything = "node_modules/@modelcontextprotocol/server-everything/dist/index.js"
	// Tasks is tasks-server.mjs: `stdio`, or `http` with PORT set; LEDGER
	// names the file of the parcels it ships.
	Tasks = "tasks-server.mjs"
)

// EverythingReady and TasksReady are what each prints once it listens over
// HTTP.
const (
	EverythingReady = "listening on port"
	TasksReady      = "listening on"
)

// Node returns Node.js and the absolute path of script in the installed
// folder; it fails t, saying how to install them, when either is missing.
func Node(t testing.TB, script string) (node, path string) {
	t.Helper()
	_, here, _, ok := runtime.Caller(0)
	require.True(t, ok)
	path = filepath.Join(filepath.Dir(here), "..", "integration", "testdata", "mcp-tasks", script)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the MCP task servers are not installed (%v): run `make test-deps`, which needs Node.js and npm", err)
	}
	node, err := exec.LookPath("node")
	require.NoError(t, err, "Node.js runs the MCP task servers: apt-get install nodejs npm")
	return node, path
}

// FreePort is a TCP port of 127.0.0.1 free when asked.
func FreePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// Serve runs node with args and env added to the test's environment until
// the test ends, once the process has printed ready on its standard output
// or error.
func Serve(t testing.TB, node string, args, env []string, ready string) {
	t.Helper()
	cmd := exec.Command(node, args...)
	cmd.Env = append(os.Environ(), env...)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = w, w
	require.NoError(t, cmd.Start())
	w.Close()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	up := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(r)
		seen := false
		for sc.Scan() {
			if !seen && strings.Contains(sc.Text(), ready) {
				seen = true
				close(up)
			}
		}
	}()
	select {
	case <-up:
	case <-time.After(30 * time.Second):
		t.Fatalf("%v did not start", args)
	}
}

// ServeTools serves over Streamable HTTP, until the test ends, an MCP
// server of the official Go SDK that offers tools, each answering "ok",
// and returns its URL. A tool without an input schema takes an object.
func ServeTools(t testing.TB, tools ...*mcpsdk.Tool) string {
	t.Helper()
	s := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "mcptest", Version: "v1"}, nil)
	ok := func(context.Context, *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
		return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "ok"}}}, nil
	}
	for _, tool := range tools {
		if tool.InputSchema == nil {
			tool.InputSchema = json.RawMessage(`{"type":"object"}`)
		}
		s.AddTool(tool, ok)
	}
	var h http.Handler = mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return s }, nil)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
