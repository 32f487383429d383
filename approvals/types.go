package approvals

import "github.com/oncerun/oncerun/internal/runs"

// Runs starts agent runs, reads their status and signals their decisions,
// through Temporal (and, for the pending-approvals list, PostgreSQL).
type Runs = runs.Client
