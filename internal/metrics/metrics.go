// Package metrics defines oncerun's Prometheus metrics. A worker builds one
// [Metrics] on its registry and hands it to the activities.
package metrics

import "github.com/prometheus/client_golang/prometheus"

// Outcomes of a tool call, the values of the outcome label of
// oncerun_tool_calls_total.
const (
	// OutcomeExecuted: the effect ran in this call.
	OutcomeExecuted = "executed"
	// OutcomeReplayed: the key was already completed; the stored result was
	// returned and nothing ran.
	OutcomeReplayed = "replayed"
	// OutcomeInFlight: another attempt holds the key's lease; nothing ran and
	// Temporal retries after a backoff.
	OutcomeInFlight = "in_flight"
	// OutcomeKeyReuse: the key was claimed before with other arguments.
	OutcomeKeyReuse = "key_reuse"
	// OutcomeFailed: the tool returned an error.
	OutcomeFailed = "failed"
	// OutcomeInvalid: the call was refused before it ran.
	OutcomeInvalid = "invalid"
	// OutcomeResolved: an earlier attempt's unknown outcome was resolved by
	// the tool's paired read as applied.
	OutcomeResolved = "resolved"
	// OutcomeNeedsResolution: the outcome is unknown and nothing could
	// resolve it; the step waits for a person.
	OutcomeNeedsResolution = "needs_resolution"
)

// Metrics holds oncerun's collectors.
type Metrics struct {
	// ToolCalls counts tool call attempts by tool and outcome.
	ToolCalls *prometheus.CounterVec
	// KeysPruned counts keys of closed runs the watchdog deleted, by tool.
	KeysPruned *prometheus.CounterVec
	// KeysExpiredAlive counts keys whose retention ran out while their run
	// was open, by tool and the policy applied (hold or prune).
	KeysExpiredAlive *prometheus.CounterVec
	// ResolutionsOverdue counts steps still unresolved at their deadline,
	// by tool.
	ResolutionsOverdue *prometheus.CounterVec
}

// New creates the collectors and registers them on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ToolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncerun_tool_calls_total",
			Help: "Tool call attempts by tool and outcome (executed, replayed, in_flight, key_reuse, failed, invalid, resolved, needs_resolution).",
		}, []string{"tool", "outcome"}),
		KeysPruned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncerun_keys_pruned_total",
			Help: "Expired keys of closed runs deleted by the expiry watchdog, by tool.",
		}, []string{"tool"}),
		KeysExpiredAlive: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncerun_key_expired_while_run_alive_total",
			Help: "Keys whose retention ran out while their run was still open, by tool and policy (hold: kept and extended; prune: deleted).",
		}, []string{"tool", "policy"}),
		ResolutionsOverdue: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncerun_resolutions_overdue_total",
			Help: "Steps whose unknown outcome nobody resolved by the deadline, by tool. The run keeps waiting.",
		}, []string{"tool"}),
	}
	reg.MustRegister(m.ToolCalls, m.KeysPruned, m.KeysExpiredAlive, m.ResolutionsOverdue)
	return m
}

// ResolutionOverdue counts a step of tool unresolved at its deadline. A
// nil Metrics counts nothing.
func (m *Metrics) ResolutionOverdue(tool string) {
	if m == nil {
		return
	}
	m.ResolutionsOverdue.WithLabelValues(tool).Inc()
}

// ToolCall counts one attempt of tool with outcome. A nil Metrics counts
// nothing.
func (m *Metrics) ToolCall(tool, outcome string) {
	if m == nil {
		return
	}
	m.ToolCalls.WithLabelValues(tool, outcome).Inc()
}
