package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
)

// TestDecideRefusesBadFlagsBeforeConnecting: without ONCERUN_API, what
// the decision would record is checked before anything is dialled, and the
// error names the flag.
func TestDecideRefusesBadFlagsBeforeConnecting(t *testing.T) {
	t.Parallel()
	base := []string{"approve", "--run-id", "r1", "--step", "3"}
	for _, tc := range []struct {
		name string
		env  Env
		args []string
		want string
	}{
		{"no tenant", unreachable, nil, "give --tenant T"},
		{"no name", Env{TemporalAddress: unreachable.TemporalAddress, DatabaseURL: unreachable.DatabaseURL}, []string{"--tenant", "acme"}, "give --as NAME"},
		{"a name with an escape", unreachable, []string{"--tenant", "acme", "--as", "da\x1bna"}, "--as: approver holds the control character U+001B"},
		{"a comment with an escape", unreachable, []string{"--tenant", "acme", "--comment", "ok\x1b[2J"}, "--comment holds the control character U+001B"},
		{"step zero", unreachable, []string{"--tenant", "acme", "--step", "0"}, "--step 0: steps are numbered from 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			_, err := run(t, tc.env, append(append([]string(nil), base...), tc.args...)...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Less(t, time.Since(start), 500*time.Millisecond, "refused before connecting")
		})
	}
}

// TestDecideThroughTheAPIPrintsJSON: with ONCERUN_API, --json prints the
// service's answer as it came.
func TestDecideThroughTheAPIPrintsJSON(t *testing.T) {
	t.Parallel()
	var path string
	var body approvals.DecideRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path = r.Method + " " + r.URL.Path
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(approvals.DecideResponse{Decision: approvals.DecisionRecord{
			RunID: "r1", Step: 3, Decision: "reject", Approver: "dana", Role: approvals.RoleApprover, ArgsHash: body.ArgsHash, Via: "api"}})
	}))
	t.Cleanup(srv.Close)
	hash := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

	out, err := run(t, Env{APIURL: srv.URL, Token: "oncerun_x"}, "reject", "--run-id", "r1", "--step", "3", "--args-hash", hash, "--json")
	require.NoError(t, err, out)
	assert.Equal(t, "POST /v1/runs/r1/steps/3/reject", path)
	var res approvals.DecideResponse
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	assert.Equal(t, "dana", res.Decision.Approver)
	assert.Equal(t, hash, res.Decision.ArgsHash)
	assert.False(t, res.Repeated)
}

func TestLeftSaysTheTimeToTheDeadlineAsTheInboxDoes(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	assert.Equal(t, "2 d 4 h", left(now, now.Add(52*time.Hour+30*time.Minute)))
	assert.Equal(t, "passed", left(now, now))
	assert.Equal(t, "passed", left(now, now.Add(-time.Hour)))
}

// TestDecideThroughTheAPIBindsTheRoundItRead: without --args-hash, the
// decision carries the hash and the round the approvals list shows, so a
// step that moved to another round is refused by the service.
func TestDecideThroughTheAPIBindsTheRoundItRead(t *testing.T) {
	t.Parallel()
	hash := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	var body approvals.DecideRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			_ = json.NewEncoder(w).Encode(approvals.ApprovalList{State: r.URL.Query().Get("state"), Approvals: []approvals.Item{{
				Kind: approvals.KindApproval, RunID: "r1", Step: 3, ArgsHash: hash, ApprovalKind: "limit", Round: 2}}})
			return
		}
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &body)
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(approvals.DecideResponse{Decision: approvals.DecisionRecord{
			RunID: "r1", Step: 3, Decision: "approve", Approver: "dana", Role: approvals.RoleApprover, ArgsHash: body.ArgsHash, Via: "api"}})
	}))
	t.Cleanup(srv.Close)

	out, err := run(t, Env{APIURL: srv.URL, Token: "oncerun_x"}, "approve", "--run-id", "r1", "--step", "3", "--json")
	require.NoError(t, err, out)
	assert.Equal(t, hash, body.ArgsHash)
	assert.Equal(t, 2, body.Round)

	_, err = run(t, Env{APIURL: srv.URL, Token: "oncerun_x"}, "approve", "--run-id", "r1", "--step", "3", "--round", "1", "--json")
	require.NoError(t, err)
	assert.Equal(t, 1, body.Round, "--round is sent as given")
}
