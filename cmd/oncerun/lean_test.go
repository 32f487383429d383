package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// devOnly are the import paths (and prefixes of paths) the production
// command must not link: Temporal's server and what it brings (Kubernetes'
// client, cloud storage SDKs, SQLite), and oncerun's development code.
var devOnly = []string{
	"go.temporal.io/server/",
	"k8s.io/",
	"cloud.google.com/go/storage",
	"github.com/aws/aws-sdk-go-v2/service/s3",
	"modernc.org/sqlite",
	"github.com/oncerun/oncerun/internal/devstack",
	"github.com/oncerun/oncerun/internal/devserver",
	"github.com/oncerun/oncerun/internal/chaos",
	"github.com/oncerun/oncerun/internal/sandbox/",
	"github.com/oncerun/oncerun/starter/oncerundev",
}

// deps lists what `go list -deps` says pkg links, run in dir.
func deps(t *testing.T, dir, pkg string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", pkg)
	cmd.Dir = dir
	cmd.Env = append(cmd.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.Output()
	require.NoError(t, err, "go list -deps %s", pkg)
	return strings.Fields(string(out))
}

func devOnlyIn(list []string) []string {
	var found []string
	for _, p := range list {
		for _, bad := range devOnly {
			if p == strings.TrimSuffix(bad, "/") || strings.HasPrefix(p, bad) {
				found = append(found, p)
				break
			}
		}
	}
	return found
}

// TestProductionCommandIsLean holds the promise of the deployable binary:
// cmd/oncerun, the command-line library a deployment builds its own binary
// with, and such a deployment's command (examples/loyalty) link no
// Temporal server, no Kubernetes package, no cloud storage SDK, no sandbox
// and no chaos harness.
func TestProductionCommandIsLean(t *testing.T) {
	t.Parallel()
	example, err := filepath.Abs("../../examples/loyalty")
	require.NoError(t, err)
	for _, c := range []struct{ dir, pkg string }{
		{".", "."},
		{".", "github.com/oncerun/oncerun/starter/oncerun"},
		{example, "."},
	} {
		list := deps(t, c.dir, c.pkg)
		require.Contains(t, list, "go.temporal.io/sdk/client", "%s links the Temporal SDK's client (the list is real)", c.pkg)
		assert.Empty(t, devOnlyIn(list), "%s in %s links development code", c.pkg, c.dir)
	}
}

// TestDevelopmentCommandHasTheServer checks the other side: the dev
// command links Temporal's server, so the list above is what would be
// found if the production command did.
func TestDevelopmentCommandHasTheServer(t *testing.T) {
	t.Parallel()
	found := devOnlyIn(deps(t, ".", "github.com/oncerun/oncerun/cmd/oncerun-dev"))
	assert.Contains(t, found, "go.temporal.io/server/temporal")
	assert.Contains(t, found, "github.com/oncerun/oncerun/internal/devserver")
}
