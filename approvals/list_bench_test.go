package approvals

import (
	"context"
	"fmt"
	"testing"

	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/runs"
)

// BenchmarkListApprovals measures the approvals list of one tenant among
// 2×rows approvals (a tenant each; a tenth pending, the rest approved
// through the service), one page of 100, against a baseline: the bare query
// of the pending page on the approvals table alone.
func BenchmarkListApprovals(b *testing.B) {
	const rows = 100_000
	ctx := context.Background()
	pool := pgtest.NewPool(b, 4)
	_, err := pool.Exec(ctx, `
INSERT INTO approvals (tenant, run_id, step, tool, args, args_hash, goal, reason, state, requested_at, deadline,
                       decided_by, decided_at, requested_by)
SELECT t, 'r' || g, 1, 'issue_credit', '{"order_id": "1001", "amount_cents": 25900}', repeat('a', 64), 'refund', 'amount',
       CASE WHEN g % 10 = 0 THEN 'pending' ELSE 'approved' END,
       now() - make_interval(secs => g), now() + interval '7 days',
       CASE WHEN g % 10 = 0 THEN NULL ELSE 'dana' END,
       CASE WHEN g % 10 = 0 THEN NULL ELSE now() - make_interval(secs => g) + interval '1 minute' END, 'ops'
FROM generate_series(1, $1) g, unnest(ARRAY['acme', 'other']) t`, rows)
	if err != nil {
		b.Fatal(err)
	}
	_, err = pool.Exec(ctx, `
INSERT INTO approval_decisions (tenant, run_id, step, decision, outcome, args_hash, approver, role, remote_addr, via, decided_at)
SELECT tenant, run_id, step, 'approve', 'accepted', args_hash, 'dana', 'approver', '127.0.0.1', 'api', decided_at
FROM approvals WHERE state = 'approved'`)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE`); err != nil {
		b.Fatal(err)
	}
	s, err := New(Config{Runs: &runs.Client{}, Pool: pool, Tokens: &Tokens{}})
	if err != nil {
		b.Fatal(err)
	}

	b.Run("baseline=bare-pending-query", func(b *testing.B) {
		for b.Loop() {
			r, err := pool.Query(ctx, `
SELECT run_id, step, tool, args, args_hash, goal, reason, requested_by, requested_at, deadline, state
FROM approvals WHERE tenant = $1 AND state = 'pending' ORDER BY requested_at LIMIT 100`, "acme")
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for r.Next() {
				n++
			}
			if r.Err() != nil || n != 100 {
				b.Fatal(n, r.Err())
			}
		}
	})
	for _, view := range []View{ViewPending, ViewDecided, ViewNeedsResolution} {
		b.Run(fmt.Sprintf("view=%s", view), func(b *testing.B) {
			for b.Loop() {
				items, err := s.list(ctx, "acme", ListQuery{View: view, Limit: 100})
				if err != nil {
					b.Fatal(err)
				}
				if (view == ViewNeedsResolution) != (len(items) == 0) {
					b.Fatalf("%s: %d items", view, len(items))
				}
			}
		})
	}
}
