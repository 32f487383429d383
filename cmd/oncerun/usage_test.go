package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/starter/oncerun"
)

// TestEveryCommandIsInTheUsageAndTheREADME: each command of the production
// command line is in this command's usage comment and in the README's
// command list, so that neither drifts when a command is added.
func TestEveryCommandIsInTheUsageAndTheREADME(t *testing.T) {
	usage, err := os.ReadFile("main.go")
	require.NoError(t, err)
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	root := oncerun.Command(oncerun.Options{}, func(string) string { return "" })
	var names []string
	for _, c := range root.Commands() {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		names = append(names, c.Name())
		// A command is listed at the start of a line, alone or among
		// others joined by "|" (approve|reject).
		listed := regexp.MustCompile(`(?m)^(//\t)?oncerun (\S+\|)*` + regexp.QuoteMeta(c.Name()) + `(\|\S+)*( |$)`)
		assert.Regexp(t, listed, string(usage), "cmd/oncerun/main.go's usage lacks %s", c.Name())
		assert.Regexp(t, listed, string(readme), "the README's command list lacks %s", c.Name())
	}
	require.Contains(t, names, "resolve", "the root's commands were found")
}

// TestEveryFlagOfTheREADMECommandListExists: each --flag the README's
// command list gives an oncerun command is one that command takes, so
// that the list cannot name a flag that was renamed or never was.
func TestEveryFlagOfTheREADMECommandListExists(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	block := regexp.MustCompile("(?s)### Commands\n\n```\n(.*?)```").FindSubmatch(readme)
	require.NotNil(t, block, "the README has a command list")
	root := oncerun.Command(oncerun.Options{}, func(string) string { return "" })
	// Lines that start with spaces continue the command above them.
	var lines []string
	for _, l := range strings.Split(string(block[1]), "\n") {
		if strings.HasPrefix(l, " ") && len(lines) > 0 {
			lines[len(lines)-1] += " " + l
		} else if l != "" {
			lines = append(lines, l)
		}
	}
	flag := regexp.MustCompile(`--([a-z][a-z0-9-]*)`)
	checked := 0
	for _, l := range lines {
		l, _, _ = strings.Cut(l, "#")
		words := strings.Fields(l)
		if len(words) < 2 || words[0] != "oncerun" {
			continue // oncerun-dev's commands link Temporal's server: not here
		}
		for _, name := range strings.Split(words[1], "|") {
			args := append([]string{name}, words[2:]...)
			cmd, _, err := root.Find(args)
			require.NoError(t, err, "README: %s", l)
			require.NotEqual(t, root, cmd, "README: %s names no command", l)
			for _, m := range flag.FindAllStringSubmatch(l, -1) {
				f := cmd.Flags().Lookup(m[1])
				if f == nil {
					f = cmd.InheritedFlags().Lookup(m[1])
				}
				assert.NotNil(t, f, "README: `oncerun %s` has no flag --%s", cmd.CommandPath(), m[1])
				checked++
			}
		}
	}
	require.Greater(t, checked, 20, "the flags were found")
}

// TestEveryOncerunLineOfTheDocsNamesRealFlags: the same check over every
// shell line of the README and docs/ that runs the production command
// (oncerun, ./oncerun or go run ./cmd/oncerun).
func TestEveryOncerunLineOfTheDocsNamesRealFlags(t *testing.T) {
	docs, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	docs = append(docs, "../../README.md")
	root := oncerun.Command(oncerun.Options{}, func(string) string { return "" })
	start := regexp.MustCompile(`^\s*(?:\$ )?(?:\./oncerun|oncerun|go run \./cmd/oncerun) (.*)$`)
	flag := regexp.MustCompile(`(?:^|\s)--([a-z][a-z0-9-]*)`)
	checked := 0
	for _, doc := range docs {
		text, err := os.ReadFile(doc)
		require.NoError(t, err)
		for _, block := range shellBlocks(string(text)) {
			for _, l := range block {
				m := start.FindStringSubmatch(l)
				if m == nil {
					continue
				}
				rest, _, _ := strings.Cut(m[1], "#")
				rest, _, _ = strings.Cut(rest, "|&")
				words := strings.Fields(rest)
				if len(words) == 0 {
					continue
				}
				for _, name := range strings.Split(words[0], "|") {
					cmd, _, err := root.Find(append([]string{name}, words[1:]...))
					if !assert.NoError(t, err, "%s: %s", doc, l) || !assert.NotEqual(t, root, cmd, "%s: %s names no command", doc, l) {
						continue
					}
					for _, f := range flag.FindAllStringSubmatch(rest, -1) {
						found := cmd.Flags().Lookup(f[1]) != nil || cmd.InheritedFlags().Lookup(f[1]) != nil
						assert.True(t, found, "%s: `oncerun %s` has no flag --%s: %s", doc, cmd.CommandPath(), f[1], l)
						checked++
					}
				}
			}
		}
	}
	require.Greater(t, checked, 20, "the docs' command lines were found")
}

// shellBlocks returns the lines of each fenced block of text that is shell
// (```sh, ```bash, ```shell) or has no language.
func shellBlocks(text string) [][]string {
	var (
		out  [][]string
		cur  []string
		in   bool
		keep bool
	)
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, "```") {
			if in && keep {
				cur = append(cur, l)
			}
			continue
		}
		if in {
			if keep {
				out = append(out, cur)
			}
			in, cur = false, nil
			continue
		}
		lang := strings.TrimSpace(strings.TrimPrefix(l, "```"))
		in, keep = true, lang == "" || lang == "sh" || lang == "bash" || lang == "shell"
	}
	return out
}
