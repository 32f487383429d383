package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/tools"
)

// mcpFound is what WithMCP found.
type mcpFound struct {
	sources map[string]mcp.Source
	skipped []mcp.SkippedServer
	leftOut []mcp.LeftOutTool
}

// WithMCP connects to the MCP servers cfg.MCPConfig lists, and returns cfg
// with their tools added to Tools (and MCPConfig cleared, so that nothing
// connects twice) and a function that closes the servers' sessions, which
// the tools need for their calls. Without MCPConfig it returns cfg as it
// is. Every entry point that builds a registry goes through it: a
// configuration whose MCP servers were not asked is refused by [Registry],
// so that no plan is checked against a registry without their tools.
func WithMCP(ctx context.Context, cfg Config) (Config, func() error, error) {
	none := func() error { return nil }
	if cfg.MCPConfig == "" {
		return cfg, none, nil
	}
	mc, err := mcp.LoadConfig(cfg.MCPConfig)
	if err != nil {
		return Config{}, none, fmt.Errorf("%s: %w", settings.EnvMCPConfig, err)
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	builtIn, err := allTools(cfg)
	if err != nil {
		return Config{}, none, err
	}
	own := make([]string, len(builtIn))
	for i, t := range builtIn {
		own[i] = t.Name
	}
	found, err := mcp.Load(ctx, mc, mcp.Options{Log: log.Named("mcp"), Probe: cfg.probeMCP, Reserved: own})
	if err != nil {
		return Config{}, none, fmt.Errorf("%s %s: %w", settings.EnvMCPConfig, cfg.MCPConfig, err)
	}
	for _, name := range slices.Sorted(maps.Keys(found.Sources)) {
		if src := found.Sources[name]; src.KeyClaim == mcp.KeyVerified {
			log.Info("MCP tool's idempotency claim verified by its probe: a second call under one key was answered as the first",
				zap.String("tool", name), zap.String("server", src.Server))
		}
	}
	for _, w := range found.Warnings {
		log.Warn("MCP annotation contradicted: "+w, zap.String("config", cfg.MCPConfig))
	}
	for _, s := range found.Skipped {
		log.Error("MCP server down at start: its tools are left out of the registry until the worker restarts",
			zap.String("server", s.Name), zap.Error(s.Err))
	}
	for _, l := range found.LeftOut {
		log.Error("MCP tool of an optional server left out of the registry until the worker restarts",
			zap.String("server", l.Server), zap.String("server_tool", l.Tool), zap.String("tool", l.Name),
			zap.String("reason", l.Reason), zap.Error(l.Err))
	}
	cfg.Tools = slices.Concat(cfg.Tools, found.Tools)
	cfg.MCPConfig = ""
	cfg.mcp = &mcpFound{sources: found.Sources, skipped: found.Skipped, leftOut: found.LeftOut}
	return cfg, found.Close, nil
}

// errMCPNotAsked reports a configuration whose MCP servers were never
// asked for their tools.
var errMCPNotAsked = errors.New("the MCP servers' tools were not loaded (worker.WithMCP)")

// mcpDiscovered refuses a configuration that names MCP servers whose tools
// were not loaded.
func (c Config) mcpDiscovered() error {
	if c.MCPConfig != "" {
		return fmt.Errorf("%s %s: %w", settings.EnvMCPConfig, c.MCPConfig, errMCPNotAsked)
	}
	return nil
}

// skippedGauge is oncerun_mcp_server_skipped{server}: 1 for each optional
// MCP server that was down when the worker started, whose tools the worker
// does not offer.
func (f *mcpFound) skippedGauge() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "oncerun_mcp_server_skipped",
		Help: "1 for each optional MCP server that was down when the worker started: its tools are not offered until a restart.",
	}, []string{"server"})
	if f != nil {
		for _, s := range f.skipped {
			g.WithLabelValues(s.Name).Set(1)
		}
	}
	return g
}

// leftOutCounter is oncerun_mcp_tools_left_out_total{server,reason}: the
// tools of optional MCP servers left out at the worker's start, by server
// and reason (see the mcp.Reason constants).
func (f *mcpFound) leftOutCounter() prometheus.Collector {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "oncerun_mcp_tools_left_out_total",
		Help: "Tools of optional MCP servers left out at the worker's start, by server and reason (name_collision, name_too_long, description_too_long, schema_too_large, paired_left_out, not_offered, invalid).",
	}, []string{"server", "reason"})
	if f != nil {
		for _, l := range f.leftOut {
			c.WithLabelValues(l.Server, l.Reason).Inc()
		}
	}
	return c
}

// MCPNotices says, a line each, which optional MCP servers of cfg were
// down and which tools of optional servers were left out, and why, for
// `oncerun tools` to print: a worker logs them as errors.
func MCPNotices(cfg Config) []string {
	if cfg.mcp == nil {
		return nil
	}
	var out []string
	for _, s := range cfg.mcp.skipped {
		out = append(out, fmt.Sprintf("MCP server %s is down; its tools are left out: %v", s.Name, s.Err))
	}
	for _, l := range cfg.mcp.leftOut {
		out = append(out, fmt.Sprintf("tool %q of MCP server %s is left out (%s): %v", l.Tool, l.Server, l.Reason, l.Err))
	}
	return out
}

// ToolInfo describes a registered tool for `oncerun tools`.
type ToolInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Source is "built-in", "deployment" (the deployment's own Go tools)
	// or "mcp".
	Source string `json:"source"`
	// Server and ServerTool name the MCP server and the tool's name there.
	Server     string `json:"server,omitempty"`
	ServerTool string `json:"server_tool,omitempty"`
	Transport  string `json:"transport,omitempty"`
	Class      string `json:"class"`
	Approval   string `json:"approval"`
	// ClassFrom and ApprovalFrom, for an MCP tool, say where its class and
	// approval come from: "configuration", "annotation" (the server's
	// readOnlyHint or destructiveHint), "default" (the specification's:
	// external, destructive) or, for approval, "unlisted".
	ClassFrom    string `json:"class_from,omitempty"`
	ApprovalFrom string `json:"approval_from,omitempty"`
	// Hints, for an MCP tool its server annotates, are the annotations
	// oncerun reads, by their MCP names (readOnlyHint, destructiveHint,
	// idempotentHint), destructiveHint true where the server left it out.
	Hints map[string]bool `json:"hints,omitempty"`
	// Warnings name each configured property of the tool that contradicts
	// its server's annotation; the configuration is followed.
	Warnings []string `json:"warnings,omitempty"`
	// Guarantee is "once" or "at-least-once" for tools with an effect.
	Guarantee  string `json:"guarantee,omitempty"`
	PairedRead string `json:"paired_read,omitempty"`
	// IdempotencyKey says the provider deduplicates by the key oncerun
	// sends (a key lifetime is declared).
	IdempotencyKey bool `json:"idempotency_key"`
	// KeyClaim, for an MCP tool whose server is taken to honour the key,
	// says on what that rests: "declared" (the server declares SEP-3182's
	// tools.idempotency), "verified" (the probe at start) or "unverified"
	// (the configuration's word alone).
	KeyClaim string `json:"key_claim,omitempty"`
	// TaskSupport, for an MCP tool, is its execution.taskSupport as its
	// server lists it (optional, required or forbidden); Tasks says its
	// calls run as MCP tasks, followed to their end across workers.
	TaskSupport string `json:"task_support,omitempty"`
	Tasks       bool   `json:"tasks,omitempty"`
	Edits       string `json:"edits"`
	OncePerRun  bool   `json:"once_per_run"`
	// Grant, for a sub-agent's tool (source "agents", class delegate), is
	// what its child run may use, less what its parent may not.
	Grant []string `json:"grant,omitempty"`
	// RegistryDigest is the digest of the whole registry (the same on
	// every tool), and Digest the tool's own definition's, full hex: two
	// workers whose RegistryDigest differs differ in the tools whose
	// Digest does (see [tools.Registry.Digest]).
	RegistryDigest string `json:"registry_digest"`
	Digest         string `json:"digest"`
}

// Describe lists the tools of cfg's registry, sorted by name, with where
// each comes from, then the sub-agents' tools (agent_<name>), each with
// the registry's digest and its own, as a worker of cfg computes them.
func Describe(cfg Config) ([]ToolInfo, error) {
	reg, err := toolRegistry(cfg)
	if err != nil {
		return nil, err
	}
	set, err := agentSet(cfg, func(tool string) bool { _, ok := reg.Lookup(tool); return ok })
	if err != nil {
		return nil, err
	}
	planReg, err := planRegistry(reg, set)
	if err != nil {
		return nil, err
	}
	digest, err := registryDigest(planReg, set, cfg.mcp)
	if err != nil {
		return nil, err
	}
	own := map[string]bool{}
	for _, t := range cfg.Tools {
		own[t.Name] = true
	}
	var out []ToolInfo
	for _, name := range reg.Names() {
		t, _ := reg.Lookup(name)
		info := ToolInfo{
			Name: t.Name, Description: t.Description, Source: "built-in", Class: string(t.Class),
			Approval: t.Approval.String(), PairedRead: t.PairedRead, IdempotencyKey: t.KeyLifetime > 0,
			Edits: t.Edits.String(), OncePerRun: t.OncePerRun(),
			RegistryDigest: digest.Registry, Digest: digest.Tools[name],
		}
		if t.Class != tools.ClassRead {
			info.Guarantee = t.Guarantee()
		}
		if own[name] {
			info.Source = "deployment"
		}
		if cfg.mcp != nil {
			if src, ok := cfg.mcp.sources[name]; ok {
				info.Source, info.Server, info.ServerTool, info.Transport = "mcp", src.Server, src.Tool, src.Transport
				info.ClassFrom, info.ApprovalFrom, info.Warnings = src.ClassFrom, src.ApprovalFrom, src.Warnings
				info.KeyClaim, info.TaskSupport, info.Tasks = src.KeyClaim, src.TaskSupport, src.Tasks
				if h := src.Hints; h.Annotated {
					info.Hints = map[string]bool{"readOnlyHint": h.ReadOnly, "destructiveHint": h.Destructive, "idempotentHint": h.Idempotent}
				}
			}
		}
		out = append(out, info)
	}
	for _, name := range set.Names() {
		a, _ := set.Lookup(name)
		out = append(out, ToolInfo{Name: name, Description: a.Description, Source: "agents", Class: string(activities.ClassDelegate),
			Approval: tools.ApprovalRule{}.String(), Guarantee: tools.GuaranteeOnce, Edits: tools.EditForbidden.String(), Grant: a.Tools,
			RegistryDigest: digest.Registry, Digest: digest.Tools[name]})
	}
	return out, nil
}
