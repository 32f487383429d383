package worker

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/oncerun/oncerun/internal/agents"
	"github.com/oncerun/oncerun/internal/deployment"
	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/tools"
)

// mcpDefinition is what a worker knows of an MCP tool beyond its
// registry's definition: where it comes from and what its server says of
// it. What the probe at start verified (the key claim) is left out: the
// CLI does not probe, and its digest must be the worker's.
type mcpDefinition struct {
	Server      string    `json:"server"`
	ServerTool  string    `json:"server_tool"`
	Transport   string    `json:"transport"`
	Hints       mcp.Hints `json:"hints"`
	TaskSupport string    `json:"task_support"`
	Tasks       bool      `json:"tasks"`
}

// agentDefinition is what a worker knows of a sub-agent's tool beyond its
// schema: what its child runs may do and the bounds on delegation.
type agentDefinition struct {
	Grant       []string      `json:"grant"`
	Planner     string        `json:"planner"`
	Model       string        `json:"model"`
	Limits      agents.Limits `json:"limits"`
	MaxDepth    int           `json:"max_depth"`
	MaxChildren int           `json:"max_children"`
}

// registryDigest is the digest of a worker's registry: planReg, its tools
// and its sub-agents' (planRegistry), each MCP tool with its server, the
// tool's name there, the transport, the server's annotations and the
// tool's task support, and each sub-agent's tool with its grant, planner,
// model and limits and the bounds on delegation (max depth and max
// children). It is the one place the digest is computed: a worker's start
// log, /metrics, identity and default build ID and `oncerun tools` all
// take it from here.
func registryDigest(planReg *tools.Registry, set *agents.Set, found *mcpFound) (tools.Digest, error) {
	maxDepth, maxChildren := set.Bounds()
	d, err := planReg.Digest(func(name string) any {
		if found != nil {
			if src, ok := found.sources[name]; ok {
				return mcpDefinition{Server: src.Server, ServerTool: src.Tool, Transport: src.Transport,
					Hints: src.Hints, TaskSupport: src.TaskSupport, Tasks: src.Tasks}
			}
		}
		if a, ok := set.Lookup(name); ok {
			return agentDefinition{Grant: a.Tools, Planner: a.Planner, Model: a.Model, Limits: a.Limits,
				MaxDepth: maxDepth, MaxChildren: maxChildren}
		}
		return nil
	})
	if err != nil {
		return tools.Digest{}, fmt.Errorf("registry digest: %w", err)
	}
	return d, nil
}

// registryInfo is oncerun_worker_registry_info: 1, labelled with the
// worker's short registry digest and, when it is versioned, its build ID
// and deployment.
func registryInfo(d tools.Digest, v Versioning) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "oncerun_worker_registry_info",
		Help: "1, labelled with the worker's registry digest (its first 12 hex characters) and, for a versioned worker, its Worker Deployment and build ID.",
	}, []string{"digest", "build_id", "deployment"})
	g.WithLabelValues(d.Short(), v.BuildID, v.DeploymentName).Set(1)
	return g
}

// workerIdentity is the worker's Temporal identity: Temporal's usual
// <pid>@<host>@, with the worker's short registry digest after the last @
// (deployment.Identity).
func workerIdentity(d tools.Digest) string { return deployment.Identity(d.Short()) }
