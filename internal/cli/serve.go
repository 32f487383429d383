package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/worker"
)

func newServeCmd(env Env) *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Serve the approvals API and web inbox on their own",
		Long: `Serve the approvals service: the JSON API under /v1 and the web inbox at /,
on APPROVALS_ADDR (default ` + approvals.DefaultAddr + `), for the tokens in
APPROVALS_TOKENS_FILE (required). It applies the migrations on DATABASE_URL
and reaches runs through TEMPORAL_ADDRESS; a worker serves the same service
when APPROVALS_TOKENS_FILE is set in its environment. With
ONCERUN_LIMITS_FILE set, it sets that file's spend limits first; a file
that is not valid stops it, naming the limit and the field.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, logLevel, err := env.WorkerConfig()
			if err != nil {
				return err
			}
			if cfg.Logger, err = worker.NewLogger(logLevel, false); err != nil {
				return err
			}
			limits, err := env.LimitsFile()
			if err != nil {
				return err
			}
			if limits != nil {
				if err := limits.applyMigrated(cmd.Context(), cfg.WithDefaults().DatabaseURL, cfg.Logger); err != nil {
					return err
				}
			}
			return worker.Serve(cmd.Context(), cfg)
		},
	}
}

func newTokenCmd() *cobra.Command {
	token := &cobra.Command{
		Use:   "token",
		Short: "Make tokens for the approvals service",
	}
	var (
		id    approvals.Identity
		role  string
		addTo string
	)
	create := &cobra.Command{
		Use:   "new --name N --tenant T --role viewer|approver|operator [--add-to FILE]",
		Short: "Make a fresh token and print it with its tokens-file entry",
		Long: `Make a fresh random token. The token is printed once, on the first line; the
tokens file keeps only its SHA-256, so keep the token somewhere safe. The
second line is the entry to add to the tokens file's JSON array, or, with
--add-to, it is added to that file (created if missing).

Roles: viewer reads; approver also approves and rejects; operator also starts
runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			id.Role = approvals.Role(role)
			tok, entry, err := approvals.NewToken(id)
			if err != nil {
				return err
			}
			if addTo != "" {
				if err := approvals.AppendToken(addTo, entry); err != nil {
					return err
				}
			}
			line, err := json.Marshal(entry)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintln(out, tok)
			fmt.Fprintln(out, string(line))
			if addTo != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "added %s (%s of tenant %s) to %s\n", id.Name, id.Role, id.Tenant, addTo)
			}
			return nil
		},
	}
	f := create.Flags()
	f.StringVar(&id.Name, "name", "", "whose token it is; recorded with their decisions (required)")
	f.StringVar(&id.Tenant, "tenant", "", "the tenant the token may see (required)")
	f.StringVar(&role, "role", "", "viewer, approver or operator (required)")
	f.StringVar(&addTo, "add-to", "", "add the entry to this tokens file")
	for _, name := range []string{"name", "tenant", "role"} {
		_ = create.MarkFlagRequired(name)
	}
	token.AddCommand(create)
	return token
}
