package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/mail"
	"github.com/oncerun/oncerun/internal/payments"
	"github.com/oncerun/oncerun/internal/reconcile"
	sandbox "github.com/oncerun/oncerun/internal/sandbox/payments"
	"github.com/oncerun/oncerun/workflows"
)

func (h *harness) violate(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts.violations = append(h.counts.violations, fmt.Sprintf(format, args...))
}

// check counts every effect where it landed and compares it with what each
// run's decisions call for.
func (h *harness) check(ctx context.Context) (*Report, error) {
	credits, err := h.countRows(ctx, `SELECT order_id, count(*), sum(amount_cents) FROM credits WHERE tenant = $1 GROUP BY order_id`)
	if err != nil {
		return nil, err
	}
	notes, err := h.countRows(ctx, `SELECT order_id, count(*), 0::bigint FROM order_notes WHERE tenant = $1 GROUP BY order_id`)
	if err != nil {
		return nil, err
	}
	var ledger struct {
		Data []sandbox.Refund `json:"data"`
	}
	if err := h.provider.get(ctx, "/v1/refunds?created_gte=0", &ledger); err != nil {
		return nil, fmt.Errorf("read the provider's ledger: %w", err)
	}
	refunds := map[string]tally{}
	for _, r := range ledger.Data {
		t := refunds[r.PaymentID]
		t.n++
		t.sum += r.Amount
		refunds[r.PaymentID] = t
	}
	decided, excepted, err := h.decisionsOfRecord(ctx)
	if err != nil {
		return nil, err
	}
	waits, err := h.waits(ctx, waitsAll)
	if err != nil {
		return nil, err
	}
	var caps *Caps
	if h.cfg.DailyCap > 0 {
		if caps, err = h.capReport(ctx, ledger.Data, waits, decided, excepted); err != nil {
			return nil, err
		}
	}
	delivery, err := h.deliveries(ctx)
	if err != nil {
		return nil, err
	}
	resent, err := h.resendByHand(ctx)
	if err != nil {
		return nil, err
	}
	starts, err := h.childStarts(ctx)
	if err != nil {
		return nil, err
	}
	if err := h.checkRecords(ctx, ledger.Data); err != nil {
		return nil, err
	}
	takeovers, across, err := h.takeovers(ctx)
	if err != nil {
		return nil, err
	}
	var tickets, vouchers map[string]tally
	if h.cfg.Deploy {
		if tickets, vouchers, err = h.deskTallies(); err != nil {
			return nil, err
		}
	}
	mails := map[string]int{}
	for _, m := range h.mail.Messages() {
		for _, to := range m.To {
			mails[strings.ToLower(to)]++
		}
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	c := &h.counts
	c.MailResent = resent
	c.Takeovers, c.AcrossRegistries = takeovers, across
	var lastEnd time.Time
	closed := make([]string, 0, len(h.runs))
	for _, p := range h.runs {
		end, ok := h.ended[p.runID]
		switch {
		case !ok:
			c.violations = append(c.violations, fmt.Sprintf("run %s did not end", p.runID))
		case end.status.State != workflows.RunCompleted:
			c.violations = append(c.violations, fmt.Sprintf("run %s ended %s: %s", p.runID, end.status.State, end.status.Error))
		}
		if ok {
			closed = append(closed, p.runID)
			if end.at.After(lastEnd) {
				lastEnd = end.at
			}
			c.Steps += len(end.status.Steps)
		}
		want := func(step int64) int { return wantOf(p, step, waits, decided) }
		if h.cfg.Deploy {
			// Which registry planned a turn decides what was refused and
			// what waited: each effect must be where its run's record says.
			want = func(step int64) int { return recordedDone(end, step) }
		}
		for step, child := range p.children() {
			id := workflows.WorkflowID(tenant, child)
			c.ChildStarts += starts[id]
			wantStarts := 1
			if h.cfg.Deploy && !namesChild(end, step, child) {
				wantStarts = 0 // the delegation was refused by its worker's registry
			}
			if n := starts[id]; n != wantStarts {
				c.violations = append(c.violations, fmt.Sprintf("child run %s: started %d times in run %s's history, want %d", child, n, p.runID, wantStarts))
			}
		}
		switch {
		case ok && !h.cfg.Deploy:
			c.checkSteps(p, end, want)
		case ok:
			c.countDeploySteps(end)
		}
		c.compare("credit", p.orderID, want(stepCredit), credits[p.orderID], p.creditCents)
		c.compare("note", p.orderID, want(stepNote), notes[p.orderID], 0)
		c.compare("refund", p.paymentID, want(stepRefund), refunds[p.paymentID], p.refundCents)
		if p.desk {
			c.compare("ticket", p.orderID, want(stepTicket), tickets[p.orderID], 0)
			c.compare("voucher", p.orderID, want(stepVoucher), vouchers[p.orderID], 0)
		}
		got := mails[p.email]
		switch wantMail := want(stepCredit); {
		case wantMail == 1 && got == 0:
			c.Lost++
			c.violations = append(c.violations, fmt.Sprintf("e-mail to %s: none", p.email))
		case wantMail == 0 && got > 0:
			c.Duplicates += got
			c.violations = append(c.violations, fmt.Sprintf("e-mail to %s: %d for a credit that was not granted", p.email, got))
		case got > 1 && delivery[p.effect(stepCredit)] == "delivered":
			// A message is sent again only when its acceptance was lost.
			c.MailRepeats += got - 1
			c.violations = append(c.violations, fmt.Sprintf("e-mail to %s: %d, and its delivery was recorded as made once", p.email, got))
		case got > 1:
			c.MailRepeats += got - 1
		}
		if got > 0 {
			c.Mails += got
		}
	}
	inFlight, err := idempotency.CountInFlight(ctx, h.pool, closed)
	if err != nil {
		return nil, err
	}
	if inFlight > 0 {
		c.violations = append(c.violations, fmt.Sprintf("%d dedup keys in flight for closed runs", inFlight))
	}
	c.InFlightKeys = inFlight
	c.CrashPoints = h.crashPoints()
	drift, err := h.reconcile(ctx, mails)
	if err != nil {
		return nil, err
	}
	c.Drift = len(drift)
	c.violations = append(c.violations, drift...)
	for _, w := range h.workers {
		crashes, failures := w.counts()
		c.CrashFaultDeaths += crashes
		for _, f := range failures {
			// A worker may not come up while PostgreSQL or Temporal is
			// down, nor while they settle just after (a Temporal node that
			// came back takes its shards again); past that, it must. A
			// worker that was up never exits by itself.
			if !f.wasUp && f.at.Before(h.faultsOver.Add(startGrace)) {
				c.StartFailures++
				c.StartFailureErrors = append(c.StartFailureErrors, fmt.Sprintf("%s: %v", w.name, f.err))
				continue
			}
			c.violations = append(c.violations, fmt.Sprintf("%s: %v", w.name, f.err))
		}
	}
	c.violations = append(c.violations, h.deadNodes()...)
	if caps != nil {
		over := checkCaps(caps.Cap, caps.Currency, caps.Days)
		caps.Over = len(over)
		c.violations = append(c.violations, over...)
		if want := len(misspellings) * len(capTools); caps.Misspelt != want {
			c.violations = append(c.violations, fmt.Sprintf("%d of %d runs spelling a currency as none were seen refused at their start",
				caps.Misspelt, want))
		}
	}
	rep := &Report{Caps: caps, Counts: *c, Seed: h.cfg.Seed, Temporal: h.cfg.Temporal, Runs: len(h.runs), Ended: len(closed),
		Wall: time.Since(h.start).Round(time.Millisecond).String(), Violations: append([]string(nil), c.violations...)}
	if !lastEnd.IsZero() && !h.lastFault.IsZero() {
		rep.RecoverSeconds = max(0, lastEnd.Sub(h.lastFault).Seconds())
	}
	rep.Resume = h.resume()
	rep.AcrossRegistries = c.AcrossRegistries + rep.Resume.AcrossRegistries
	if h.lb != nil {
		rep.NodeConnections = h.lb.Joined()
		if rep.ShardAcquisitions, err = h.shardAcquisitions(ctx); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// tally is how many of an effect landed and their total amount.
type tally struct {
	n   int
	sum int64
}

func (h *harness) countRows(ctx context.Context, sql string) (map[string]tally, error) {
	rows, err := h.pool.Query(ctx, sql, tenant)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]tally{}
	for rows.Next() {
		var (
			id string
			t  tally
		)
		if err := rows.Scan(&id, &t.n, &t.sum); err != nil {
			return nil, err
		}
		out[id] = t
	}
	return out, rows.Err()
}

// compare checks that an exactly-once effect landed want times (0 or 1),
// with the planned amount when it has one.
func (c *Counts) compare(kind, id string, want int, got tally, amount int64) {
	c.Effects += min(got.n, want)
	switch {
	case got.n > want:
		c.Duplicates += got.n - want
		c.violations = append(c.violations, fmt.Sprintf("%s for %s: %d, want %d", kind, id, got.n, want))
	case got.n < want:
		c.Lost += want - got.n
		c.violations = append(c.violations, fmt.Sprintf("%s for %s: none", kind, id))
	case got.n == 1 && amount != 0 && got.sum != amount:
		c.violations = append(c.violations, fmt.Sprintf("%s for %s: amount %d, want %d", kind, id, got.sum, amount))
	}
}

// reconcile runs a reconciliation pass and does what the docs ask of a
// person for an undelivered e-mail: look in the receiver's mailbox and
// acknowledge the finding when the message is there. It returns every
// finding left open: refunds that differ from the provider's ledger, and
// e-mails that never arrived.
func (h *harness) reconcile(ctx context.Context, mails map[string]int) ([]string, error) {
	pc, err := payments.New(payments.Config{BaseURL: h.sandboxURL, APIKey: sandbox.DefaultAPIKey})
	if err != nil {
		return nil, err
	}
	cfg := reconcile.Config{Pool: h.pool, Sources: []reconcile.Source{payments.ReconcileSource(pc)},
		Settlement: time.Second, Now: func() time.Time { return time.Now().Add(2 * time.Second) }}
	// The run whose finding an e-mail is: the credit's, a child's for a
	// delegating run.
	email := map[string]string{}
	for _, p := range h.runs {
		email[p.effect(stepCredit).runID] = p.email
	}
	var open []string
	for pass := 0; ; pass++ {
		rep, err := reconcile.Pass(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("reconciliation: %w", err)
		}
		acked := 0
		open = open[:0]
		for _, f := range rep.Findings {
			if f.Kind == reconcile.KindUndelivered && mails[email[f.RunID]] > 0 {
				if _, err := reconcile.Ack(ctx, h.pool, f.ID, "chaos harness",
					"the message is in the receiver's mailbox"); err != nil {
					return nil, err
				}
				h.counts.MailSettled++
				acked++
				continue
			}
			open = append(open, fmt.Sprintf("reconciliation: %s %s %s", f.Kind, f.Tool, f.Key))
		}
		if acked == 0 || pass > 10 {
			if rep.DriftCount-acked > len(open) {
				open = append(open, fmt.Sprintf("reconciliation: %d more findings", rep.DriftCount-acked-len(open)))
			}
			return open, nil
		}
	}
}

// resendByHand does what docs/external-effects.md asks of a person for a
// follow-on e-mail whose delivery oncerun recorded as unknown (a worker
// died between taking the message's lease and hearing the server's
// answer): look in the receiver's mailbox and, when the message is not
// there, send it by hand, under the Message-ID oncerun gave it. It returns
// how many it sent. A message recorded as delivered, failed or never
// tried is left alone: its absence from the mailbox is a violation.
func (h *harness) resendByHand(ctx context.Context) (int, error) {
	rows, err := h.pool.Query(ctx, `SELECT run_id, step, key, args FROM outbox WHERE tenant = $1 AND state = 'unknown'`, tenant)
	if err != nil {
		return 0, fmt.Errorf("read the outbox: %w", err)
	}
	type unknown struct {
		ref  stepRef
		key  string
		args []byte
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (unknown, error) {
		var u unknown
		return u, row.Scan(&u.ref.runID, &u.ref.step, &u.key, &u.args)
	})
	if err != nil {
		return 0, err
	}
	credits := h.creditSteps()
	list = slices.DeleteFunc(list, func(u unknown) bool { return !credits[u.ref] })
	if len(list) == 0 {
		return 0, nil
	}
	inBox := map[string]bool{}
	for _, m := range h.mail.Messages() {
		inBox[m.MessageID] = true
	}
	mc, err := mail.New(mail.Config{Addr: h.mail.Addr(), From: mailFrom})
	if err != nil {
		return 0, err
	}
	sent := 0
	for _, u := range list {
		id := mail.MessageID(u.key, mailFrom[strings.LastIndex(mailFrom, "@")+1:])
		if inBox[id] {
			continue
		}
		var a struct{ To, Subject, Body string }
		if err := json.Unmarshal(u.args, &a); err != nil {
			return sent, fmt.Errorf("the outbox's message %s: %w", u.key, err)
		}
		if _, err := mc.Send(ctx, mail.Message{To: []string{a.To}, Subject: a.Subject, Body: a.Body, MessageID: id}); err != nil {
			return sent, fmt.Errorf("resend %s by hand: %w", u.key, err)
		}
		h.say("the e-mail of %s was of unknown delivery and not in the mailbox: sent by hand, as a person would", u.key)
		sent++
	}
	return sent, nil
}

// checkSteps checks that each step of an ended run ended as its decision
// calls for: done, or rejected when the harness rejected it. A delegating
// step is done when its child's step is, and failed when the child's step
// was rejected; each child ran its one step so, under its parent.
func (c *Counts) checkSteps(p runPlan, end runEnd, want func(step int64) int) {
	st := end.status
	if len(st.Steps) != 3 {
		c.violations = append(c.violations, fmt.Sprintf("run %s has %d steps, want 3", p.runID, len(st.Steps)))
		return
	}
	for _, s := range st.Steps {
		expect, child := workflows.StepDone, p.children()[s.Step]
		if want(s.Step) == 0 {
			expect = workflows.StepRejected
			if child != "" {
				expect = workflows.StepFailed
			}
		}
		if s.State != expect {
			c.violations = append(c.violations, fmt.Sprintf("run %s step %d (%s) ended %s, want %s: %s", p.runID, s.Step, s.Tool, s.State, expect, s.Error))
		}
		if s.Child != child {
			c.violations = append(c.violations, fmt.Sprintf("run %s step %d (%s) names child run %q, want %q", p.runID, s.Step, s.Tool, s.Child, child))
		}
		if child == "" {
			continue
		}
		c.Children++
		cs := end.children[s.Step]
		switch {
		case cs.RunID == "":
			c.violations = append(c.violations, fmt.Sprintf("child run %s of run %s step %d: not found", child, p.runID, s.Step))
			continue
		case cs.Parent == nil || cs.Parent.RunID != p.runID || cs.Parent.Step != s.Step:
			c.violations = append(c.violations, fmt.Sprintf("child run %s does not name run %s step %d as its parent: %+v", child, p.runID, s.Step, cs.Parent))
		case cs.State != workflows.RunCompleted:
			c.violations = append(c.violations, fmt.Sprintf("child run %s ended %s: %s", child, cs.State, cs.Error))
		}
		childExpect := workflows.StepDone
		if want(s.Step) == 0 {
			childExpect = workflows.StepRejected
		}
		if len(cs.Steps) != 1 || cs.Steps[0].State != childExpect {
			c.violations = append(c.violations, fmt.Sprintf("child run %s has steps %s, want one %s", child, stepStates(cs.Steps), childExpect))
		}
	}
}

// stepStates lists steps as "1 issue_credit done", for a violation.
func stepStates(steps []workflows.Step) string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = fmt.Sprintf("%d %s %s", s.Step, s.Tool, s.State)
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// wantOf is how many times a step of p must have applied (0 or 1), from
// the decision of record of the last wait, in the approvals audit, of the
// step that makes the effect (a delegated one's in its child run):
// a step whose last wait was rejected or never decided makes nothing, and
// one parked at a spend limit waits last there, whatever its tool's rule
// decided before. A step that never waited applies unless its tool's rule
// asks for an approval.
func wantOf(p runPlan, step int64, waits map[stepRef]wait, decided map[waitRef]workflows.Decision) int {
	ref := p.effect(step)
	w, ok := waits[ref]
	switch {
	case !ok && !p.needsApproval(step):
		return 1
	case ok && decided[waitRef{ref, w.round}] == workflows.DecisionApprove:
		return 1
	}
	return 0
}

// decisionsOfRecord reads the accepted decision of every wait of every
// step from the approvals audit, and the steps an approver let past a
// spend limit (an exception).
func (h *harness) decisionsOfRecord(ctx context.Context) (map[waitRef]workflows.Decision, map[stepRef]bool, error) {
	records, err := approvalstore.DecisionsOfRecord(ctx, h.pool, tenant)
	if err != nil {
		return nil, nil, err
	}
	out := make(map[waitRef]workflows.Decision, len(records))
	excepted := map[stepRef]bool{}
	for _, d := range records {
		ref := stepRef{runID: d.RunID, step: d.Step}
		out[waitRef{ref, max(d.Round, 1)}] = workflows.Decision(d.Decision)
		if d.Exception {
			excepted[ref] = true
		}
	}
	// Every decision the API accepted is the audit's decision of record of
	// its wait (the audit holds one per wait: a unique index).
	h.mu.Lock()
	for key, sent := range h.decided {
		switch got, ok := out[key]; {
		case !ok:
			h.counts.violations = append(h.counts.violations, fmt.Sprintf("run %s step %d round %d: the API accepted a decision the approvals audit does not hold",
				key.runID, key.step, key.round))
		case got != sent:
			h.counts.violations = append(h.counts.violations, fmt.Sprintf("run %s step %d round %d: the API accepted %s, and the approvals audit holds %s",
				key.runID, key.step, key.round, sent, got))
		}
	}
	h.mu.Unlock()
	return out, excepted, nil
}

// childStarts counts, in each delegating run's history in Temporal, the
// starts of each child workflow it commanded, by the child's workflow id;
// a start Temporal refused counts too.
func (h *harness) childStarts(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	if !slices.ContainsFunc(h.runs, func(p runPlan) bool { return p.delegate }) {
		return out, nil
	}
	tc, err := client.DialContext(ctx, client.Options{HostPort: h.temporalAddr(), Namespace: namespace,
		Logger: sdklog.NewStructuredLogger(discard)})
	if err != nil {
		return nil, fmt.Errorf("connect to Temporal to read the delegating runs' histories: %w", err)
	}
	defer tc.Close()
	for _, p := range h.runs {
		if !p.delegate {
			continue
		}
		it := tc.GetWorkflowHistory(ctx, workflows.WorkflowID(tenant, p.runID), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				return nil, fmt.Errorf("read run %s's history: %w", p.runID, err)
			}
			if a := ev.GetStartChildWorkflowExecutionInitiatedEventAttributes(); a != nil {
				out[a.GetWorkflowId()]++
			}
		}
	}
	return out, nil
}

// deliveries reads the state of each credit's e-mail in the outbox, by
// the step that made the credit.
func (h *harness) deliveries(ctx context.Context) (map[stepRef]string, error) {
	rows, err := h.pool.Query(ctx, `SELECT run_id, step, state FROM outbox WHERE tenant = $1`, tenant)
	if err != nil {
		return nil, fmt.Errorf("read the outbox: %w", err)
	}
	defer rows.Close()
	credits := h.creditSteps()
	out := map[stepRef]string{}
	for rows.Next() {
		var (
			ref   stepRef
			state string
		)
		if err := rows.Scan(&ref.runID, &ref.step, &state); err != nil {
			return nil, err
		}
		if credits[ref] {
			out[ref] = state
		}
	}
	return out, rows.Err()
}

// creditSteps are the steps that make the runs' credits, whose e-mails go
// through the outbox: each run's credit step, or its child's.
func (h *harness) creditSteps() map[stepRef]bool {
	out := make(map[stepRef]bool, len(h.runs))
	for _, p := range h.runs {
		out[p.effect(stepCredit)] = true
	}
	return out
}

// startGrace is how long after the faults a worker may still fail to start
// without a violation: the time a Temporal node that came back takes to
// own its shards again, and a cut database to take connections again.
const startGrace = time.Minute
