package approvals

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/approvalstest"
)

// TestWhatIsAudited holds the one audit rule of the four kinds of
// request a person sends about a run: a control (run_controls), a
// decision (approval_decisions), an answer (question_answers) and a
// resolution (resolution_decisions). Every request of an authenticated
// caller on a run or step of the tenant leaves a row, a forbidden one
// included; a request naming a run or step that does not exist leaves
// none, nor does one without a valid token.
func TestWhatIsAudited(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind string
		// table is the kind's audit table, and who the column naming
		// who sent the request.
		table, who string
		// given makes run r1 the kind's target and returns the body of
		// a request on it.
		given func(e *apiEnv) string
		// path is the request's path on run, at step 2 for a step's.
		path func(run string, step string) string
	}{
		{"control", "run_controls", "actor", func(e *apiEnv) string {
			e.Running("r1", false)
			return `{"reason": "wrong customer"}`
		}, func(run, _ string) string { return "/v1/runs/" + run + "/cancel" }},
		{"decision", "approval_decisions", "approver", func(e *apiEnv) string {
			hash := e.Pending("r1", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "")
			return `{"args_hash": "` + hash + `"}`
		}, func(run, step string) string { return "/v1/runs/" + run + "/steps/" + step + "/approve" }},
		{"answer", "question_answers", "answerer", func(e *apiEnv) string {
			e.Asked("r1", 2, false)
			return `{"action": "accept", "content": {"size": "M"}}`
		}, func(run, step string) string { return "/v1/runs/" + run + "/steps/" + step + "/answer" }},
		{"resolution", "resolution_decisions", "resolver", func(e *apiEnv) string {
			e.Unresolved("r1", 2)
			return `{"outcome": "applied"}`
		}, func(run, step string) string { return "/v1/runs/" + run + "/steps/" + step + "/resolve" }},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			t.Parallel()
			e := setupAPI(t)
			body := tc.given(e)
			rows := func() []string {
				t.Helper()
				rs, err := e.Pool.Query(context.Background(), `SELECT run_id || ' ' || `+tc.who+` || ' ' || outcome FROM `+tc.table+` ORDER BY id`)
				require.NoError(t, err)
				var got []string
				for rs.Next() {
					var s string
					require.NoError(t, rs.Scan(&s))
					got = append(got, s)
				}
				require.NoError(t, rs.Err())
				return got
			}

			status, _, resp := e.Call("vic", http.MethodPost, tc.path("r1", "2"), body)
			assert.Equal(t, http.StatusForbidden, status, resp)
			assert.Equal(t, "forbidden", errorOf(t, resp).Code)
			assert.Equal(t, []string{"r1 vic forbidden"}, rows(), "a viewer's request is audited")

			for _, path := range []string{tc.path("r-made-up", "2"), tc.path("r1", "9")} {
				if path == tc.path("r1", "9") && tc.kind == "control" {
					continue // a control names no step
				}
				for _, who := range []string{"vic", "ops"} {
					status, _, resp = e.Call(who, http.MethodPost, path, body)
					assert.Equal(t, http.StatusNotFound, status, "%s %s: %s", who, path, resp)
				}
			}
			status, _ = postWithoutToken(t, e.URL+tc.path("r1", "2"), body)
			assert.Equal(t, http.StatusUnauthorized, status)
			assert.Equal(t, []string{"r1 vic forbidden"}, rows(), "no row for what does not exist, nor without a token")
		})
	}
}

// postWithoutToken posts body to url as JSON with no Authorization.
func postWithoutToken(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(raw)
}
