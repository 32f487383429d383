package integration

import (
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/cli"
	"github.com/oncerun/oncerun/workflows"
)

// apiRows returns the rows `oncerun approvals` prints through the API,
// without its header.
func apiRows(t *testing.T, out string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.Regexp(t, `^RUN\s+STEP\s+TOOL\s+KIND\s+AMOUNT\s+ARGS\s+STATE\s+REQUESTED\s+DEADLINE\s+LEFT\s+PROBLEM$`, lines[0], "the list's header")
	return lines[1:]
}

// TestTheREADMEApprovalsCLIRunsAsWritten runs the block of the README's
// "Approvals service" section that uses the CLI from another machine (the
// sh block starting `export ONCERUN_API=https://approvals.example.com`),
// line by line as written, against the test's approvals service, a
// worker, Temporal and PostgreSQL.
//
// The export is the environment of the lines below it, with the
// README's placeholders made real: ONCERUN_API is the test's service and
// ONCERUN_TOKEN the token of dana, an approver of tenant acme. The CLI
// gets those two variables and nothing else: no database, no Temporal.
// Run r1 (the test's own id for it) waits at step 3 for approval, as
// after the walkthrough's start, and a run of tenant globex waits too,
// which acme's token must not see.
func TestTheREADMEApprovalsCLIRunsAsWritten(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w", worker.Options{})
	a := e.serveApprovals(nil)
	r1, theirs := e.id("r1"), e.id("globex")
	lines, first := readBlock(t, readmePath, "sh", "export ONCERUN_API=https://approvals.example.com")
	cmds := parseCommands(t, readmePath, lines, first, "oncerun", func(string) bool { return false })

	// What the README's placeholders stand for here.
	ours := map[string]string{cli.EnvAPI: a.srv.URL, cli.EnvToken: a.tokens["dana"]}
	oncerun := func(vars map[string]string, args ...string) (string, error) {
		t.Helper()
		u, err := url.Parse(vars[cli.EnvAPI])
		require.NoError(t, err)
		require.Equal(t, "https", u.Scheme, "%s %s: the README's service is reached over TLS", cli.EnvAPI, vars[cli.EnvAPI])
		require.True(t, strings.HasPrefix(vars[cli.EnvToken], approvals.TokenPrefix),
			"%s %s: the README's token starts as tokens do (%s)", cli.EnvToken, vars[cli.EnvToken], approvals.TokenPrefix)
		env := map[string]string{}
		for name := range vars {
			v, ok := ours[name]
			require.True(t, ok, "%s: the test has no value of its own for it", name)
			env[name] = v
		}
		return runCLI(cli.EnvFrom(func(name string) string { return env[name] }, nil), args...)
	}

	steps := []docStep{{
		words: "export ONCERUN_API=https://approvals.example.com ONCERUN_TOKEN=oncerun_...",
	}, {
		words: "approvals", claim: "your tenant's pending steps",
		before: func() {
			out, err := e.oncerun("start", "--tenant", "acme", "--run-id", r1, "--plan", filepath.Join("..", "..", "examples", "refund.json"))
			require.NoError(t, err, out)
			e.waitFor("acme", r1, "the credit's approval", func(s workflows.Status) bool { return s.State == workflows.RunWaitingForApproval })
			a.startPending("gops", theirs)
		},
		check: func(out string, err error) {
			require.NoError(t, err, out)
			rows := apiRows(t, out)
			require.Len(t, rows, 1, "acme's one pending step, not globex's")
			assert.Regexp(t, `^`+regexp.QuoteMeta(r1)+`\s+3\s+issue_credit\s+\S+\s+259\.00 EUR\s+\{.*\s+pending\s`, rows[0])
			assert.NotContains(t, out, theirs)
		},
	}, {
		words: "approve",
		check: func(out string, err error) {
			require.NoError(t, err, out)
			assert.Equal(t, "approved step 3 of run "+r1+" as dana; the run applies the decision\n", out)
			st := e.result("acme", r1)
			require.Equal(t, workflows.RunCompleted, st.State, "%+v", st)
			require.NotNil(t, st.Steps[2].Approval)
			assert.Equal(t, []any{"dana", "photos confirm it"}, []any{st.Steps[2].Approval.Approver, st.Steps[2].Approval.Comment},
				"the run applied dana's approval with its comment")
			assert.Equal(t, 1, e.count("approval_decisions", "tenant = 'acme' AND run_id = $1 AND step = 3 AND decision = 'approve' AND outcome = 'accepted' AND approver = 'dana' AND via = 'api' AND comment = 'photos confirm it'", r1),
				"the decision of record, with its comment, in the audit table")
		},
	}, {
		words: "approvals",
		check: func(out string, err error) {
			require.NoError(t, err, out)
			rows := apiRows(t, out)
			require.Len(t, rows, 1, "acme's one decided step")
			assert.Regexp(t, `^`+regexp.QuoteMeta(r1)+`\s+3\s+issue_credit\s+\S+\s+259\.00 EUR\s+\{.*\s+approved\s`, rows[0])
		},
	}}
	runPage(t, readmePath, cmds, steps, fromTheRoot(t, map[string]string{"r1": r1}), oncerun)
}
