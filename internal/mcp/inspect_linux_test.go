//go:build linux

package mcp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/mcp"
)

// inspectRole makes TestInspectHelper, in a test binary run again, the
// worker ("parent") or its stdio server ("child").
const inspectRole = "ONCERUN_MCP_TEST_INSPECT"

// plantedSecret is in the parent's environment only.
const plantedSecret = "ONCERUN_TEST_SECRET=planted-s3cret"

// nobody is the user the parent and the child run as when the test runs as
// root, which reads any process's /proc files.
const nobody = 65534

// peek is what the child found of its parent's environment.
type peek struct {
	PPID   int    `json:"ppid"`
	Read   bool   `json:"read"`
	Err    string `json:"err"`
	Secret bool   `json:"secret"`
}

func TestAStdioServerCannotReadItsWorkersEnvironment(t *testing.T) {
	t.Parallel()
	exe := copyOfTestBinary(t)
	parent := exec.Command(exe, "-test.run=^TestInspectHelper$")
	parent.Dir = filepath.Dir(exe)
	parent.Env = []string{inspectRole + "=parent", plantedSecret, "PATH=/usr/bin:/bin", "GORACE=atexit_sleep_ms=0"}
	if os.Geteuid() == 0 {
		parent.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	}

	out, err := parent.CombinedOutput()

	require.NoError(t, err, "%s", out)
	var got *peek
	for sc := bufio.NewScanner(bytes.NewReader(out)); sc.Scan(); {
		var p peek
		if json.Unmarshal(sc.Bytes(), &p) == nil && p.PPID != 0 {
			got = &p
		}
	}
	require.NotNil(t, got, "the child reports what it read: %s", out)
	assert.False(t, got.Secret, "the secret in the worker's environment reached its stdio server")
	assert.False(t, got.Read)
	assert.Contains(t, got.Err, "permission denied")
}

// TestInspectHelper is the worker and its stdio server of
// TestAStdioServerCannotReadItsWorkersEnvironment when the test binary is
// run again as one of them (inspectRole); otherwise it does nothing.
func TestInspectHelper(t *testing.T) {
	switch os.Getenv(inspectRole) {
	case "parent":
		// Starting a stdio server is what marks the worker: the child
		// reports on standard error (the parent's standard output) and
		// exits, so the handshake fails, which is no matter here.
		exe, err := os.Executable()
		require.NoError(t, err)
		sc := mcp.ServerConfig{Name: "peek", Transport: mcp.TransportStdio, Command: exe,
			Args: []string{"-test.run=^TestInspectHelper$"},
			Env:  map[string]string{inspectRole: "child", "GORACE": "atexit_sleep_ms=0"},
			// A tool to list, for the configuration to be valid.
			Tools: map[string]mcp.ToolConfig{"anything": {}}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if d, err := mcp.Load(ctx, mcp.Config{Servers: []mcp.ServerConfig{sc}}, mcp.Options{Stderr: os.Stdout}); err == nil {
			_ = d.Close()
		}
		os.Exit(0)
	case "child":
		p := peek{PPID: os.Getppid()}
		environ, err := os.ReadFile("/proc/" + strconv.Itoa(p.PPID) + "/environ")
		p.Read = err == nil
		if err != nil {
			p.Err = err.Error()
		}
		p.Secret = bytes.Contains(environ, []byte(plantedSecret))
		_ = json.NewEncoder(os.Stderr).Encode(p)
		os.Exit(0)
	}
	t.Skip("run by TestAStdioServerCannotReadItsWorkersEnvironment")
}

// copyOfTestBinary copies the test binary where the user nobody may run
// it: the build's own directory is open to its owner only.
func copyOfTestBinary(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "oncerun-mcp-inspect-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	self, err := os.Executable()
	require.NoError(t, err)
	src, err := os.Open(self)
	require.NoError(t, err)
	defer src.Close()
	exe := filepath.Join(dir, "mcp.test")
	dst, err := os.OpenFile(exe, os.O_CREATE|os.O_WRONLY, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(dst, src)
	require.NoError(t, err)
	require.NoError(t, dst.Close())
	return exe
}
