package events

import (
	"context"
	"fmt"

	"github.com/oncerun/oncerun/internal/idempotency"
)

// pruneEndedSQL removes the logs of the root runs of runs ($1 tenants, $2
// run ids) whose root has ended and holds no key any more: their events,
// their heads and the index rows of their trees.
var pruneEndedSQL = `
WITH cand AS (
    SELECT DISTINCT d.t AS tenant, oncerun_root_run(d.r) AS root FROM unnest($1::text[], $2::text[]) AS d(t, r)
), ended AS (
    SELECT c.tenant, c.root FROM cand c
    JOIN run_index i ON i.tenant = c.tenant AND i.run_id = c.root
    WHERE i.state IN ('completed', 'failed', 'cancelled')
      AND ` + fmt.Sprintf(idempotency.RunHoldsNoKeySQL, "c.root", "c.tenant") + `
), ev AS (
    DELETE FROM run_events e USING ended WHERE e.tenant = ended.tenant AND e.root_run_id = ended.root RETURNING 1
), heads AS (
    DELETE FROM run_event_heads h USING ended WHERE h.tenant = ended.tenant AND h.root_run_id = ended.root
), runs AS (
    DELETE FROM run_index i USING ended WHERE i.tenant = ended.tenant AND i.root_run_id = ended.root
)
SELECT count(*) FROM ev`

// PruneEnded removes, with the keys the watchdog prunes (docs/watchdog.md),
// the event logs of the root runs of runs (tenants[i], runIDs[i]) that
// have ended and whose own keys are all gone: a run's story is kept as
// long as its keys. It returns how many events it removed.
func PruneEnded(ctx context.Context, q Querier, tenants, runIDs []string) (int64, error) {
	if len(runIDs) == 0 {
		return 0, nil
	}
	var n int64
	if err := q.QueryRow(ctx, pruneEndedSQL, tenants, runIDs).Scan(&n); err != nil {
		return 0, fmt.Errorf("prune the event logs of %d runs: %w", len(runIDs), err)
	}
	return n, nil
}
