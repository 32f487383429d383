package integration

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A page's command block, run as written: the tests of this kind read a
// fenced block of a README or docs/ page, split its command lines as the
// shell would, and run each through the CLI against the test's world, in
// the page's order. Each command is matched with what the test knows of
// it (its words and the page's comment on it), so that a changed line or
// a changed claim fails until its check is changed with it.

// docCommand is one command line of a page's block.
type docCommand struct {
	// line is its line number in the page, from 1.
	line int
	// text is the line as written.
	text string
	// export is set for a line `export NAME=value ...`, which runs nothing:
	// it sets variables for the commands below it.
	export bool
	// assigns are the line's NAME=value words: an export's, or those
	// before the program's name, which the shell gives that program only.
	assigns []string
	// args are the words after the program's name, as the shell passes
	// them.
	args []string
	// vars are the variables the command runs with, beyond the test's
	// world: those the export lines above it set, then its own assigns.
	vars map[string]string
	// claim is what the page says of the command: its trailing comment,
	// then the comment lines under it, joined by spaces.
	claim string
}

// words are the command's assignments, then its words before its first
// flag: "limits set credits", "approvals", "ONCERUN_MCP_CONFIG=mcp.yaml
// tools", "export ONCERUN_API=https://approvals.example.com".
func (c docCommand) words() string {
	ws := slices.Clone(c.assigns)
	if c.export {
		ws = append([]string{"export"}, ws...)
	}
	for _, a := range c.args {
		if strings.HasPrefix(a, "-") {
			break
		}
		ws = append(ws, a)
	}
	return strings.Join(ws, " ")
}

// readBlock returns the lines of the one ```lang block of the page at
// path that holds marker, and the page's line number of its first line.
// No such block, or two, fails the test.
func readBlock(t *testing.T, path, lang, marker string) ([]string, int) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(string(raw), "\n")
	var (
		found []int
		start = -1
	)
	for i, l := range lines {
		switch {
		case start < 0 && strings.TrimSpace(l) == "```"+lang:
			start = i + 1
		case start >= 0 && strings.TrimSpace(l) == "```":
			if strings.Contains(strings.Join(lines[start:i], "\n"), marker) {
				found = append(found, start, i)
			}
			start = -1
		}
	}
	require.Len(t, found, 2, "%s has one ```%s block holding %q", path, lang, marker)
	return lines[found[0]:found[1]], found[0] + 1
}

// parseCommands reads a block's lines, first numbered first: a line
// running prog (its first word after any NAME=value words is prog) is a
// command, and so is a line `export NAME=value ...`, whose variables the
// commands below it run with; a line of spaces then "#" goes on with the
// comment of the line above, a blank line is nothing, and a line that
// outOfScope accepts is left out. Any other line fails the test, so that
// no line of the page escapes it.
func parseCommands(t *testing.T, path string, lines []string, first int, prog string, outOfScope func(string) bool) []docCommand {
	t.Helper()
	var (
		cmds     []docCommand
		exported = map[string]string{}
	)
	for i, l := range lines {
		n := first + i
		trimmed := strings.TrimSpace(l)
		switch {
		case trimmed == "":
		case strings.HasPrefix(trimmed, "#") && l != trimmed:
			require.NotEmpty(t, cmds, "%s:%d: a comment line with no command above it", path, n)
			c := &cmds[len(cmds)-1]
			c.claim = strings.TrimSpace(c.claim + " " + strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
		case strings.HasPrefix(l, "export "):
			words, comment, err := shellWords(l)
			require.NoError(t, err, "%s:%d: %s", path, n, l)
			assigns := leadingAssignments(words[1:])
			require.True(t, len(assigns) > 0 && len(assigns) == len(words)-1, "%s:%d: an export line sets NAME=value words only: %s", path, n, l)
			maps.Copy(exported, assignedVars(assigns))
			cmds = append(cmds, docCommand{line: n, text: l, export: true, assigns: assigns, claim: comment})
		case runsProgram(l, prog):
			words, comment, err := shellWords(l)
			require.NoError(t, err, "%s:%d: %s", path, n, l)
			assigns := leadingAssignments(words)
			require.True(t, len(words) > len(assigns) && words[len(assigns)] == prog, "%s:%d: the shell would not run %s: %s", path, n, prog, l)
			vars := maps.Clone(exported)
			maps.Copy(vars, assignedVars(assigns))
			cmds = append(cmds, docCommand{line: n, text: l, assigns: assigns, args: words[len(assigns)+1:], vars: vars, claim: comment})
		case outOfScope(l):
		default:
			t.Fatalf("%s:%d: a line this test does not know: %s", path, n, l)
		}
	}
	return cmds
}

// assignment is a word the shell reads as a variable's assignment.
var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// runsProgram reports whether the shell line l runs prog: its first
// blank-separated word that is not NAME=value is prog. (A quoted value
// holding a blank misleads it; parseCommands then fails the line.)
func runsProgram(l, prog string) bool {
	for _, w := range strings.Fields(l) {
		if !assignment.MatchString(w) {
			return w == prog
		}
	}
	return false
}

// leadingAssignments returns the NAME=value words words starts with.
func leadingAssignments(words []string) []string {
	n := 0
	for n < len(words) && assignment.MatchString(words[n]) {
		n++
	}
	return words[:n]
}

// assignedVars maps each variable of NAME=value words to its value.
func assignedVars(assigns []string) map[string]string {
	vars := map[string]string{}
	for _, a := range assigns {
		name, value, _ := strings.Cut(a, "=")
		vars[name] = value
	}
	return vars
}

// docStep is what a test knows of one command of a page.
type docStep struct {
	// words and claim are the command's words before its first flag and
	// what the page says of it (see docCommand), as the page has them.
	words, claim string
	// before, when set, puts the world into the state the command
	// assumes: what a reader of the page would have done or waited for.
	before func()
	// check checks what the command printed and returned against the
	// page's claim; for an export (which prints nothing) it may be nil.
	check func(out string, err error)
}

// docRunner runs a page's command: args are its words after the
// program's name (passed through fromTheRoot or the like), vars the
// variables it runs with (docCommand.vars).
type docRunner func(vars map[string]string, args ...string) (string, error)

// noVars is the docRunner of a page whose commands set no variables: run
// gets their arguments, and a command with variables fails the test.
func noVars(t *testing.T, run func(args ...string) (string, error)) docRunner {
	return func(vars map[string]string, args ...string) (string, error) {
		t.Helper()
		require.Empty(t, vars, "the line sets variables this test does not pass on")
		return run(args...)
	}
}

// runPage runs the page's commands in order, each with the world its
// step makes and checked by it, passing their arguments through sub first
// (see fromTheRoot). The page and the steps must agree one for one.
func runPage(t *testing.T, path string, cmds []docCommand, steps []docStep, sub func([]string) []string, run docRunner) {
	t.Helper()
	var page, known []string
	for _, c := range cmds {
		page = append(page, fmt.Sprintf("%s # %s", c.words(), c.claim))
	}
	for _, s := range steps {
		known = append(known, fmt.Sprintf("%s # %s", s.words, s.claim))
	}
	require.Equal(t, known, page, "%s's commands and claims are what this test checks: a changed line needs its check changed with it", path)
	for i, c := range cmds {
		runStep(t, path, c, steps[i], sub, run)
		if t.Failed() {
			t.FailNow()
		}
	}
}

// runStep runs one command of a page with its step, naming the page's
// line when the step fails, whether by assert or by require. An export
// runs nothing: its step's check, when set, gets no output and no error.
func runStep(t *testing.T, path string, c docCommand, s docStep, sub func([]string) []string, run docRunner) {
	t.Helper()
	defer func() {
		if t.Failed() {
			t.Errorf("%s:%d does not do what it says (or the world it assumes could not be made): %s", path, c.line, c.text)
		}
	}()
	if s.before != nil {
		s.before()
	}
	if c.export {
		if s.check != nil {
			s.check("", nil)
		}
		return
	}
	args := sub(c.args)
	out, err := run(c.vars, args...)
	t.Logf("%s:%d: %s\n%s(error: %v)", path, c.line, strings.TrimSpace(strings.Join(c.assigns, " ")+fmt.Sprintf(" %q", args)), out, err)
	s.check(out, err)
}

// fromTheRoot makes a page's arguments the test's: the value of each
// --run-id is ids[value] (a run id the map does not have fails the test),
// and a --plan file, named from the repository's root where the page's
// commands are typed, is named from this package's folder.
func fromTheRoot(t *testing.T, ids map[string]string) func([]string) []string {
	return func(args []string) []string {
		t.Helper()
		out := append([]string(nil), args...)
		for i, a := range out {
			require.False(t, strings.HasPrefix(a, "--run-id=") || strings.HasPrefix(a, "--plan="), "write %s V, not %s", strings.Split(a, "=")[0], a)
			if i+1 == len(out) {
				break
			}
			switch a {
			case "--run-id":
				id, ok := ids[out[i+1]]
				require.True(t, ok, "run id %q: the test has no run of its own for it", out[i+1])
				out[i+1] = id
			case "--plan":
				require.False(t, filepath.IsAbs(out[i+1]), "--plan %s: a page names files from the repository's root", out[i+1])
				out[i+1] = filepath.Join("..", "..", out[i+1])
			}
		}
		return out
	}
}

// shellWords splits a command line as a POSIX shell would, for the
// subset a page's commands may use: words separated by blanks, '…'
// taken literally, "…" with \" \\ \$ \` escaped, a backslash outside
// quotes escaping the next character, and a "#" starting a word
// starting the comment, returned trimmed. What the shell would expand
// or redirect ($, `, globs, pipes, lists, redirections, braces, ~) is an
// error, so that a line relying on it cannot pass for one run as written.
func shellWords(line string) (words []string, comment string, err error) {
	var (
		word    strings.Builder
		inWord  bool
		rs      = []rune(line)
		special = "$`|&;<>()*?[]{}~"
	)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		case r == '#' && !inWord:
			return words, strings.TrimSpace(string(rs[i+1:])), nil
		case r == '\'':
			end := strings.IndexRune(string(rs[i+1:]), '\'')
			if end < 0 {
				return nil, "", fmt.Errorf("unterminated ' at column %d", i+1)
			}
			lit := []rune(string(rs[i+1:])[:end])
			word.WriteString(string(lit))
			i += len(lit) + 1
			inWord = true
		case r == '"':
			j := i + 1
			for ; j < len(rs) && rs[j] != '"'; j++ {
				switch {
				case rs[j] == '\\' && j+1 < len(rs) && strings.ContainsRune("\"\\$`", rs[j+1]):
					j++
					word.WriteRune(rs[j])
				case rs[j] == '$' || rs[j] == '`':
					return nil, "", fmt.Errorf("%c at column %d: the shell would expand it", rs[j], j+1)
				default:
					word.WriteRune(rs[j])
				}
			}
			if j == len(rs) {
				return nil, "", fmt.Errorf(`unterminated " at column %d`, i+1)
			}
			i = j
			inWord = true
		case r == '\\':
			if i+1 == len(rs) {
				return nil, "", fmt.Errorf("a line continued with \\ at column %d", i+1)
			}
			i++
			word.WriteRune(rs[i])
			inWord = true
		case strings.ContainsRune(special, r) || unicode.IsControl(r):
			return nil, "", fmt.Errorf("%q at column %d: the shell would not pass it as written", r, i+1)
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, word.String())
	}
	return words, "", nil
}

func TestShellWordsSplitsAsTheShellDoes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line    string
		words   []string
		comment string
	}{
		{`./oncerun status --tenant acme   # steps 1-2 done`, []string{"./oncerun", "status", "--tenant", "acme"}, "steps 1-2 done"},
		{`a --result '{"id":"re_123"}' --note "in the provider's dashboard"`, []string{"a", "--result", `{"id":"re_123"}`, "--note", "in the provider's dashboard"}, ""},
		{`a "x\"y\\z" 'a b'c d\ e`, []string{"a", `x"y\z`, "a bc", "d e"}, ""},
		{`a b#c "#d" # e # f`, []string{"a", "b#c", "#d"}, "e # f"},
		{`a --spend EUR=50000 ''`, []string{"a", "--spend", "EUR=50000", ""}, ""},
	} {
		words, comment, err := shellWords(tc.line)
		require.NoError(t, err, tc.line)
		assert.Equal(t, tc.words, words, tc.line)
		assert.Equal(t, tc.comment, comment, tc.line)
	}
	for _, line := range []string{`a 'b`, `a "b`, `a $HOME`, `a "$HOME"`, "a `b`", `a | b`, `a > f`, `a; b`, `a *.json`, `a ~/x`, `a {b,c}`, `a \`} {
		_, _, err := shellWords(line)
		assert.Error(t, err, line)
	}
}

func TestParseCommandsReadsExportsAndAssignments(t *testing.T) {
	t.Parallel()
	cmds := parseCommands(t, "page.md", []string{
		"export A=1 B='two words'   # the environment",
		"A=3 ./oncerun tools --json # lists",
		"    # every tool",
		"./oncerun-dev dev",
		"./oncerun status --run-id r1",
	}, 10, "./oncerun", func(l string) bool { return runsProgram(l, "./oncerun-dev") })
	require.Len(t, cmds, 3)
	assert.Equal(t, docCommand{line: 10, text: cmds[0].text, export: true, assigns: []string{"A=1", "B=two words"}, claim: "the environment"}, cmds[0])
	assert.Equal(t, "export A=1 B=two words", cmds[0].words())
	assert.Equal(t, docCommand{line: 11, text: cmds[1].text, assigns: []string{"A=3"}, args: []string{"tools", "--json"},
		vars: map[string]string{"A": "3", "B": "two words"}, claim: "lists every tool"}, cmds[1])
	assert.Equal(t, "A=3 tools", cmds[1].words())
	assert.Equal(t, map[string]string{"A": "1", "B": "two words"}, cmds[2].vars, "an export holds for every command below it")
	assert.Equal(t, 14, cmds[2].line)
}
