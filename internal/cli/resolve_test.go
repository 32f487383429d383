package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
)

// unreachable is an environment whose Temporal and database do not answer
// at once: a command that gets past its own checks fails on connecting.
var unreachable = Env{TemporalAddress: "127.0.0.1:1", DatabaseURL: "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", User: "dana"}

// TestResolveRefusesBadFlags: the flags are checked before anything is
// sent, in both modes, and the error names the flag.
func TestResolveRefusesBadFlags(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusTeapot)
	}))
	t.Cleanup(srv.Close)
	base := []string{"resolve", "--run-id", "r1"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad outcome", []string{"--step", "2", "--outcome", "maybe"}, `--outcome "maybe": give applied or not_applied`},
		{"result not JSON", []string{"--step", "2", "--outcome", "applied", "--result", "{refund"}, "--result is not valid JSON"},
		{"result with not_applied", []string{"--step", "2", "--outcome", "not_applied", "--result", `{"id":"re_1"}`}, "--result is given only with --outcome applied"},
		{"result with a control character", []string{"--step", "2", "--outcome", "applied", "--result", `{"id":"re\u001b"}`}, "result holds the control character U+001B"},
		{"result beyond the range of a double", []string{"--step", "2", "--outcome", "applied", "--result", `{"amount":1e400}`}, "--result holds the number 1e400 at amount, beyond the range of a double (about ±1.8e308): send it as a string"},
		{"step zero", []string{"--step", "0", "--outcome", "applied"}, "--step 0: steps are numbered from 1"},
		{"negative round", []string{"--step", "2", "--round", "-1", "--outcome", "applied"}, "--round -1"},
		{"note with an escape", []string{"--step", "2", "--outcome", "applied", "--note", "ok\x1b[2J"}, "--note holds the control character U+001B"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			direct := append([]string{"--tenant", "acme"}, tc.args...)
			_, err := run(t, unreachable, append(base, direct...)...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want, "without ONCERUN_API")

			_, err = run(t, Env{APIURL: srv.URL, Token: "oncerun_x"}, append(base, tc.args...)...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want, "with ONCERUN_API")
		})
	}
	out, err := run(t, unreachable, "resolve", "--tenant", "acme", "--run-id", "r1", "--step", "2")
	require.Error(t, err, out)
	assert.Contains(t, err.Error(), `"outcome" not set`)
	assert.Zero(t, hits.Load(), "no refused command reached the service")
}

// TestResolveThroughTheAPI: with ONCERUN_API the answer is posted to the
// step's resolve endpoint as the service reads it; --tenant and --as mean
// nothing there and are refused.
func TestResolveThroughTheAPI(t *testing.T) {
	t.Parallel()
	var got struct {
		path string
		body approvals.ResolveRequest
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.path = r.Method + " " + r.URL.Path
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &got.body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(approvals.ResolveResponse{Resolution: approvals.ResolutionRecord{
			RunID: "r1", Step: 2, Round: 1, Outcome: "applied", Result: json.RawMessage(`{"id":"re_1"}`), Resolver: "dana", Via: "api"}})
	}))
	t.Cleanup(srv.Close)
	env := Env{APIURL: srv.URL, Token: "oncerun_x"}

	out, err := run(t, env, "resolve", "--run-id", "r1", "--step", "2", "--outcome", "applied", "--result", `{"id": "re_1"}`, "--note", "seen in the dashboard")
	require.NoError(t, err, out)
	assert.Equal(t, "POST /v1/runs/r1/steps/2/resolve", got.path)
	assert.Equal(t, "applied", got.body.Outcome)
	assert.JSONEq(t, `{"id":"re_1"}`, string(got.body.Result))
	assert.Equal(t, "seen in the dashboard", got.body.Note)
	assert.Equal(t, "answered applied with result {\"id\":\"re_1\"} for round 1 of step 2 of run r1 as dana; the run applies the answer\n", out)

	for _, flag := range []string{"--tenant", "--as"} {
		_, err := run(t, env, "resolve", "--run-id", "r1", "--step", "2", "--outcome", "applied", flag, "x")
		require.Error(t, err)
		assert.Contains(t, err.Error(), flag+" with ONCERUN_API set")
	}
}
