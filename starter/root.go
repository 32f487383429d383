package main

import (
	"github.com/spf13/cobra"
)

// newRootCmd builds the oncerun command tree.
func newRootCmd(env environment) *cobra.Command {
	root := &cobra.Command{
		Use:           "oncerun",
		Short:         "oncerun runs AI agent runs whose side effects happen once",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(newMigrateCmd(env))
	return root
}
