package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// TestAPIURLPasswordIsNeverPrinted: a password in ONCERUN_API stays out of
// every error, whether the URL parses or not, and whether the server is
// reached or not.
func TestAPIURLPasswordIsNeverPrinted(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"https://ops:pa55w0rd@exa mple.com",
		"http://ops:pa55w0rd@127.0.0.1:1",
		"ftp://ops:pa55w0rd@example.com",
		"ops:pa55w0rd@example.com",
	} {
		out, err := run(t, Env{APIURL: u, Token: "oncerun_x"}, "approvals")
		require.Error(t, err, u)
		assert.NotContains(t, out+err.Error(), "pa55w0rd", u)
		assert.Contains(t, out, "ONCERUN_API", u)
	}
}

// TestTenantFilterIsChecked: a --tenant that filters a list is checked
// before it reaches the database.
func TestTenantFilterIsChecked(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"approvals", "--tenant", "ac\x00me"}, {"keys", "--expiring", "--tenant", "ac\xffme"}} {
		out, err := run(t, Env{DatabaseURL: "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}, args...)
		require.Error(t, err, args)
		assert.Contains(t, out, "--tenant: invalid idempotency key", args)
	}
}

func writePlan(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "plan.json")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func TestReadPlanRefusals(t *testing.T) {
	t.Parallel()
	big := `{"steps":[` + strings.Repeat(`{"tool":"lookup_order","args":{"order_id":"1001"}},`, MaxPlanFileBytes/40) + `{"tool":"lookup_order","args":{"order_id":"1001"}}]}`
	var many strings.Builder
	many.WriteString(`{"steps":[`)
	for i := range workflows.MaxPlanCalls + 1 {
		if i > 0 {
			many.WriteString(",")
		}
		many.WriteString(`{"tool":"lookup_order","args":{"order_id":"1"}}`)
	}
	many.WriteString(`]}`)
	for _, tc := range []struct{ name, content, want string }{
		{"a key twice", `{"steps":[{"tool":"lookup_order","tool":"issue_credit","args":{"order_id":"1001"}}]}`, `field "tool" appears twice in steps[0]`},
		{"a field in capitals", `{"Steps":[]}`, `unknown field "Steps"`},
		{"steps twice", `{"steps":[],"steps":[{"tool":"lookup_order","args":{"order_id":"1"}}]}`, `field "steps" appears twice`},
		{"NUL in an argument", `{"steps":[{"tool":"add_order_note","args":{"order_id":"1001","text":"a\u0000b"}}]}`, "step 1: arguments of add_order_note holds a NUL character"},
		{"escape in an argument", `{"steps":[{"tool":"add_order_note","args":{"order_id":"1001","text":"\u001b[2J"}}]}`, "U+001B"},
		{"malformed", `{"steps":[{"tool":"lookup_order","malformed":"{"}]}`, `"malformed" is for planners`},
		{"over the size limit", big, fmt.Sprintf("larger than %d bytes, the limit of a plan file", MaxPlanFileBytes)},
		{"too many steps", many.String(), fmt.Sprintf("has %d steps; a plan has at most %d", workflows.MaxPlanCalls+1, workflows.MaxPlanCalls)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ReadPlan(writePlan(t, tc.content), builtinRegistry(t))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), "invalid tool arguments", "the limit is named, not mistaken for a tool's")
		})
	}
}

// FuzzPlanFile reads arbitrary plan files and checks that a plan the CLI
// accepts can start a run, and that its calls' arguments are values
// PostgreSQL stores: the approvals row of any of its steps can be written.
func FuzzPlanFile(f *testing.F) {
	f.Add([]byte(`{"steps":[{"tool":"lookup_order","args":{"order_id":"1001"}}]}`))
	f.Add([]byte(`{"steps":[{"tool":"add_order_note","args":{"order_id":"1001","text":"a\u0000b"}}]}`))
	f.Add([]byte(`{"steps":[{"tool":"issue_credit","args":{"order_id":"1001","reason":"damaged","amount_cents":25900,"currency":"EUR"}}]}`))
	f.Add([]byte(`{"steps":[{"tool":"lookup_order","args":{"order_id":"1001"}}],"steps":[]}`))
	f.Add([]byte(`{"steps":[{"tool":"add_order_note","args":{"order_id":"\u202e1","text":"\ud83d\ude00"}}]}`))
	pool := pgtest.NewPool(f, 2)
	reg := builtinRegistry(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		calls, err := parsePlan("fuzz.json", raw, reg)
		if err != nil {
			return
		}
		in := workflows.RunInput{Tenant: "acme", RunID: "fuzz", Plan: calls}
		require.NoError(t, in.Validate(), "a plan the CLI accepts starts a run")
		tx, err := pool.Begin(t.Context())
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(t.Context()) }()
		for i, c := range calls {
			p, err := reg.Prepare(c)
			require.NoError(t, err)
			_, err = tx.Exec(t.Context(), `
INSERT INTO approvals (tenant, run_id, step, tool, args, args_hash, goal, reason, requested_at, deadline)
VALUES ('acme', 'fuzz', $1, $2, $3, $4, '', '', now(), now())`, i+1, c.Tool, p.Args, p.ArgsHash)
			require.NoError(t, err, "step %d: %s %s", i+1, c.Tool, p.Args)
		}
	})
}

// builtinRegistry is the registry of a deployment with the built-in tools
// only, as `oncerun start` checks plans against it.
func builtinRegistry(t testing.TB) *tools.Registry {
	t.Helper()
	reg, err := Env{}.Registry()
	require.NoError(t, err)
	return reg
}
