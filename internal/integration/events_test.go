package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/workflows"
)

// sseEvent is one event of a Server-Sent Events stream.
type sseEvent struct {
	id, typ string
	data    approvals.Event
}

// follow reads the run's stream from after on, as a browser or the CLI
// would, sending Last-Event-ID, until n events came or the stream ended;
// it returns them.
func (a *approvalsEnv) follow(runID, who string, after int64, n int) ([]sseEvent, bool) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.srv.URL+"/v1/runs/"+runID+"/events", nil)
	require.NoError(a.t, err)
	req.Header.Set("Authorization", "Bearer "+a.tokens[who])
	req.Header.Set("Accept", "text/event-stream")
	if after > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	}
	resp, err := a.srv.Client().Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	require.Equal(a.t, http.StatusOK, resp.StatusCode)
	require.Equal(a.t, "text/event-stream", resp.Header.Get("Content-Type"))
	sc := bufio.NewScanner(resp.Body)
	var (
		out []sseEvent
		cur sseEvent
	)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.typ != "" {
				out = append(out, cur)
				if len(out) == n {
					return out, false
				}
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			cur.typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			require.NoError(a.t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data))
		}
	}
	return out, true
}

// A run's story through the API: the JSON pages, the stream followed
// across a dropped connection with Last-Event-ID (each event once, in
// order), the tenant's stream, the runs' list, and another tenant's 404.
func TestARunsEventsAreServedOnceInOrderAcrossReconnects(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.startWorker("w", worker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("events")
	a.startPending("ops", run)

	// The first events, then the connection drops.
	first, ended := a.follow(run, "vic", 0, 3)
	require.False(t, ended)
	require.Len(t, first, 3)
	assert.Equal(t, "run.started", first[0].typ)
	last, err := strconv.ParseInt(first[2].id, 10, 64)
	require.NoError(t, err)

	r := a.do(http.MethodPost, stepPath(run, 2, "approve"), "dana", map[string]any{"args_hash": a.status("acme", run).Steps[1].ArgsHash})
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)

	rest, ended := a.follow(run, "vic", last, 0)
	require.True(t, ended, "the stream ends when the run does")
	all := append(first, rest...)
	var types []string
	for i, ev := range all {
		assert.Equal(t, strconv.Itoa(i+1), ev.id, "each offset once, in order")
		assert.EqualValues(t, i+1, ev.data.Offset)
		assert.Equal(t, ev.typ, ev.data.Type)
		types = append(types, fmt.Sprintf("%s@%d", ev.typ, ev.data.Step))
	}
	assert.Equal(t, []string{
		"run.started@0",
		"step.proposed@1", "step.running@1", "step.completed@1",
		"step.proposed@2", "step.waiting_for_approval@2", "approval.approved@2", "step.approved@2", "step.running@2",
		"step.applied@2", "step.completed@2",
		"run.completed@0",
	}, types)
	var decided map[string]any
	require.NoError(t, json.Unmarshal(all[6].data.Data, &decided))
	assert.Equal(t, "dana", decided["by"])

	// The same story as JSON pages.
	var page approvals.EventPage
	r = a.do(http.MethodGet, "/v1/runs/"+run+"/events?after=4&limit=3", "vic", nil)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	r.json(t, &page)
	require.Len(t, page.Events, 3)
	assert.EqualValues(t, 5, page.Events[0].Offset)
	assert.EqualValues(t, 7, page.NextAfter)
	assert.False(t, page.Ended)
	r = a.do(http.MethodGet, "/v1/runs/"+run+"/events?after=7", "vic", nil)
	r.json(t, &page)
	assert.True(t, page.Ended)

	// The status tells the same story: each step's last fact is its state.
	st := a.status("acme", run)
	assert.Equal(t, workflows.RunCompleted, st.State)
	assert.Len(t, st.Steps, 2)

	// The tenant's stream, from its start, holds the run's events; the
	// runs' list holds the run.
	// (Its reads wait for the server's oldest open transaction, which
	// other tests' may be.)
	n, after := 0, ""
	for deadline := time.Now().Add(time.Minute); n < len(all) && time.Now().Before(deadline); {
		var tp approvals.TenantEventPage
		r = a.do(http.MethodGet, "/v1/events?limit=1000&after="+after, "vic", nil)
		require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
		r.json(t, &tp)
		for _, ev := range tp.Events {
			if ev.RunID == run {
				n++
				assert.NotEmpty(t, ev.Cursor)
			}
		}
		if len(tp.Events) > 0 {
			after = tp.NextAfter
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	assert.Equal(t, len(all), n, "each of the run's events once in the tenant's stream")
	var list approvals.RunList
	r = a.do(http.MethodGet, "/v1/runs?state=completed&limit=1000", "vic", nil)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	r.json(t, &list)
	found := false
	for _, s := range list.Runs {
		if s.RunID == run {
			found = true
			assert.Equal(t, "completed", s.State)
			assert.Equal(t, "refund order 1001", s.Goal)
		}
	}
	assert.True(t, found, "the run is listed")

	// Another tenant's run is not there; bad input is named.
	a.expectError(a.do(http.MethodGet, "/v1/runs/"+run+"/events", "gus", nil), http.StatusNotFound, "not_found", run)
	a.expectError(a.do(http.MethodGet, "/v1/runs/"+run+"/events?after=x", "vic", nil), http.StatusBadRequest, "invalid_request", "after")
	a.expectError(a.do(http.MethodGet, "/v1/runs?state=sleeping", "vic", nil), http.StatusBadRequest, "invalid_request", "sleeping")
	a.expectError(a.do(http.MethodGet, "/v1/events?after=nope", "vic", nil), http.StatusBadRequest, "invalid_request", "nope")
}

// A model's words as it writes them: the planner asks for a stream, the
// run's followers get each piece as an ephemeral text.delta (no offset),
// then the turn's end, durable, with the whole message; a turn tried
// again says that its first attempt's text is discarded.
func TestAModelsTextStreamsToTheRunsFollowers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	release := make(chan struct{})
	var turns atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req map[string]any
		_ = json.NewDecoder(r.Body).Decode(&req)
		<-release
		n := turns.Add(1)
		if req["stream"] != true {
			http.Error(w, "this model streams only", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, piece := range []string{"Nothing ", "to refund: ", "the order is fine."} {
			b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": piece}}}})
			fmt.Fprintf(w, "data: %s\n\n", b)
			w.(http.Flusher).Flush()
			time.Sleep(150 * time.Millisecond)
		}
		if n == 1 {
			// The first attempt dies mid-answer: its text is discarded.
			return
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	e.openai = planner.OpenAIConfig{BaseURL: srv.URL + "/v1", Model: "fake-model"}
	e.startWorker("w", worker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("words")
	r := a.do(http.MethodPost, "/v1/runs", "ops", map[string]any{"run_id": run, "goal": "refund order 1001 if it needs one"})
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.srv.URL+"/v1/runs/"+run+"/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+a.tokens["vic"])
	req.Header.Set("Accept", "text/event-stream")
	resp, err := a.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var (
		story []string
		text  = map[string]string{}
		cur   sseEvent
		typ   string
	)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data))
		case line == "" && typ != "":
			if typ == "run.started" {
				// Following: the model may answer now.
				close(release)
			}
			var data map[string]any
			require.NoError(t, json.Unmarshal(cur.data.Data, &data))
			if typ == "text.delta" {
				assert.True(t, cur.data.Ephemeral)
				assert.Empty(t, cur.id, "an ephemeral event has no offset to resume from")
				text[data["message_id"].(string)] += data["text"].(string)
			} else {
				story = append(story, typ)
				if typ == "turn.discarded" {
					assert.EqualValues(t, 1, data["attempt"])
				}
				if typ == "turn.ended" {
					assert.Equal(t, "Nothing to refund: the order is fine.", data["message"])
				}
			}
			cur, typ = sseEvent{}, ""
		}
	}
	assert.Equal(t, []string{"run.started", "turn.started", "turn.discarded", "turn.ended", "run.completed"}, story)
	assert.Equal(t, "Nothing to refund: the order is fine.", text[run+"/turn-1/2"], "the second attempt's text, whole")
	assert.NotEmpty(t, text[run+"/turn-1/1"], "the first attempt's text came, and was discarded")
}

// Nothing lost or repeated: a run of 41 steps that continues as new
// several times and waits for an approval is followed while its worker
// and the service that serves its stream both go away; a new worker takes
// the run over, and the follower, reconnecting to a new service with
// Last-Event-ID, gets exactly the run's events, in order, each once.
func TestARunsStoryHoldsAcrossContinueAsNewAndTheLossOfWorkerAndService(t *testing.T) {
	t.Parallel()
	const notes = 20
	e := setup(t)
	run := e.id("story")
	var plan []planner.Call
	for i := range notes {
		plan = append(plan, call(shop.ToolAddOrderNote, fmt.Sprintf(`{"order_id":"1002","text":"note %d"}`, i+1)))
	}
	plan = append(plan, call(shop.ToolIssueCredit, `{"order_id":"1001","reason":"damaged_in_transit","amount_cents":25900,"currency":"EUR"}`))
	for i := range notes {
		plan = append(plan, call(shop.ToolAddOrderNote, fmt.Sprintf(`{"order_id":"1002","text":"after %d"}`, i+1)))
	}
	w1 := e.startWorker("w1", worker.Options{})
	first := e.serveApprovals(nil)
	_, err := e.runs.Start(context.Background(), workflows.RunInput{Tenant: "acme", RunID: run, Plan: plan,
		Limits: workflows.Limits{HistoryLimit: 40}})
	require.NoError(t, err)

	seen, ended := first.follow(run, "vic", 0, 12)
	require.False(t, ended)
	require.Len(t, seen, 12)
	// The worker and the service go away mid-run.
	w1.Stop()
	first.srv.CloseClientConnections()
	first.srv.Close()

	e.startWorker("w2", worker.Options{})
	second := e.serveApprovals(nil)
	st := e.waitFor("acme", run, "the credit's approval", func(s workflows.Status) bool {
		return s.State == workflows.RunWaitingForApproval
	})
	credit := st.Steps[notes]
	r := second.do(http.MethodPost, stepPath(run, credit.Step, "approve"), "dana", map[string]any{"args_hash": credit.ArgsHash})
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
	last, err := strconv.ParseInt(seen[len(seen)-1].id, 10, 64)
	require.NoError(t, err)
	rest, ended := second.follow(run, "vic", last, 0)
	require.True(t, ended)
	all := append(seen, rest...)

	final := e.result("acme", run)
	require.Equal(t, workflows.RunCompleted, final.State)
	assert.Positive(t, final.Generation, "the run continued as new")
	count := map[string]int{}
	steps := map[int64]int{}
	for i, ev := range all {
		require.Equal(t, strconv.Itoa(i+1), ev.id, "offset %d: each once, in order", i+1)
		count[ev.typ]++
		if ev.typ == "step.completed" {
			steps[ev.data.Step]++
		}
	}
	assert.Equal(t, 1, count["run.started"])
	assert.Equal(t, 1, count["run.completed"])
	assert.Equal(t, len(plan), count["step.proposed"])
	assert.Equal(t, len(plan), count["step.completed"])
	assert.Len(t, steps, len(plan), "every step completed once")
	assert.Equal(t, len(plan), count["step.applied"], "every effect applied once, in its transaction")
	assert.Equal(t, 1, count["approval.approved"])
	assert.Equal(t, all[len(all)-1].typ, "run.completed")
}
