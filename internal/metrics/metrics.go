// Package metrics defines oncerun's Prometheus metrics. A worker builds one
// [Metrics] on its registry and hands it to the activities, and registers a
// [PendingApprovals] beside it, which reads the approvals waiting for a
// decision at each scrape.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a tool call, the values of the outcome label of
// oncerun_tool_calls_total.
const (
	// OutcomeExecuted: the effect ran in this call.
	OutcomeExecuted = "executed"
	// OutcomeReplayed: the key was already completed; the stored result was
	// returned and nothing ran.
	OutcomeReplayed = "replayed"
	// OutcomeDuplicate: another step of the run's tree made the step's
	// intent; nothing was done (package intents).
	OutcomeDuplicate = "duplicate"
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
	// OutcomeAsked: the tool's server asked a person a question before it
	// would complete the call; nothing was completed, and the run waits for
	// an answer.
	OutcomeAsked = "asked"
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
	// ApprovalDeadlineWarnings counts warnings that a step still waits for
	// a decision near its deadline, by tenant, tool and before: how long
	// before the deadline, as Go writes a duration ("24h0m0s", "1h0m0s"),
	// the spelling APPROVAL_DEADLINE_WARNINGS accepts.
	ApprovalDeadlineWarnings *prometheus.CounterVec
	// SpendTotal counts the minor units steps counted against the money
	// limits where their effects committed (a reservation once applied), by
	// tenant, tool and currency.
	SpendTotal *prometheus.CounterVec
	// SpendCapRatio is each cap's share spent (held included) at its last
	// charge on this worker, by tenant and cap.
	SpendCapRatio *prometheus.GaugeVec
	// StepsParked counts steps that waited for approval at a spend limit,
	// by tenant and reason: run_budget, daily_cap or rolling_cap.
	StepsParked *prometheus.CounterVec
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
		ApprovalDeadlineWarnings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncerun_approval_deadline_warnings_total",
			Help: "Warnings that a step still waits for a decision near its approval deadline, by tenant, tool and before (how long before the deadline, e.g. 24h0m0s).",
		}, []string{"tenant", "tool", "before"}),
	}
	m.SpendTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "oncerun_spend_total",
		Help: "Minor units counted against money limits where their effects committed, by tenant, tool and currency.",
	}, []string{"tenant", "tool", "currency"})
	m.SpendCapRatio = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "oncerun_spend_cap_ratio",
		Help: "Share of each spend cap spent, held amounts included, at its last charge.",
	}, []string{"tenant", "cap"})
	m.StepsParked = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "oncerun_steps_parked_total",
		Help: "Steps that waited for approval at a spend limit, by tenant and reason.",
	}, []string{"tenant", "reason"})
	reg.MustRegister(m.ToolCalls, m.KeysPruned, m.KeysExpiredAlive, m.ResolutionsOverdue, m.ApprovalDeadlineWarnings,
		m.SpendTotal, m.SpendCapRatio, m.StepsParked)
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

// ApprovalDeadlineWarning counts a warning that a step of tenant's tool
// still waits for a decision, before its deadline. A nil Metrics counts
// nothing.
func (m *Metrics) ApprovalDeadlineWarning(tenant, tool string, before time.Duration) {
	if m == nil {
		return
	}
	m.ApprovalDeadlineWarnings.WithLabelValues(tenant, tool, before.String()).Inc()
}

// ToolCall counts one attempt of tool with outcome. A nil Metrics counts
// nothing.
func (m *Metrics) ToolCall(tool, outcome string) {
	if m == nil {
		return
	}
	m.ToolCalls.WithLabelValues(tool, outcome).Inc()
}

// Spent counts minor units of currency that tenant's tool counted. A nil
// Metrics counts nothing.
func (m *Metrics) Spent(tenant, tool, currency string, minor int64) {
	if m == nil || minor <= 0 {
		return
	}
	m.SpendTotal.WithLabelValues(tenant, tool, currency).Add(float64(minor))
}

// CapRatio records the share of tenant's cap spent. A nil Metrics records
// nothing.
func (m *Metrics) CapRatio(tenant, cap string, ratio float64) {
	if m == nil {
		return
	}
	m.SpendCapRatio.WithLabelValues(tenant, cap).Set(ratio)
}

// StepParked counts a step of tenant that waited at a limit, for reason.
// A nil Metrics counts nothing.
func (m *Metrics) StepParked(tenant, reason string) {
	if m == nil {
		return
	}
	m.StepsParked.WithLabelValues(tenant, reason).Inc()
}
