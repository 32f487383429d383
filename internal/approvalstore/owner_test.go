package approvalstore_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tableMention finds a statement on one of the tables this package owns:
// the audit tables (run_controls included) by name anywhere, the others
// after an SQL keyword
// (approvals and resolutions are also words, a package and a list).
var tableMention = regexp.MustCompile(`(?i)\b(approval_decisions|resolution_decisions|run_controls)\b|` +
	`\b(from|join|into|update|table|truncate|copy)\s+(only\s+)?(public\.)?(approvals|resolutions)\b`)

// mentions returns the lines of the Go files under root, tests excluded,
// that mention the owned tables, by the file's path relative to root.
func mentions(t *testing.T, root string) map[string][]string {
	t.Helper()
	found := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			if tableMention.MatchString(line) {
				found[filepath.ToSlash(rel)] = append(found[filepath.ToSlash(rel)], strings.TrimSpace(line)+" (line "+strconv.Itoa(i+1)+")")
			}
		}
		return nil
	})
	require.NoError(t, err)
	return found
}

// TestOnlyTheStoreMentionsItsTables: every statement on approvals,
// approval_decisions, resolutions, resolution_decisions and run_controls
// is in this package. Tests (and internal/approvalstest, their world) may
// read the tables to check outcomes, as an outside checker would;
// migrations' SQL files define them.
func TestOnlyTheStoreMentionsItsTables(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err, "the module's root is two levels up")

	found := mentions(t, root)
	var owned []string
	for path, lines := range found {
		if strings.HasPrefix(path, "internal/approvalstore/") {
			owned = append(owned, path)
			continue
		}
		if strings.HasPrefix(path, "internal/approvalstest/") {
			continue // the approvals service's tests' world, which reads the tables as tests do
		}
		assert.Failf(t, "a statement on the approvals tables outside internal/approvalstore",
			"%s:\n  %s\nmove it into internal/approvalstore", path, strings.Join(lines, "\n  "))
	}
	// The walk sees what it looks for: this package's own statements.
	assert.Contains(t, owned, "internal/approvalstore/decide.go")
	assert.Contains(t, owned, "internal/approvalstore/record.go")
	assert.Contains(t, owned, "internal/approvalstore/control.go")
}

// TestTheStoreKnowsNoHTTP: the store's errors are typed; only the HTTP
// layer (approvals) maps them to status codes.
func TestTheStoreKnowsNoHTTP(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			assert.NotContains(t, imp.Path.Value, "net/http", name)
		}
	}
}

// TestTableMentionFindsStatements: the pattern finds statements in the
// forms they take, and not the words the tables are named after.
func TestTableMentionFindsStatements(t *testing.T) {
	t.Parallel()
	for _, line := range []string{
		"SELECT 1 FROM approvals WHERE tenant = $1",
		"    INSERT INTO approvals (tenant, run_id)",
		"UPDATE resolutions SET state = $5",
		"LEFT JOIN approval_decisions d",
		"e.count(\"resolution_decisions\", \"true\")",
		"delete from public.approvals",
		"TRUNCATE resolutions",
		"INSERT INTO run_controls (tenant, run_id, action)",
	} {
		assert.True(t, tableMention.MatchString(line), line)
	}
	for _, line := range []string{
		`log.Named("approvals")`,
		`Approvals []Item ` + "`json:\"approvals\"`",
		"// the approvals service lists them",
		`"github.com/oncerun/oncerun/approvals"`,
	} {
		assert.False(t, tableMention.MatchString(line), line)
	}
}
