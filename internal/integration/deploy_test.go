package integration

import (
	"context"
	"encoding/json"
	"maps"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"

	"github.com/oncerun/oncerun/internal/cli"
	"github.com/oncerun/oncerun/internal/deployment"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/workflows"
)

// deployDocPath is docs/deploy.md, named from this package's folder.
var deployDocPath = filepath.Join("..", "..", "docs", "deploy.md")

// versionedWorker is a worker process of the page and what its start line
// says of it.
type versionedWorker struct {
	*workerProcess
	start map[string]any
}

// field is a string field of the worker's start line.
func (w versionedWorker) field(name string) string {
	s, _ := w.start[name].(string)
	return s
}

// startLine returns the worker's "worker started" line, once it is logged.
func startLine(p *workerProcess) map[string]any {
	p.t.Helper()
	p.logged(`"msg":"worker started"`)
	for l := range strings.SplitSeq(p.logs.String(), "\n") {
		if strings.Contains(l, `"msg":"worker started"`) {
			var line map[string]any
			require.NoError(p.t, json.Unmarshal([]byte(l), &line), l)
			return line
		}
	}
	p.t.Fatalf("no start line:\n%s", p.logs.String())
	return nil
}

// lastWorkflowTask is the last WorkflowTaskCompleted event of the run.
func (e *env) lastWorkflowTask(runID string) *historypb.WorkflowTaskCompletedEventAttributes {
	e.t.Helper()
	var last *historypb.WorkflowTaskCompletedEventAttributes
	e.countEvents(runID, func(ev *historypb.HistoryEvent) bool {
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			last = ev.GetWorkflowTaskCompletedEventAttributes()
		}
		return false
	})
	require.NotNil(e.t, last, "run %s completed a workflow task", runID)
	return last
}

// TestRollingDeployRunsAsWritten runs docs/deploy.md's walk-through of a
// rolling deploy (the sh block of "A threshold changes") line by line as
// written, against the embedded Temporal server and PostgreSQL: each
// `oncerun worker` line is a worker process of the production command
// with the line's variables, each other line the CLI. Version v41 asks
// for approval above 100.00 EUR, v42 above 500.00 EUR; a run started on
// v41 waits for the approval of a credit, v42 is made current, the
// approval is given, and the run's history shows that v42's worker
// completed its last workflow task.
//
// What the test makes its own, as the README walkthrough's does: the
// deployment's name (the page's shop is shop-<n>, the server being shared
// with other tests and -count), the run ids, and the workers'
// METRICS_ADDR (a free port each, as separate machines would have). The
// world is put into the state a line assumes, as a reader's would be: a
// worker's version is registered before it is made current, the run has
// reached its approval before status.
//
// Past the page, the test pins a run to v41 while v42 is current and
// checks that it ends on v41, and that an unpinned run ends on v42.
func TestRollingDeployRunsAsWritten(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	shopName := "shop-" + strings.TrimPrefix(e.queue, "oncerun-test-")
	r1 := e.id("r1")
	lines, first := readBlock(t, deployDocPath, "sh", "oncerun deployment set-current v41")
	cmds := parseCommands(t, deployDocPath, lines, first, "oncerun", func(string) bool { return false })

	workers := map[string]versionedWorker{} // by build ID
	getenvOf := func(vars map[string]string) func(string) string {
		all := map[string]string{
			settings.EnvDatabaseURL: e.pool.Config().ConnString(),
			settings.EnvTaskQueue:   e.queue,
			"USER":                  "dana",
		}
		maps.Copy(all, vars)
		return func(name string) string { return all[name] }
	}
	run := func(vars map[string]string, args ...string) (string, error) {
		t.Helper()
		vars = maps.Clone(vars)
		require.Equal(t, "shop", vars[settings.EnvDeploymentName], "the page's deployment")
		vars[settings.EnvDeploymentName] = shopName
		if args[0] == "worker" {
			require.Equal(t, []string{"worker"}, args)
			var extra []string
			for name, value := range vars {
				if name != settings.EnvMetricsAddr {
					extra = append(extra, name+"="+value)
				}
			}
			p := startWorkerProcess(t, e, nil, extra...)
			w := versionedWorker{workerProcess: p, start: startLine(p)}
			workers[vars[settings.EnvWorkerBuildID]] = w
			return p.logs.String(), nil
		}
		env := cli.EnvFrom(getenvOf(vars), nil)
		env.Temporal = e.tc
		return runCLI(env, args...)
	}
	// registered waits until Temporal knows the version build, as a
	// reader waits for a worker to be up before using its version.
	registered := func(build string) {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		require.NoError(t, deployment.WaitForVersion(wctx, e.tc, shopName, build))
	}
	checkWorker := func(build string) func(string, error) {
		return func(out string, err error) {
			require.NoError(t, err, out)
			w := workers[build]
			assert.Equal(t, shopName, w.field("deployment"))
			assert.Equal(t, build, w.field("build_id"))
			assert.Equal(t, "auto-upgrade", w.field("versioning_behavior"))
			digest := w.field("registry_digest")
			assert.Regexp(t, `^[0-9a-f]{64}$`, digest)
			assert.Equal(t, digest[:12], w.field("registry_digest_short"))
			assert.True(t, strings.HasSuffix(w.field("identity"), "@"+digest[:12]), "the identity carries the digest: %s", w.field("identity"))
		}
	}

	steps := []docStep{{
		words: "export TEMPORAL_DEPLOYMENT_NAME=shop",
	}, {
		words: "TEMPORAL_WORKER_BUILD_ID=v41 worker", claim: "version v41 starts polling",
		check: checkWorker("v41"),
	}, {
		words: "deployment set-current v41", claim: "new runs start on v41",
		before: func() { registered("v41") },
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Equal(t, "deployment "+shopName+": v41 is current (was -): new runs start on it, auto-upgrade runs move to it at their next workflow task\n", out)
		},
	}, {
		words: "start",
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Contains(t, out, "started run "+r1+" of tenant acme")
		},
	}, {
		words: "status", claim: "step 3 pending_approval (259.00 EUR is above v41's threshold)",
		before: func() {
			e.waitFor("acme", r1, "the credit's approval", func(s workflows.Status) bool { return s.State == workflows.RunWaitingForApproval })
		},
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Equal(t, "pending_approval", stepStates(out)["3"])
			st := e.status("acme", r1)
			require.NotNil(t, st.Steps[2].Approval)
			assert.Contains(t, st.Steps[2].Approval.Reason, "above 10000", "v41's threshold asked for it")
			assert.Contains(t, string(st.Steps[2].Args), `"amount_cents":25900`)
		},
	}, {
		words: "CREDIT_APPROVAL_THRESHOLD_CENTS=50000 TEMPORAL_WORKER_BUILD_ID=v42 METRICS_ADDR=127.0.0.1:9465 worker",
		claim: "version v42 polls beside v41, and warns that their registries differ",
		check: func(out string, err error) {
			checkWorker("v42")(out, err)
			v41, v42 := workers["v41"], workers["v42"]
			assert.NotEqual(t, v41.field("registry_digest"), v42.field("registry_digest"), "another threshold, another registry")
			v42.logged("workers of task queue " + e.queue + " offer different tool registries: ours " + v42.field("registry_digest_short") +
				", " + v41.field("identity") + " " + v41.field("registry_digest_short"))
		},
	}, {
		words: "deployment describe", claim: "v41 current, v42 listed, each with its poller",
		before: func() {
			registered("v42")
			require.Eventually(t, func() bool {
				d, err := deployment.Describe(ctx, e.tc, shopName)
				return err == nil && len(d.Versions) == 2 && len(d.Versions[0].Pollers) > 0 && len(d.Versions[1].Pollers) > 0
			}, time.Minute, 200*time.Millisecond, "both versions' pollers are known")
		},
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Contains(t, out, "deployment "+shopName+": current v41\n")
			assert.Regexp(t, `(?m)^v41\s+current\s+-\s+\S+ \S+\s+`+regexp.QuoteMeta(e.queue)+`\s+.*`+regexp.QuoteMeta(workers["v41"].field("identity")), out)
			assert.Regexp(t, `(?m)^v42\s+-\s+\S+\s+\S+ \S+\s+`+regexp.QuoteMeta(e.queue)+`\s+.*`+regexp.QuoteMeta(workers["v42"].field("identity")), out)
		},
	}, {
		words: "deployment set-current v42", claim: "new runs start on v42; r1 moves to it at its next workflow task",
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Contains(t, out, "v42 is current (was v41)")
		},
	}, {
		words: "approve", claim: "v42's worker applies the credit r1 waited for",
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Contains(t, out, "approved step 3 (issue_credit) of run "+r1+" as dana")
		},
	}, {
		words: "status", claim: "completed, every step done",
		before: func() { e.result("acme", r1) },
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Contains(t, out, "run "+r1+" of tenant acme: completed")
			assert.Equal(t, map[string]string{"1": "done", "2": "done", "3": "done", "4": "done"}, stepStates(out))
		},
	}, {
		words: "deployment describe", claim: "current_build_id v42",
		check: func(out string, err error) {
			require.NoError(t, err, out)
			var d deployment.Description
			require.NoError(t, json.Unmarshal([]byte(out), &d), out)
			assert.Equal(t, shopName, d.Name)
			assert.Equal(t, "v42", d.CurrentBuildID)
			assert.Equal(t, []string{"v41", "v42"}, d.BuildIDs())
		},
	}}
	runPage(t, deployDocPath, cmds, steps, fromTheRoot(t, map[string]string{"r1": r1}), run)

	// The credit was applied once, by the run r1 moved to v42, whose
	// worker completed the run's last workflow task.
	assert.Equal(t, 1, e.count("credits", "tenant = 'acme' AND order_id = '1001' AND reason = 'damaged_in_transit'"))
	endedOn := func(runID, build string) {
		t.Helper()
		last := e.lastWorkflowTask(runID)
		assert.Equal(t, workers[build].field("identity"), last.GetIdentity(), "run %s's last workflow task", runID)
		assert.Equal(t, build, last.GetDeploymentVersion().GetBuildId(), "run %s's last workflow task", runID)
		assert.Equal(t, shopName, last.GetDeploymentVersion().GetDeploymentName())
	}
	endedOn(r1, "v42")
	assert.True(t, e.anyEvent(r1, func(ev *historypb.HistoryEvent) bool {
		a := ev.GetWorkflowTaskCompletedEventAttributes()
		return a != nil && a.GetDeploymentVersion().GetBuildId() == "v41" && a.GetIdentity() == workers["v41"].field("identity")
	}), "r1 began on v41")

	// Past the page: a run pinned to v41 ends there although v42 is
	// current, and one pinned then unpinned ends on v42.
	oncerun := func(args ...string) {
		t.Helper()
		env := cli.EnvFrom(getenvOf(map[string]string{settings.EnvDeploymentName: shopName}), nil)
		env.Temporal = e.tc
		out, err := runCLI(env, args...)
		require.NoError(t, err, out)
	}
	for _, c := range []struct {
		run   string
		unpin bool
		build string
	}{{run: e.id("r2"), build: "v41"}, {run: e.id("r3"), unpin: true, build: "v42"}} {
		_, err := e.runs.Start(ctx, workflows.RunInput{Tenant: "acme", RunID: c.run, Plan: []planner.Call{
			call(shop.ToolIssueCredit, `{"order_id":"1001","reason":"`+c.run+`","amount_cents":60000,"currency":"EUR"}`),
		}})
		require.NoError(t, err)
		e.waitFor("acme", c.run, "the credit's approval", func(s workflows.Status) bool { return s.State == workflows.RunWaitingForApproval })
		oncerun("deployment", "pin", c.run, "--tenant", "acme", "--build-id", "v41")
		if c.unpin {
			oncerun("deployment", "unpin", c.run, "--tenant", "acme")
		}
		e.decide(c.run, 1, workflows.DecisionApprove, "dana", "")
		assert.Equal(t, workflows.RunCompleted, e.result("acme", c.run).State)
		endedOn(c.run, c.build)
	}
}
