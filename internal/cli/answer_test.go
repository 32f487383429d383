package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/workflows"
)

// The answer's flags are checked before anything is sent, in both modes,
// and the error names the flag.
func TestAnswerRefusesBadFlags(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusTeapot)
	}))
	t.Cleanup(srv.Close)
	base := []string{"answer", "--run-id", "r1"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no answer", []string{"--step", "1"}, "give --content JSON to accept, --action decline or cancel, or --answers JSON"},
		{"accept without content", []string{"--step", "1", "--action", "accept"}, "--action accept: give the values with --content"},
		{"content with a decline", []string{"--step", "1", "--action", "decline", "--content", `{"size":"M"}`}, "--content is given only to accept"},
		{"an action that is none", []string{"--step", "1", "--action", "later"}, `--action "later": give accept, decline or cancel`},
		{"content not JSON", []string{"--step", "1", "--content", "{size"}, "--content is not valid JSON"},
		{"content not an object", []string{"--step", "1", "--content", `["M"]`}, "--content [\"M\"]: want a JSON object"},
		{"answers and content", []string{"--step", "1", "--answers", `{}`, "--content", `{"size":"M"}`}, "give it alone"},
		{"answers of another shape", []string{"--step", "1", "--answers", `{"size":"M"}`}, "--answers: want"},
		{"an answer's action that is none", []string{"--step", "1", "--answers", `{"size":{"action":"later"}}`}, `answers.size: action "later"`},
		{"step zero", []string{"--step", "0", "--action", "decline"}, "--step 0: steps are numbered from 1"},
		{"negative round", []string{"--step", "1", "--round", "-2", "--action", "decline"}, "--round -2"},
		{"note with an escape", []string{"--step", "1", "--action", "decline", "--note", "ok\x1b[2J"}, "--note holds the control character U+001B"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := run(t, unreachable, append(base, append([]string{"--tenant", "acme"}, tc.args...)...)...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want, "without ONCERUN_API")
			_, err = run(t, Env{APIURL: srv.URL, Token: "oncerun_x"}, append(base, tc.args...)...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want, "with ONCERUN_API")
		})
	}
	assert.Zero(t, hits.Load(), "no refused command reached the service")
}

// With ONCERUN_API the answer is posted to the step's answer endpoint as
// the service reads it, and printed; --json prints the answer of record.
func TestAnswerThroughTheAPI(t *testing.T) {
	t.Parallel()
	var got struct {
		path string
		body approvals.AnswerRequest
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.path = r.Method + " " + r.URL.Path
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &got.body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(approvals.AnswerResponse{Answer: approvals.AnswerRecord{RunID: "r1", Step: 1, Round: 2,
			Answers:  map[string]workflows.QuestionAnswer{"size": {Action: "accept", Content: json.RawMessage(`{"size":"M"}`)}},
			Answerer: "dana", Via: "api", AnsweredAt: time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)}})
	}))
	t.Cleanup(srv.Close)
	env := Env{APIURL: srv.URL, Token: "oncerun_x"}
	out, err := run(t, env, "answer", "--run-id", "r1", "--step", "1", "--round", "2", "--content", `{"size":"M"}`, "--note", "she said so")
	require.NoError(t, err)
	assert.Equal(t, "POST /v1/runs/r1/steps/1/answer", got.path)
	assert.Equal(t, "accept", got.body.Action)
	assert.JSONEq(t, `{"size":"M"}`, string(got.body.Content))
	assert.Equal(t, 2, got.body.Round)
	assert.Equal(t, "she said so", got.body.Note)
	assert.Equal(t, "answered round 2 of step 1 of run r1 as dana: size accept {\"size\":\"M\"}\n", out)

	out, err = run(t, env, "answer", "--run-id", "r1", "--step", "1", "--answers", `{"size":{"action":"decline"}}`, "--json")
	require.NoError(t, err)
	assert.Equal(t, map[string]workflows.QuestionAnswer{"size": {Action: "decline"}}, got.body.Answers)
	var res approvals.AnswerResponse
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	assert.Equal(t, "dana", res.Answer.Answerer)

	_, err = run(t, env, "answer", "--tenant", "acme", "--run-id", "r1", "--step", "1", "--action", "cancel")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--tenant")
}
