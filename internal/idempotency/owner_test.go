package idempotency_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOnlyTheStoreNamesTheKeysTable holds the dedup store to be
// the one owner of idempotency_keys: every statement on it, the states'
// names and the rule of which keys are in flight live here, so a change to
// the table or to the protocol is a change to this package alone. A
// non-test Go file elsewhere that names the table fails it; tests may read
// the table directly to check outcomes, as an outside checker would, and
// the migrations (SQL files) define it.
func TestOnlyTheStoreNamesTheKeysTable(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	owner, err := filepath.Abs(".")
	require.NoError(t, err)
	var offenders []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path == owner || name == "testdata" || name == "vendor" || (path != root && strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for n := 1; sc.Scan(); n++ {
			if strings.Contains(sc.Text(), "idempotency_keys") {
				rel, _ := filepath.Rel(root, path)
				offenders = append(offenders, rel+":"+strconv.Itoa(n))
			}
		}
		return sc.Err()
	})
	require.NoError(t, err)
	assert.Empty(t, offenders, "non-test Go files outside internal/idempotency name idempotency_keys: "+
		"move the statement into internal/idempotency and call it")
}

// moduleRoot is the directory of the go.mod above the test's directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the test's directory")
		dir = parent
	}
}
