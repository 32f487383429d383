package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/workflows"
)

var discard = slog.New(slog.DiscardHandler)

// shake runs the fault window and the settling that follows it, then
// checks.
func (h *harness) shake(ctx context.Context) (*Report, error) {
	h.mu.Lock()
	h.windowStart = time.Now()
	h.mu.Unlock()
	faultCtx, stopFaults := context.WithTimeout(ctx, h.cfg.Duration)
	defer stopFaults()
	driveCtx, stopDriving := context.WithCancel(ctx)
	defer stopDriving()

	var drivers, faults sync.WaitGroup
	for _, w := range h.workers {
		drivers.Go(func() { w.keepUp(driveCtx) })
	}
	drivers.Go(func() { h.startRuns(driveCtx) })
	if h.cfg.DailyCap > 0 {
		drivers.Go(func() { h.startMisspelt(driveCtx) })
	}
	drivers.Go(func() { h.decide(driveCtx) })
	faults.Go(func() { h.killWorkers(faultCtx) })
	faults.Go(func() { h.restartTemporal(faultCtx) })
	faults.Go(func() { h.restartPostgres(faultCtx) })
	faults.Go(func() { h.injectFaults(faultCtx) })
	faults.Go(func() { h.rollDeploys(faultCtx) })
	faults.Go(func() { h.netFaults(faultCtx) })

	faults.Go(func() {
		for {
			select {
			case <-faultCtx.Done():
				return
			case <-time.After(time.Minute):
				h.say("%s", h.countLine())
			}
		}
	})
	faults.Wait()
	h.mu.Lock()
	h.faultsOver = time.Now()
	h.mu.Unlock()
	h.say("faults over: %s", h.countLine())
	settled := h.awaitEnds(ctx, time.Now().Add(h.cfg.Settle))
	stopDriving()
	drivers.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if !settled {
		h.say("not every run ended within %s of the last fault", h.cfg.Settle)
	}
	// Nothing may be left behind: no transaction left open, and what the
	// workers hold is read against what they held before the network
	// faults.
	h.sampleUsage(ctx, false)
	stuck, err := h.idleInTransaction(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range stuck {
		h.violate("%s", s)
	}
	rep, err := h.check(ctx)
	if err != nil {
		return nil, err
	}
	rep.Network = h.network(len(stuck))
	return rep, nil
}

// retry calls f until it reports done or ctx ends, waiting between tries.
func retry(ctx context.Context, every time.Duration, f func() bool) bool {
	for {
		if f() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(every):
		}
	}
}

// startRuns starts each run through the API at its moment. A start is
// retried until the API answers 201 or 200 (the run exists): the run id
// makes it idempotent.
func (h *harness) startRuns(ctx context.Context) {
	var wg sync.WaitGroup
	for _, p := range h.runs {
		wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(p.startAt * float64(h.cfg.Duration))):
			}
			body := approvals.StartRequest{RunID: p.runID, Goal: "chaos: credit and refund order " + p.orderID, Plan: p.calls()}
			retry(ctx, time.Second, func() bool {
				a := h.api.do(ctx, http.MethodPost, "/v1/runs", body)
				switch a.status {
				case http.StatusCreated, http.StatusOK:
					h.mu.Lock()
					h.counts.Started++
					h.mu.Unlock()
					return true
				case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusConflict:
					h.violate("start %s: %s", p.runID, a)
					return true
				}
				return false
			})
		})
	}
	wg.Wait()
}

// startMisspelt tries to start, under a cap, a run of each capped tool
// whose call spells its currency as no currency (misspellings): each must
// be refused at its start, 400 naming the field, and none may land. A run
// the API takes is a violation, and so, at the check, is any amount of it
// at a destination (checkCaps).
func (h *harness) startMisspelt(ctx context.Context) {
	p := h.runs[0]
	for i, code := range misspellings {
		for _, c := range p.calls()[stepCredit-1 : stepRefund] {
			var args map[string]any
			if err := json.Unmarshal(c.Args, &args); err != nil {
				h.violate("misspelt start: %v", err)
				return
			}
			args["currency"] = code
			raw, _ := json.Marshal(args)
			runID := fmt.Sprintf("%s-misspelt-%s-%d", p.runID, c.Tool, i)
			body := approvals.StartRequest{RunID: runID, Goal: "chaos: a currency spelled " + strconv.Quote(code), Plan: []planner.Call{{Tool: c.Tool, Args: raw}}}
			retry(ctx, time.Second, func() bool {
				a := h.api.do(ctx, http.MethodPost, "/v1/runs", body)
				switch {
				case a.status == http.StatusBadRequest && bytes.Contains(a.body, []byte("currency")):
					h.mu.Lock()
					h.misspelt++
					h.mu.Unlock()
					return true
				case a.status != 0 && a.status < 500:
					h.violate("start %s, %s in currency %q: %s, want 400 naming the currency", runID, c.Tool, code, a)
					return true
				}
				return false
			})
		}
	}
}

// decide polls the approvals list and decides each step at a random moment
// within DecideWithin of first seeing it; it answers unknown outcomes from
// the provider's own ledger, and sends again decisions that did not reach
// their run. Each wait of a step is decided on its own: a step that waits
// at a spend limit (approvals kind limit) is always rejected, so that no
// step runs past a cap.
func (h *harness) decide(ctx context.Context) {
	due := map[waitRef]time.Time{}
	for ctx.Err() == nil {
		var pending, needs approvals.ApprovalList
		errP := h.api.get(ctx, "/v1/approvals?state=pending&limit=500", &pending)
		errN := h.api.get(ctx, "/v1/approvals?state=needs_resolution&limit=500", &needs)
		// Why each step waits, read after the lists: a step listed is
		// decided only once its row is seen.
		waits, errW := h.waits(ctx, waitsOpen)
		now := time.Now()
		if errP == nil && errW == nil {
			for _, it := range pending.Approvals {
				ref := stepRef{it.RunID, it.Step}
				w, ok := waits[ref]
				if !ok {
					continue
				}
				key := waitRef{ref, w.round}
				if _, ok := due[key]; !ok {
					due[key] = now.Add(time.Duration(h.float() * float64(h.cfg.DecideWithin)))
				}
				if now.After(due[key]) {
					h.decideStep(ctx, it, w)
				}
			}
		}
		if errN == nil {
			for _, it := range needs.Approvals {
				switch {
				case it.Kind == approvals.KindOutcomeUnknown:
					h.resolveStep(ctx, it, now)
				case it.Decision != nil && errW == nil:
					// Recorded, not delivered: the same decision again
					// sends it again.
					if w, ok := waits[stepRef{it.RunID, it.Step}]; ok {
						h.decideStep(ctx, it, w)
					}
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// decideStep decides the wait w of the step it lists, or sends its
// decision of record again. A wait at a spend limit is rejected. Every
// decision names w's round: one the step has left by then (approved under
// its rule, it now waits at a limit) is refused with round_changed, and
// the next poll decides the wait of the moment, so that an approve meant
// for the rule never becomes an exception.
func (h *harness) decideStep(ctx context.Context, it approvals.Item, w wait) {
	ref := stepRef{it.RunID, it.Step}
	key := waitRef{ref, w.round}
	atLimit := w.kind == approvalstore.KindLimit
	h.mu.Lock()
	d, ok := h.decided[key]
	h.mu.Unlock()
	if it.Decision != nil {
		d, ok = it.Decision.Decision, true // the decision of record, sent again
	}
	switch {
	case atLimit && ok && d != workflows.DecisionReject:
		// The list's decision is of an earlier wait, read before the
		// step waited at the limit: the next poll lists the limit's.
		return
	case atLimit:
		d = workflows.DecisionReject
	case !ok:
		d = workflows.DecisionApprove
		if h.float() < h.cfg.RejectRate {
			d = workflows.DecisionReject
		}
	}
	comment := "chaos harness"
	if atLimit {
		comment = capComment
	}
	verb := map[workflows.Decision]string{workflows.DecisionApprove: "approve", workflows.DecisionReject: "reject"}[d]
	a := h.api.do(ctx, http.MethodPost, fmt.Sprintf("/v1/runs/%s/steps/%d/%s", url.PathEscape(it.RunID), it.Step, verb),
		approvals.DecideRequest{ArgsHash: it.ArgsHash, Comment: comment, Round: w.round})
	if a.status == http.StatusConflict && bytes.Contains(a.body, []byte(`"round_changed"`)) {
		return // the next poll decides what waits then
	}
	switch a.status {
	case http.StatusAccepted, http.StatusOK:
		h.mu.Lock()
		if _, known := h.decided[key]; !known {
			h.decided[key] = d
			h.counts.Decisions++
			if atLimit {
				h.counts.CapRejections++
			}
		}
		h.mu.Unlock()
	case http.StatusConflict, http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound:
		h.violate("decide %s step %d (round %d, %s): %s", it.RunID, it.Step, w.round, w.kind, a)
	}
	// 503 and no answer: the next poll tries again.
}

// resolveStep answers a step whose outcome oncerun could not tell, as a
// person would: from its destination's own ledger (the provider's, the
// desk's), looked up by the key the step was sent under. It waits a few
// seconds first, so that a request the provider still holds (a delay
// fault) has landed.
func (h *harness) resolveStep(ctx context.Context, it approvals.Item, now time.Time) {
	if it.Resolution == nil || now.Sub(it.Resolution.RequestedAt) < 5*time.Second {
		return
	}
	found, ledger, err := h.lookUp(ctx, it.Tool, it.Resolution.Key)
	if err != nil {
		return // read_unavailable, say: later
	}
	body := approvals.ResolveRequest{Outcome: "not_applied", Note: "chaos harness: not in the " + ledger, Round: it.Resolution.Round}
	if found != nil {
		body = approvals.ResolveRequest{Outcome: "applied", Result: found, Note: "chaos harness: in the " + ledger, Round: it.Resolution.Round}
	}
	a := h.api.do(ctx, http.MethodPost, fmt.Sprintf("/v1/runs/%s/steps/%d/resolve", url.PathEscape(it.RunID), it.Step), body)
	switch a.status {
	case http.StatusAccepted:
		h.mu.Lock()
		h.counts.Resolutions++
		h.mu.Unlock()
	case http.StatusOK, http.StatusServiceUnavailable:
	default:
		if a.status != 0 {
			h.violate("resolve %s step %d: %s", it.RunID, it.Step, a)
		}
	}
}

// lookUp finds, in the ledger of the destination of tool, the effect made
// under key, as a person resolving an unknown outcome would: the
// provider's for a refund, the desk's for a ticket or a voucher. It
// returns the effect (nil when there is none) and which ledger it read.
func (h *harness) lookUp(ctx context.Context, tool, key string) (json.RawMessage, string, error) {
	switch tool {
	case deskTicket, deskVoucher:
		tickets, vouchers, err := h.deskLedger()
		if err != nil {
			return nil, "", err
		}
		for _, t := range tickets {
			if t.Key == key {
				raw, err := json.Marshal(t)
				return raw, "desk's ledger", err
			}
		}
		for _, v := range vouchers {
			if v.Key == key {
				raw, err := json.Marshal(v)
				return raw, "desk's ledger", err
			}
		}
		return nil, "desk's ledger", nil
	}
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := h.provider.get(ctx, "/v1/refunds?idempotency_key="+url.QueryEscape(key), &list); err != nil {
		return nil, "", err
	}
	if len(list.Data) > 0 {
		return list.Data[0], "provider's ledger", nil
	}
	return nil, "provider's ledger", nil
}

// awaitEnds polls every run's status through the API until all have ended
// or the deadline passes; it records when each was first seen ended.
func (h *harness) awaitEnds(ctx context.Context, deadline time.Time) bool {
	for {
		open := 0
		for _, p := range h.runs {
			h.mu.Lock()
			_, done := h.ended[p.runID]
			h.mu.Unlock()
			if done {
				continue
			}
			var st workflows.Status
			if err := h.api.get(ctx, "/v1/runs/"+url.PathEscape(p.runID), &st); err != nil ||
				(st.State != workflows.RunCompleted && st.State != workflows.RunFailed) {
				open++
				continue
			}
			children, ok := h.childStatuses(ctx, p)
			if !ok {
				open++
				continue
			}
			h.mu.Lock()
			h.ended[p.runID] = runEnd{at: time.Now(), status: st, children: children}
			h.mu.Unlock()
		}
		if open == 0 {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(2 * time.Second):
		}
	}
}

// childStatuses reads the statuses of p's child runs through the API; ok
// is false when one could not be read now.
func (h *harness) childStatuses(ctx context.Context, p runPlan) (map[int64]workflows.Status, bool) {
	out := map[int64]workflows.Status{}
	for step, child := range p.children() {
		a := h.api.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(child), nil)
		var st workflows.Status
		switch {
		case a.err == nil && a.status == http.StatusNotFound:
		case a.err != nil || a.status != http.StatusOK || json.Unmarshal(a.body, &st) != nil:
			return nil, false
		}
		out[step] = st
	}
	return out, true
}
