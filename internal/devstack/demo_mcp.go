package devstack

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/internal/sandbox/desk"
	"github.com/oncerun/oncerun/workflows"
)

// deskTicketTool is the demo's MCP tool: the sandbox desk's open_ticket,
// as the worker names it.
var deskTicketTool = mcp.ToolName("desk", "open_ticket")

// startDesk serves the sandbox support desk, an MCP server, over
// Streamable HTTP from the demo process, and writes the MCP configuration
// the workers and the approvals service read: open_ticket honours the
// step's key and find_ticket is its paired read.
func (d *demo) startDesk(ctx context.Context) error {
	dir := filepath.Join(d.dir, "desk")
	r, err := desk.Serve(ctx, "127.0.0.1:0", desk.Config{DataDir: dir})
	if err != nil {
		return err
	}
	d.desk = r
	raw, err := json.MarshalIndent(map[string]any{"servers": []any{map[string]any{
		"name": "desk", "transport": mcp.TransportHTTP, "url": r.URL(),
		"tools": map[string]any{
			"open_ticket": map[string]any{"class": "external", "idempotent": true, "paired_read": "find_ticket"},
			"find_ticket": map[string]any{"class": "read"},
		},
	}}}, "", "  ")
	if err != nil {
		return err
	}
	d.mcpConfig = filepath.Join(d.dir, "mcp.json")
	if err := os.WriteFile(d.mcpConfig, raw, 0o600); err != nil {
		return err
	}
	d.say("   Started a sandbox support desk, an MCP server, on %s (ledger in %s); %s tells the workers about it.",
		r.URL(), dir, d.mcpConfig)
	return nil
}

// verifyTicket checks the MCP step: done, once, and exactly one ticket in
// the desk's own ledger under the step's key.
func (d *demo) verifyTicket(st workflows.Status) {
	var step workflows.Step
	for _, s := range st.Steps {
		if s.Tool == deskTicketTool {
			step = s
		}
	}
	var under []desk.Ticket
	for _, t := range d.desk.Tickets() {
		if t.Key == step.Key {
			under = append(under, t)
		}
	}
	d.check(step.State == workflows.StepDone && step.Guarantee == "once",
		"the MCP step (%s) is done, with the guarantee once: the desk honours the key", step.Tool)
	d.check(len(under) == 1 && len(d.desk.Tickets()) == 1,
		"the desk's own ledger holds exactly one ticket, under the step's key (%d under it, %d in all)", len(under), len(d.desk.Tickets()))
}
