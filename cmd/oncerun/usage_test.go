package main

import (
	"os"
	"regexp"
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
