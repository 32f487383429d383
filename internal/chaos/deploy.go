package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/oncerun/oncerun/internal/agents"
	"github.com/oncerun/oncerun/internal/deployment"
	"github.com/oncerun/oncerun/internal/sandbox/desk"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/workflows"
)

// Deploy mode (Config.Deploy) rolls the workers through tool registries
// while runs are in flight and every other fault goes on. The workers of
// one task queue run, at any moment, under two or three registries; each
// roll is a new Worker Deployment version (its build ID chaos-r<n>) made
// current, every worker restarted into it under the next registry. The
// runs also call a sandbox support desk, an MCP server.
//
// The registries differ as deploys make them differ:
//
//   - base: the credit threshold at 100.00, the desk's tickets, both
//     sub-agents;
//   - adds: a tool added (the desk's vouchers) and an approval rule
//     loosened (credits above 200.00 wait);
//   - down: the desk, optional, down when its workers start (no desk tool
//     at all), the refunds sub-agent removed, and the rule tightened
//     (credits above 50.00 wait).
//
// Halfway through, the desk itself is redeployed with a changed schema
// (open_ticket takes a priority), so that workers started before and after
// differ in what they know of its tool.
//
// Outcomes then depend on which worker planned which turn: a call one
// registry refuses is a refused step. The check holds each run's record
// against the destinations, by key, instead of against the plan.

// The desk's tools as oncerun registers them, server desk.
const (
	deskTicket  = "desk_open_ticket"
	deskVoucher = "desk_issue_voucher"
)

// deploymentName is the workers' Worker Deployment.
const deploymentName = "oncerun-chaos"

// stepTicket and stepVoucher are the desk's steps of a run in deploy mode.
const (
	stepTicket  = 4
	stepVoucher = 5
)

// registry is one tool configuration of the workers.
type registry struct {
	name      string
	threshold int64
	mcp       string // ONCERUN_MCP_CONFIG
	agents    string // ONCERUN_AGENTS_CONFIG
	// lacks are the tools of the others it does not have.
	lacks []string
}

// crashSet is set with the points on tools the registry lacks left out:
// a worker refuses to start with a crash point on a tool it does not
// have.
func (r registry) crashSet(set string) string {
	var keep []string
	for _, entry := range strings.Split(set, ",") {
		_, tool, _ := strings.Cut(entry, ":")
		if !slices.Contains(r.lacks, tool) {
			keep = append(keep, entry)
		}
	}
	return strings.Join(keep, ",")
}

// buildID is the build ID of roll n's workers.
func buildID(n int) string { return "chaos-r" + strconv.Itoa(n) }

// setUpDeploy starts the desk and writes the registries' files.
func (h *harness) setUpDeploy(ctx context.Context) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	h.deskAddr, h.deskDir = addr, filepath.Join(h.cfg.Dir, "desk")
	h.desk = &proc{name: "sandbox-desk", binary: h.cfg.Binary, logPath: logPath(h.cfg.Dir, "sandbox-desk"),
		args:    []string{"sandbox-desk", "--addr", addr, "--data-dir", h.deskDir},
		healthy: func(ctx context.Context) bool { return answers(ctx, "http://"+addr+"/mcp", false) }}
	if err := h.desk.start(ctx, time.Minute); err != nil {
		return err
	}
	down, err := freeAddr() // nothing listens there
	if err != nil {
		return err
	}
	tickets := map[string]any{
		"open_ticket": map[string]any{"class": "external", "idempotent": true, "paired_read": "find_ticket", "approval": "never"},
		"find_ticket": map[string]any{"class": "read"},
	}
	vouchers := map[string]any{
		"issue_voucher": map[string]any{"class": "external", "idempotent": true, "paired_read": "find_voucher", "approval": "never"},
		"find_voucher":  map[string]any{"class": "read"},
	}
	both := map[string]any{}
	for k, v := range tickets {
		both[k] = v
	}
	for k, v := range vouchers {
		both[k] = v
	}
	write := func(name string, v any) (string, error) {
		raw, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return "", err
		}
		p := filepath.Join(h.cfg.Dir, name)
		return p, os.WriteFile(p, raw, 0o644)
	}
	server := func(url string, optional bool, tools map[string]any) map[string]any {
		return map[string]any{"servers": []any{map[string]any{"name": "desk", "transport": "http", "url": url,
			"optional": optional, "tools": tools}}}
	}
	url := "http://" + addr + "/mcp"
	files := map[string]any{
		"mcp-base.json": server(url, true, tickets),
		"mcp-adds.json": server(url, true, both),
		"mcp-down.json": server("http://"+down+"/mcp", true, both),
	}
	paths := map[string]string{}
	for name, v := range files {
		if paths[name], err = write(name, v); err != nil {
			return err
		}
	}
	creditsOnly := filepath.Join(h.cfg.Dir, "agents-credits.yaml")
	if err := os.WriteFile(creditsOnly, []byte(agentsCreditsOnly), 0o644); err != nil {
		return err
	}
	all := []registry{
		{name: "base", threshold: shop.DefaultCreditApprovalThreshold, mcp: paths["mcp-base.json"], agents: h.agentsFile(),
			lacks: []string{deskVoucher}},
		{name: "adds", threshold: 2 * shop.DefaultCreditApprovalThreshold, mcp: paths["mcp-adds.json"], agents: h.agentsFile()},
		{name: "down", threshold: shop.DefaultCreditApprovalThreshold / 2, mcp: paths["mcp-down.json"], agents: creditsOnly,
			lacks: []string{deskTicket, deskVoucher, agents.ToolPrefix + agentRefunds}},
	}
	h.registries = all[:h.cfg.Registries]
	return nil
}

// agentsCreditsOnly is the sub-agents of the registry that removed the
// refunds sub-agent.
const agentsCreditsOnly = `# The chaos harness's sub-agents, less refunds: a deploy that removed it.
agents:
  - name: ` + agentCredits + `
    description: Credits an order.
    tools: [` + shop.ToolIssueCredit + `]
    planner: script
`

// registryOf is the registry worker i runs under at its next start, and
// the roll it starts in.
func (h *harness) registryOf(i int) (registry, int) {
	h.mu.Lock()
	roll := h.roll
	h.mu.Unlock()
	return h.registries[(i+roll)%len(h.registries)], roll
}

// deployEnv is the environment of a worker of roll's version under r.
func deployEnv(r registry, roll int) []string {
	return []string{
		settings.EnvDeploymentName + "=" + deploymentName, settings.EnvWorkerBuildID + "=" + buildID(roll),
		settings.EnvCreditThreshold + "=" + strconv.FormatInt(r.threshold, 10),
		settings.EnvMCPConfig + "=" + r.mcp, settings.EnvAgentsConfig + "=" + r.agents,
	}
}

// temporalClient connects to Temporal for the harness's own calls.
func (h *harness) temporalClient(ctx context.Context) (client.Client, error) {
	tc, err := client.DialContext(ctx, client.Options{HostPort: h.temporalAddr(), Namespace: namespace,
		Logger: sdklog.NewStructuredLogger(discard)})
	if err != nil {
		return nil, fmt.Errorf("connect to Temporal: %w", err)
	}
	return tc, nil
}

// makeCurrent makes roll n's version current, once a worker of it has
// polled, trying again through Temporal's restarts until ctx ends.
func (h *harness) makeCurrent(ctx context.Context, n int) error {
	var last error
	ok := retry(ctx, time.Second, func() bool {
		tc, err := h.temporalClient(ctx)
		if err != nil {
			last = err
			return false
		}
		defer tc.Close()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := deployment.WaitForVersion(wctx, tc, deploymentName, buildID(n)); err != nil {
			last = err
			return false
		}
		if _, err := deployment.SetCurrent(wctx, tc, deploymentName, buildID(n)); err != nil {
			last = err
			return false
		}
		return true
	})
	if !ok {
		return fmt.Errorf("make version %s current: %w", buildID(n), last)
	}
	h.say("version %s of deployment %s is current", buildID(n), deploymentName)
	return nil
}

// rollDeploys rolls the workers into a new version, under the next
// registry each, Rolls times spread over the window; halfway, it
// redeploys the desk with a changed schema. A roll begun is finished, if
// need be after the window, within rollWithin: a deploy slowed by the
// faults (a worker that cannot reach Temporal polls late) is not left
// half done.
func (h *harness) rollDeploys(window context.Context) {
	if !h.cfg.Deploy {
		return
	}
	h.at(window, h.cfg.Rolls, func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(window), rollWithin)
		defer cancel()
		h.mu.Lock()
		h.roll++
		n := h.roll
		h.mu.Unlock()
		if n == (h.cfg.Rolls+1)/2 {
			h.redeployDesk(ctx)
		}
		h.say("deploy %d: rolling the workers into version %s", n, buildID(n))
		for i, w := range h.workers {
			w.redeploy()
			if i == 0 {
				if err := h.makeCurrent(ctx, n); err != nil {
					h.violate("deploy %d: %v", n, err)
				}
			}
			if !h.sleepJittered(ctx, 3*time.Second) {
				return
			}
		}
		h.fault(&h.counts.Deploys)
	})
}

// rollWithin bounds one roll of the workers.
const rollWithin = 5 * time.Minute

// redeployDesk stops the desk and starts it again with a changed schema
// on the same ledger.
func (h *harness) redeployDesk(ctx context.Context) {
	h.desk.stop(5 * time.Second)
	h.desk.args = append(h.desk.args, "--ticket-priority")
	if err := h.desk.start(ctx, time.Minute); err != nil {
		h.violate("redeploy the desk: %v", err)
		return
	}
	h.say("the desk is redeployed: open_ticket takes a priority")
	h.mu.Lock()
	h.counts.DeskRedeploys++
	h.mu.Unlock()
}

// deskLedger reads the desk's own ledger.
func (h *harness) deskLedger() ([]desk.Ticket, []desk.Voucher, error) {
	t, v, err := desk.ReadLedger(h.deskDir)
	if err != nil {
		return nil, nil, fmt.Errorf("read the desk's ledger: %w", err)
	}
	return t, v, nil
}

// recordedDone is 1 when end's record says the effect of step was made:
// the step done, or, for a step that delegated, its child's step done.
func recordedDone(end runEnd, step int64) int {
	st := end.status
	if step < 1 || int(step) > len(st.Steps) {
		return 0
	}
	s := st.Steps[step-1]
	if s.Child != "" {
		cs := end.children[step]
		if len(cs.Steps) > 0 && cs.Steps[0].State == workflows.StepDone {
			return 1
		}
		return 0
	}
	if s.State == workflows.StepDone {
		return 1
	}
	return 0
}

// namesChild reports whether end's step names child as the child run it
// started.
func namesChild(end runEnd, step int64, child string) bool {
	st := end.status
	return step >= 1 && int(step) <= len(st.Steps) && st.Steps[step-1].Child == child
}

// deskTallies counts the tickets and the vouchers of each order in the
// desk's own ledger.
func (h *harness) deskTallies() (tickets, vouchers map[string]tally, err error) {
	ts, vs, err := h.deskLedger()
	if err != nil {
		return nil, nil, err
	}
	tickets, vouchers = map[string]tally{}, map[string]tally{}
	for _, t := range ts {
		x := tickets[t.OrderID]
		x.n++
		tickets[t.OrderID] = x
	}
	for _, v := range vs {
		x := vouchers[v.OrderID]
		x.n++
		x.sum += v.AmountCents
		vouchers[v.OrderID] = x
	}
	return tickets, vouchers, nil
}

// takeovers counts, in every run's history and its child runs', the
// workflow tasks a worker started after the run's previous task timed out
// or failed, and those of them whose worker offered another registry than
// the worker that lost the task (the registry digest each identity
// carries).
func (h *harness) takeovers(ctx context.Context) (all, across int, err error) {
	tc, err := h.temporalClient(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer tc.Close()
	var ids []string
	for _, p := range h.runs {
		ids = append(ids, workflows.WorkflowID(tenant, p.runID))
		for _, child := range p.children() {
			ids = append(ids, workflows.WorkflowID(tenant, child))
		}
	}
	for _, id := range ids {
		it := tc.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		var last, lost string
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				var missing *serviceerror.NotFound
				if errors.As(err, &missing) {
					break // a child whose delegation was refused never started
				}
				return 0, 0, fmt.Errorf("read %s's history: %w", id, err)
			}
			switch {
			case ev.GetWorkflowTaskStartedEventAttributes() != nil:
				identity := ev.GetWorkflowTaskStartedEventAttributes().GetIdentity()
				if lost != "" {
					all++
					if deployment.DigestOfIdentity(lost) != deployment.DigestOfIdentity(identity) {
						across++
					}
					lost = ""
				}
				last = identity
			case ev.GetWorkflowTaskTimedOutEventAttributes() != nil, ev.GetWorkflowTaskFailedEventAttributes() != nil:
				if last != "" {
					lost = last
				}
			}
		}
	}
	return all, across, nil
}

// countDeploySteps counts an ended run's child runs and the steps its
// workers' registries refused, children's included.
func (c *Counts) countDeploySteps(end runEnd) {
	for _, s := range end.status.Steps {
		if s.Refused {
			c.Refused++
		}
		if s.Child == "" {
			continue
		}
		c.Children++
		for _, cs := range end.children[s.Step].Steps {
			if cs.Refused {
				c.Refused++
			}
		}
	}
}
