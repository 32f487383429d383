package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// root is the repository's top level, from this package's folder.
const root = "../.."

// goBlock matches a fenced Go snippet in Markdown.
var goBlock = regexp.MustCompile("(?ms)^```go\n(.*?)^```")

// snippet is one Go block of a Markdown file.
type snippet struct {
	doc  string
	line int
	body []string
}

// markdownSnippets returns every Go block of README.md and docs/*.md.
func markdownSnippets(t *testing.T) []snippet {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	docs = append([]string{filepath.Join(root, "README.md")}, docs...)
	var out []snippet
	for _, doc := range docs {
		text, err := os.ReadFile(doc)
		require.NoError(t, err)
		for _, m := range goBlock.FindAllSubmatchIndex(text, -1) {
			out = append(out, snippet{
				doc:  strings.TrimPrefix(doc, root+"/"),
				line: 1 + strings.Count(string(text[:m[0]]), "\n"),
				body: significant(string(text[m[2]:m[3]])),
			})
		}
	}
	return out
}

// significant is text's lines without their indentation, blank lines left
// out: a quote may be indented less than its source.
func significant(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// goSources returns the significant lines of every Go file the build sees:
// the module's and the examples' (examples/ are modules of their own, which
// make test builds), without files excluded from every build.
func goSources(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(text), "//go:build ignore") {
			return nil
		}
		out[strings.TrimPrefix(path, root+"/")] = significant(string(text))
		return nil
	})
	require.NoError(t, err)
	return out
}

// quotedIn reports the first file whose lines hold body contiguously.
func quotedIn(body []string, sources map[string][]string) (string, bool) {
	for path, lines := range sources {
		for i := 0; i+len(body) <= len(lines); i++ {
			match := true
			for j, l := range body {
				if lines[i+j] != l {
					match = false
					break
				}
			}
			if match {
				return path, true
			}
		}
	}
	return "", false
}

// TestEveryGoSnippetIsCompiledCode holds each Go block of the README and
// docs/ to a contiguous run of lines of a compiled Go file, so that the
// snippet a reader copies is code the build and the tests have seen.
func TestEveryGoSnippetIsCompiledCode(t *testing.T) {
	snippets := markdownSnippets(t)
	require.NotEmpty(t, snippets, "the README shows Go; finding none means the block pattern broke")
	sources := goSources(t)
	for _, s := range snippets {
		path, ok := quotedIn(s.body, sources)
		if ok {
			t.Logf("%s:%d quotes %s", s.doc, s.line, path)
			continue
		}
		t.Errorf("%s:%d: this Go snippet is not a quote of any compiled Go file; quote an example test or a file under examples/ instead:\n%s",
			s.doc, s.line, strings.Join(s.body, "\n"))
	}
}

// TestQuotedInFindsOnlyWholeRuns keeps the matcher honest: a snippet with
// one line changed, or its lines out of order, is not a quote.
func TestQuotedInFindsOnlyWholeRuns(t *testing.T) {
	src := map[string][]string{"a.go": significant("package a\n\nfunc F() {\n\treturn\n}\n")}
	_, ok := quotedIn(significant("func F() {\n  return\n}"), src)
	require.True(t, ok, "a quote indented differently is still a quote")
	_, ok = quotedIn(significant("func F() {\n\treturn 1\n}"), src)
	require.False(t, ok, "a changed line is not a quote")
	_, ok = quotedIn(significant("return\nfunc F() {"), src)
	require.False(t, ok, "lines out of order are not a quote")
}
