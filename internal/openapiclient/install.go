package openapiclient

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// ErrNoNode reports a machine without Node.js or npm: the client's tests
// skip there.
var ErrNoNode = errors.New("node and npm are needed to run the generated client")

// Dir is the folder of the client's package.json, in the source tree.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Install installs the client's npm packages as package-lock.json pins
// them (npm ci), unless they are installed already (make test-deps does
// it), and returns Dir.
func Install(ctx context.Context) (string, error) {
	dir := Dir()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("%w: %w", ErrNoNode, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openapi-typescript", "bin", "cli.js")); err == nil {
		return dir, nil
	}
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm ci in %s: %w: %s", dir, err, out)
	}
	return dir, nil
}
