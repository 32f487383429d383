package activities

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/metrics"
	"github.com/oncerun/oncerun/internal/planner"
)

// The types of [Activities]' dependencies, for a deployment that builds its
// own worker from these activities instead of running package worker's.

// Store is the dedup store every keyed call goes through.
type Store = idempotency.Store

// StoreConfig configures a [Store].
type StoreConfig = idempotency.Config

// NewStore returns a dedup store on pool.
func NewStore(pool *pgxpool.Pool, cfg StoreConfig) (*Store, error) { return idempotency.New(pool, cfg) }

// Metrics counts tool calls by tool and outcome.
type Metrics = metrics.Metrics

// NewMetrics registers oncerun's tool-call metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics { return metrics.New(reg) }

// Planner proposes the next tool calls of a run; Next must have no side
// effects, for it may be called again for the same turn.
type Planner = planner.Planner

// PlanRequest is what a [Planner] is asked: the goal, the tools and what
// became of the calls so far.
type PlanRequest = planner.Request

// PlanProposal is a [Planner]'s answer: the next calls, or done.
type PlanProposal = planner.Proposal

// Observation is one earlier call of a run and what became of it.
type Observation = planner.Observation

// Outcome is what became of a proposed call.
type Outcome = planner.Outcome
