package cli

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/worker"
)

func newToolsCmd(env Env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "tools [--json]",
		Short: "List every tool the workers register, with its source and guarantees",
		Long: `List every tool of the deployment's registry, as its workers build it: the
built-in tools, the deployment's own, and the tools of the MCP servers that
ONCERUN_MCP_CONFIG lists (the command connects to each server and asks it
for its tools), and the sub-agents of ONCERUN_AGENTS_CONFIG (agent_<name>,
class delegate, with the tools their child runs are granted). For each: where it comes from, its effect class, its
approval rule, what it guarantees (once, or at-least-once for an external
effect whose provider neither honours the idempotency key nor can be
asked), its paired read, and what an approver may edit.

After the table comes the registry's digest (its first 12 hex characters):
the fingerprint of everything above, the same as the worker's of this
configuration logs at start, carries in its Temporal identity and serves
on /metrics (oncerun_worker_registry_info).

--json prints an array of objects with name, description, source
(built-in, deployment, mcp or agents), server, server_tool and transport
(MCP tools), class, approval, guarantee, paired_read, idempotency_key,
edits, once_per_run, for an MCP tool class_from, approval_from (configuration,
annotation, default or unlisted), hints (the server's annotations),
warnings, key_claim (declared, verified or unverified: what the claim
that the server honours the key rests on), task_support (the tool's
execution.taskSupport) and tasks (its calls run as MCP tasks), and for a
sub-agent grant, and on every object registry_digest (the whole
registry's digest, full hex: the same on each object) and digest (the
tool's own definition's), so that a diff of two workers' outputs shows
which tools differ. A class or approval the configuration does not set
is shown with where it came from: "read (annotation)", "always (default)".
A configured property that contradicts a server's annotation, and a tool
annotated both readOnlyHint and destructiveHint: true (taken as not
read-only), are warned of on standard error, and so are an optional MCP
server that is down and each tool of an optional server left out (names
that collide once normalised, a description or input schema past its
bound), with why: the workers leave them out too.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, _, err := env.WorkerConfig()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), mcpListTimeout)
			defer cancel()
			cfg, closeMCP, err := worker.WithMCP(ctx, cfg)
			if err != nil {
				return err
			}
			defer closeMCP()
			list, err := worker.Describe(cfg)
			if err != nil {
				return err
			}
			for _, t := range list {
				for _, w := range t.Warnings {
					fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+w)
				}
			}
			for _, n := range worker.MCPNotices(cfg) {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+n)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(out, list)
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOOL\tSOURCE\tCLASS\tAPPROVAL\tGUARANTEE\tPAIRED READ\tEDITS")
			for _, t := range list {
				source := t.Source
				switch {
				case t.Server != "":
					source = fmt.Sprintf("mcp %s (%s, tool %s)", t.Server, t.Transport, t.ServerTool)
				case t.Grant != nil:
					source = "agents (grant: " + strings.Join(t.Grant, ", ") + ")"
				}
				class, approval := t.Class, t.Approval
				if t.ClassFrom != "" && t.ClassFrom != "configuration" {
					class += " (" + t.ClassFrom + ")"
				}
				if t.ApprovalFrom != "" && t.ApprovalFrom != "configuration" {
					approval += " (" + t.ApprovalFrom + ")"
				}
				guarantee := cmp.Or(t.Guarantee, "-")
				if t.KeyClaim != "" {
					guarantee += " (key " + t.KeyClaim + ")"
				}
				if t.Hints["idempotentHint"] && !t.Hints["readOnlyHint"] {
					guarantee += " (idempotentHint)"
				}
				if t.Tasks {
					guarantee += " (runs as a task)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, source, class, approval,
					guarantee, cmp.Or(t.PairedRead, "-"), t.Edits)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(list) > 0 {
				d := list[0].RegistryDigest
				fmt.Fprintf(out, "registry digest: %s\n", d[:min(12, len(d))])
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}
