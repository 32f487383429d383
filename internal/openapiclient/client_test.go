package openapiclient

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// install installs the client's packages once for every test.
var install = sync.OnceValues(func() (string, error) { return Install(context.Background()) })

// setup installs the client's packages, or skips where Node.js is not
// installed.
func setup(t *testing.T) string {
	t.Helper()
	dir, err := install()
	if errors.Is(err, ErrNoNode) {
		t.Skip(err)
	}
	require.NoError(t, err)
	return dir
}

// node runs a script of the installed packages in dir.
func node(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("node", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "node %v: %s", args, out)
	return string(out)
}

// TestGeneratedClientIsUpToDate: schema.d.ts is what openapi-typescript
// makes of approvals/openapi.json now.
func TestGeneratedClientIsUpToDate(t *testing.T) {
	t.Parallel()
	dir := setup(t)
	out := filepath.Join(t.TempDir(), "schema.d.ts")
	node(t, dir, filepath.Join("node_modules", "openapi-typescript", "bin", "cli.js"),
		filepath.Join("..", "..", "approvals", "openapi.json"), "--output", out)
	want, err := os.ReadFile(out)
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(dir, "schema.d.ts"))
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got),
		"schema.d.ts is not what the document makes: run npm run --prefix internal/openapiclient generate")
}

// TestWalkthroughTypeChecks: the walkthrough uses the API as the
// generated types describe it (tsc --noEmit over walkthrough.mjs, with
// checkJs).
func TestWalkthroughTypeChecks(t *testing.T) {
	t.Parallel()
	dir := setup(t)
	node(t, dir, filepath.Join("node_modules", "typescript", "bin", "tsc"), "--noEmit", "--project", "tsconfig.json")
}
