package chaos

import (
	"context"
	"fmt"
	"slices"

	"github.com/oncerun/oncerun/internal/keys"
	sandbox "github.com/oncerun/oncerun/internal/sandbox/payments"
	"github.com/oncerun/oncerun/workflows"
)

// The record check holds each run's record (its status, and its receipt
// when it was cancelled) against the destinations, by key, whatever the
// runs' plans and decisions: every effect found at a destination is a
// step of its run that the record says is done, and every step the record
// says is done has its effect at its destination. An effect that a worker
// made and another worker then recorded as refused, cancelled, rejected
// or a duplicate is found here, as is a step recorded done whose effect
// is nowhere.

// landed is one effect found at its destination, under the key of the
// step that made it.
type landed struct {
	where, key string
}

// recorded is a step of a run's record.
type recorded struct {
	runID string
	step  workflows.Step
}

// records indexes the ended runs' steps, their child runs' included, by
// key.
func (h *harness) records() map[string]recorded {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]recorded{}
	add := func(st workflows.Status) {
		for _, s := range st.Steps {
			if s.Key != "" {
				out[s.Key] = recorded{runID: st.RunID, step: s}
			}
		}
	}
	for _, end := range h.ended {
		add(end.status)
		for _, c := range end.children {
			add(c)
		}
	}
	return out
}

// destinations reads every effect the runs' tools can make where it
// lands: notes and credits in the business tables, refunds in the
// provider's ledger, and, in deploy mode, tickets and vouchers in the
// desk's ledger.
func (h *harness) destinations(ctx context.Context, refunds []sandbox.Refund) ([]landed, error) {
	var out []landed
	for table, where := range map[string]string{"order_notes": "note", "credits": "credit"} {
		rows, err := h.pool.Query(ctx, "SELECT idempotency_key FROM "+table+" WHERE tenant = $1", tenant)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				rows.Close()
				return nil, err
			}
			out = append(out, landed{where, k})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	for _, r := range refunds {
		out = append(out, landed{"refund", r.IdempotencyKey})
	}
	if h.desk != nil {
		tickets, vouchers, err := h.deskLedger()
		if err != nil {
			return nil, err
		}
		for _, t := range tickets {
			out = append(out, landed{"ticket", t.Key})
		}
		for _, v := range vouchers {
			out = append(out, landed{"voucher", v.Key})
		}
	}
	slices.SortFunc(out, func(a, b landed) int {
		if a.key < b.key {
			return -1
		}
		if a.key > b.key {
			return 1
		}
		return 0
	})
	return out, nil
}

// destinationOf is where a step of tool lands, or "" for a tool whose
// effect the harness does not look for (a read, a delegation).
func destinationOf(tool string) string {
	switch tool {
	case "add_order_note":
		return "note"
	case "issue_credit":
		return "credit"
	case "refund_payment":
		return "refund"
	case deskTicket:
		return "ticket"
	case deskVoucher:
		return "voucher"
	}
	return ""
}

// checkRecords counts and names what the records and the destinations
// disagree on (see compareRecords).
func (h *harness) checkRecords(ctx context.Context, refunds []sandbox.Refund) error {
	found, err := h.destinations(ctx, refunds)
	if err != nil {
		return err
	}
	rc := compareRecords(found, h.records())
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts.NotInRecord += rc.missing
	h.counts.TwiceUnderKey += rc.twice
	h.counts.RecordedNotFound += rc.absent
	h.counts.violations = append(h.counts.violations, rc.violations...)
	return nil
}

// recordCheck is what compareRecords found.
type recordCheck struct {
	// missing counts effects their run's record does not name as a step
	// done, twice effects found again under a key that made one, absent
	// steps recorded done whose effect is nowhere.
	missing, twice, absent int
	violations             []string
}

// compareRecords holds the effects found, sorted by key, against the
// runs' records, by key.
func compareRecords(found []landed, recs map[string]recorded) recordCheck {
	var rc recordCheck
	seen := map[string]int{}
	for _, l := range found {
		seen[l.key]++
		if seen[l.key] == 2 {
			rc.twice++
			rc.violations = append(rc.violations, fmt.Sprintf("%s under key %s: made twice", l.where, l.key))
		}
		if seen[l.key] > 1 {
			continue
		}
		r, ok := recs[l.key]
		switch {
		case !ok:
			rc.missing++
			run := "an unknown run"
			if k, err := keys.Parse(l.key); err == nil {
				run = "run " + k.RunID
			}
			rc.violations = append(rc.violations, fmt.Sprintf("%s under key %s: in no step of %s's record", l.where, l.key, run))
		case r.step.State != workflows.StepDone:
			rc.missing++
			rc.violations = append(rc.violations, fmt.Sprintf("%s under key %s exists, but run %s records step %d %s: %s",
				l.where, l.key, r.runID, r.step.Step, r.step.State, r.step.Error))
		}
	}
	for key, r := range recs {
		where := destinationOf(r.step.Tool)
		if where == "" || r.step.State != workflows.StepDone || seen[key] > 0 {
			continue
		}
		rc.absent++
		rc.violations = append(rc.violations, fmt.Sprintf("run %s step %d %s is recorded done, but no %s is under its key %s",
			r.runID, r.step.Step, r.step.Tool, where, key))
	}
	slices.Sort(rc.violations)
	return rc
}
