package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstest"
	"github.com/oncerun/oncerun/internal/events"
	"github.com/oncerun/oncerun/internal/runs"
)

// watchEnv is an approvals service over a database of its own, and the
// environments of the CLI that watch through it (api) and without it
// (direct).
type watchEnv struct {
	*approvalstest.World
	srv         *httptest.Server
	api, direct Env
	at          time.Time
}

func setupWatch(t *testing.T) *watchEnv {
	t.Helper()
	w := &watchEnv{World: approvalstest.New(t), at: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	tok, entry, err := approvals.NewToken(approvals.Identity{Name: "dana", Tenant: "acme", Role: approvals.RoleApprover})
	require.NoError(t, err)
	raw, err := json.Marshal([]approvals.TokenEntry{entry})
	require.NoError(t, err)
	toks, err := approvals.ParseTokens(raw)
	require.NoError(t, err)
	s, err := approvals.New(approvals.Config{Runs: &runs.Client{Temporal: w.Temporal, Pool: w.Pool}, Pool: w.Pool, Tokens: toks, Tools: w.Reg})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	w.srv = httptest.NewServer(s.Handler())
	t.Cleanup(w.srv.Close)
	w.api = Env{APIURL: w.srv.URL, Token: tok}
	w.direct = Env{DatabaseURL: w.Pool.Config().ConnString()}
	return w
}

// fact is a fact of run about step (0: the run itself), sec seconds into
// the test's minute.
func (w *watchEnv) fact(run string, step int64, typ, data string, sec int) events.Fact {
	f := events.Fact{RunID: run, Source: run + "|" + typ + "|" + strconv.FormatInt(step, 10), Step: step, Type: typ,
		At: w.at.Add(time.Duration(sec) * time.Second)}
	if data != "" {
		f.Data = json.RawMessage(data)
	}
	return f
}

// record writes facts of tenant acme.
func (w *watchEnv) record(t *testing.T, facts ...events.Fact) {
	t.Helper()
	require.NoError(t, events.Record(context.Background(), w.Pool, "acme", facts))
}

// lockedBuffer is a buffer a running command writes to while the test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// watch runs the CLI with args until it exits or ctx is done, and
// returns what it printed on stdout and stderr, and its exit status.
func watch(ctx context.Context, env Env, stdout, stderr *lockedBuffer, args ...string) int {
	cmd := NewRoot(env)
	cmd.SetArgs(args)
	return ExitCode(Execute(ctx, cmd, stdout, stderr))
}

// watchNow runs `oncerun watch args` to its end, within 20 seconds.
func watchNow(t *testing.T, env Env, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out, errOut lockedBuffer
	code = watch(ctx, env, &out, &errOut, append([]string{"watch"}, args...)...)
	require.NoError(t, ctx.Err(), "the watch ended on its own: %s", errOut.String())
	return out.String(), errOut.String(), code
}

// modes are the two ways the CLI watches: through the service, and in
// PostgreSQL, which needs the run's tenant.
var modes = []struct {
	name  string
	env   func(*watchEnv) Env
	extra []string
}{
	{"api", func(w *watchEnv) Env { return w.api }, nil},
	{"direct", func(w *watchEnv) Env { return w.direct }, []string{"--tenant", "acme"}},
}

// TestWatchPrintsARunToItsEnd: watch prints each event of the run and its
// child once, in order, from the beginning or after --after, and exits 0
// when the run completed; --json prints the API's events, one a line.
func TestWatchPrintsARunToItsEnd(t *testing.T) {
	t.Parallel()
	w := setupWatch(t)
	w.record(t, w.fact("r1", 0, "run.started", `{"goal":"refund order 1001","planner":"script"}`, 0),
		w.fact("r1", 1, "step.proposed", `{"tool":"issue_credit","args_hash":"abc","class":"external","turn":1}`, 1),
		w.fact("r1", 1, "step.waiting_for_approval", `{"tool":"issue_credit"}`, 2),
		w.fact("r1", 1, "approval.approved", `{"by":"dana","role":"approver","via":"api"}`, 3),
		w.fact("r1.1", 0, "run.started", `{"parent_run_id":"r1","parent_step":1}`, 4),
		w.fact("r1.1", 0, "run.completed", `{"steps":0}`, 5),
		w.fact("r1", 1, "step.completed", `{"tool":"issue_credit","result_bytes":42}`, 6),
		w.fact("r1", 0, "run.completed", `{"steps":1}`, 7))
	want := []string{
		"2026-12-01T09:00:00Z  #1  run.started  goal=\"refund order 1001\" planner=script",
		"2026-12-01T09:00:01Z  #2  step 1  step.proposed  tool=issue_credit turn=1",
		"2026-12-01T09:00:02Z  #3  step 1  step.waiting_for_approval  tool=issue_credit",
		"2026-12-01T09:00:03Z  #4  step 1  approval.approved  by=dana role=approver via=api",
		"2026-12-01T09:00:04Z  #5  r1.1  run.started  parent_run_id=r1 parent_step=1",
		"2026-12-01T09:00:05Z  #6  r1.1  run.completed  steps=0",
		"2026-12-01T09:00:06Z  #7  step 1  step.completed  tool=issue_credit",
		"2026-12-01T09:00:07Z  #8  run.completed  steps=1",
	}
	resp, err := http.NewRequest(http.MethodGet, w.srv.URL+"/v1/runs/r1/events", nil)
	require.NoError(t, err)
	resp.Header.Set("Authorization", "Bearer "+w.api.Token)
	res, err := http.DefaultClient.Do(resp)
	require.NoError(t, err)
	var page struct{ Events []json.RawMessage }
	require.NoError(t, json.NewDecoder(res.Body).Decode(&page))
	res.Body.Close()
	require.Len(t, page.Events, len(want))

	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			out, errOut, code := watchNow(t, m.env(w), append([]string{"r1"}, m.extra...)...)
			assert.Equal(t, 0, code, errOut)
			assert.Equal(t, strings.Join(want, "\n")+"\n", out)

			out, _, code = watchNow(t, m.env(w), append([]string{"r1", "--after", "5"}, m.extra...)...)
			assert.Equal(t, 0, code)
			assert.Equal(t, strings.Join(want[5:], "\n")+"\n", out)

			out, _, code = watchNow(t, m.env(w), append([]string{"r1.1", "--json"}, m.extra...)...)
			assert.Equal(t, 0, code)
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			require.Len(t, lines, 2, "the child's events, to its end")
			assert.JSONEq(t, string(page.Events[4]), lines[0])
			assert.JSONEq(t, string(page.Events[5]), lines[1])

			out, _, code = watchNow(t, m.env(w), append([]string{"r1", "--json"}, m.extra...)...)
			assert.Equal(t, 0, code)
			lines = strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			require.Len(t, lines, len(page.Events))
			for i, l := range lines {
				assert.JSONEq(t, string(page.Events[i]), l, "line %d", i+1)
			}
		})
	}
}

// TestWatchExitsWithTheRunsOutcome: a failed run exits 1 and a cancelled
// one 2, saying so with the run's error.
func TestWatchExitsWithTheRunsOutcome(t *testing.T) {
	t.Parallel()
	w := setupWatch(t)
	w.record(t, w.fact("r2", 0, "run.started", "", 0),
		w.fact("r2", 1, "step.failed", `{"tool":"issue_credit","error":"card declined"}`, 1),
		w.fact("r2", 0, "run.failed", `{"steps":1,"error":"step 1 failed: card declined"}`, 2),
		w.fact("r3", 0, "run.started", "", 0), w.fact("r3", 0, "run.cancelled", `{"steps":0}`, 1))
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			out, errOut, code := watchNow(t, m.env(w), append([]string{"r2"}, m.extra...)...)
			assert.Equal(t, 1, code)
			assert.Contains(t, out, "#2  step 1  step.failed  tool=issue_credit error=\"card declined\"\n")
			assert.Contains(t, errOut, "run r2 failed: step 1 failed: card declined")

			out, errOut, code = watchNow(t, m.env(w), append([]string{"r3", "--json"}, m.extra...)...)
			assert.Equal(t, 2, code)
			assert.Equal(t, 2, strings.Count(out, "\n"))
			assert.Contains(t, errOut, "run r3 was cancelled")
		})
	}
}

// TestWatchResumesAfterALostConnection: when the service drops the
// stream, watch connects again from the last event it printed: each event
// is printed once, in order.
func TestWatchResumesAfterALostConnection(t *testing.T) {
	t.Parallel()
	w := setupWatch(t)
	w.record(t, w.fact("r1", 0, "run.started", "", 0), w.fact("r1", 1, "step.running", `{"tool":"lookup_order"}`, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut lockedBuffer
	done := make(chan int, 1)
	go func() { done <- watch(ctx, w.api, &out, &errOut, "watch", "r1", "--json") }()
	require.Eventually(t, func() bool { return strings.Count(out.String(), "\n") == 2 }, 10*time.Second, 10*time.Millisecond)

	w.srv.CloseClientConnections()
	w.record(t, w.fact("r1", 1, "step.completed", `{"tool":"lookup_order"}`, 2))
	w.srv.CloseClientConnections()
	w.record(t, w.fact("r1", 2, "step.running", `{"tool":"issue_credit"}`, 3), w.fact("r1", 2, "step.completed", `{"tool":"issue_credit"}`, 4),
		w.fact("r1", 0, "run.completed", "", 5))
	select {
	case code := <-done:
		assert.Equal(t, 0, code, errOut.String())
	case <-ctx.Done():
		t.Fatalf("watch did not end with the run: %s", errOut.String())
	}
	var offsets []int64
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		var e approvals.Event
		require.NoError(t, json.Unmarshal([]byte(l), &e), l)
		offsets = append(offsets, e.Offset)
	}
	assert.Equal(t, []int64{1, 2, 3, 4, 5, 6}, offsets)
	assert.Contains(t, errOut.String(), "connecting again in")
}

// TestWatchFollowsATenant: watch --tenant prints the events of every run
// of the tenant (after --after) with their run, and none of another
// tenant's, until it is interrupted; it then exits 0.
func TestWatchFollowsATenant(t *testing.T) {
	t.Parallel()
	w := setupWatch(t)
	w.record(t, w.fact("r0", 0, "run.started", "", 0))
	// The tenant's stream shows a transaction once every older one on the
	// server has ended: other tests' may hold it back a moment.
	var page approvals.TenantEventPage
	require.Eventually(t, func() bool {
		var err error
		page, err = (&approvals.Client{BaseURL: w.srv.URL, Token: w.api.Token}).TenantEvents(context.Background(), "", 0)
		return err == nil && len(page.Events) == 1
	}, time.Minute, 20*time.Millisecond)
	w.record(t, w.fact("r1", 0, "run.started", "", 1), w.fact("r2", 0, "run.started", "", 2),
		w.fact("r1", 1, "step.running", `{"tool":"lookup_order"}`, 3), w.fact("r1", 0, "run.completed", "", 4))
	require.NoError(t, events.Record(context.Background(), w.Pool, "globex", []events.Fact{w.fact("g1", 0, "run.started", "", 1)}))
	want := "2026-12-01T09:00:01Z  r1  run.started\n" +
		"2026-12-01T09:00:02Z  r2  run.started\n" +
		"2026-12-01T09:00:03Z  r1  step 1  step.running  tool=lookup_order\n" +
		"2026-12-01T09:00:04Z  r1  run.completed\n"
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var out, errOut lockedBuffer
			done := make(chan int, 1)
			go func() {
				done <- watch(ctx, m.env(w), &out, &errOut, "watch", "--tenant", "acme", "--after", page.NextAfter)
			}()
			require.Eventually(t, func() bool { return out.String() == want }, time.Minute, 10*time.Millisecond, out.String())
			select {
			case code := <-done:
				t.Fatalf("watch --tenant ended on its own, with %d: %s", code, errOut.String())
			case <-time.After(300 * time.Millisecond):
			}
			cancel()
			assert.Equal(t, 0, <-done, errOut.String())
			assert.Equal(t, want, out.String())
		})
	}
}

// TestWatchRefusesBadInput: an unknown run is named; a watch of nothing,
// of a run and a tenant through the API, of a run without its tenant in
// PostgreSQL, or after a bad offset is refused before anything is read.
func TestWatchRefusesBadInput(t *testing.T) {
	t.Parallel()
	w := setupWatch(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			_, errOut, code := watchNow(t, m.env(w), append([]string{"nope"}, m.extra...)...)
			assert.NotZero(t, code)
			assert.Contains(t, errOut, `no run "nope"`)
		})
	}
	for _, tc := range []struct {
		name string
		env  Env
		args []string
		want string
	}{
		{"nothing to watch", w.api, nil, "give the run to follow, oncerun watch RUN-ID, or --tenant T"},
		{"a run and a tenant through the API", w.api, []string{"r1", "--tenant", "acme"}, "--tenant with a RUN-ID and ONCERUN_API set"},
		{"a run without its tenant", unreachable, []string{"r1"}, "give --tenant T, the run's tenant"},
		{"an offset that is not one", unreachable, []string{"r1", "--tenant", "acme", "--after", "x"}, `--after "x": give an offset`},
		{"a bad tenant", unreachable, []string{"--tenant", "ac\x1bme"}, "--tenant"},
		{"two runs", w.api, []string{"r1", "r2"}, "accepts at most 1 arg(s)"},
		{"an empty run", w.api, []string{""}, "the RUN-ID is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, errOut, code := watchNow(t, tc.env, tc.args...)
			assert.Equal(t, 1, code)
			assert.Contains(t, errOut, tc.want)
			assert.Less(t, time.Since(start), 2*time.Second, "refused before connecting")
		})
	}
}

// TestWatchPrintsTextInline: a model's text deltas print on one line as
// they come, a line per message, ended by the next event.
func TestWatchPrintsTextInline(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	w := &watcher{out: &out, run: "r1"}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	delta := func(run, msg, text string) approvals.Event {
		data, _ := json.Marshal(map[string]string{"message_id": msg, "text": text})
		return approvals.Event{RunID: run, Type: "text.delta", At: at, Data: data, Ephemeral: true}
	}
	for _, e := range []approvals.Event{
		delta("r1", "m1", "Looking up "), delta("r1", "m1", "the order.\nThen"), delta("r1", "m2", "Done."),
		delta("r9", "m3", "another run's"),
		{Offset: 4, RunID: "r1", Step: 1, Type: "step.proposed", At: at, Data: json.RawMessage(`{"tool":"lookup_order"}`)},
	} {
		_, err := w.print(e)
		require.NoError(t, err)
	}
	assert.Equal(t, "2026-12-01T09:00:00Z  text  Looking up the order.\\nThen\n"+
		"2026-12-01T09:00:00Z  text  Done.\n"+
		"2026-12-01T09:00:00Z  #4  step 1  step.proposed  tool=lookup_order\n", out.String())
}
