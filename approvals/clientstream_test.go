package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/approvalstest"
	"github.com/oncerun/oncerun/internal/events"
)

// TestClientStreamReadsServerSentEvents: the reader keeps the fields of
// the format, skips comments and unknown fields, joins data lines and
// gives no message for a block without data or id.
func TestClientStreamReadsServerSentEvents(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		in    string
		want  []sseMessage
		retry time.Duration
	}{
		{"an event", "id: 3\nevent: step.running\ndata: {\"a\":1}\n\n", []sseMessage{{id: "3", hasID: true, event: "step.running", data: `{"a":1}`}}, 0},
		{"comments and retry", "retry: 2000\n\n: heartbeat\n\ndata: x\n\n", []sseMessage{{data: "x"}}, 2 * time.Second},
		{"lines of data", "data: a\ndata:b\ndata:  c\n\n", []sseMessage{{data: "a\nb\n c"}}, 0},
		{"CRLF", "id: 1\r\ndata: x\r\n\r\n", []sseMessage{{id: "1", hasID: true, data: "x"}}, 0},
		{"an id alone", "id: 7-2\n\n", []sseMessage{{id: "7-2", hasID: true}}, 0},
		{"an event without data", "event: ping\n\ndata: y\n\n", []sseMessage{{data: "y"}}, 0},
		{"unknown fields and a bad retry", "foo: bar\nretry: 2s\ndata\n\n", []sseMessage{{data: ""}}, 0},
		{"a message cut short", "data: a\n\ndata: b\n", []sseMessage{{data: "a"}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newSSEReader(strings.NewReader(tc.in), nil)
			var got []sseMessage
			for {
				m, err := r.next()
				if err == io.EOF {
					break
				}
				require.NoError(t, err)
				got = append(got, m)
			}
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.retry, r.retry)
		})
	}
}

// streamEnv serves the API and records where each stream asked to start.
type streamEnv struct {
	*approvalstest.World
	srv   *httptest.Server
	mu    sync.Mutex
	asked []string
}

func setupStream(t *testing.T) *streamEnv {
	t.Helper()
	e := &streamEnv{World: approvalstest.New(t)}
	s := testServer(t, e.World)
	t.Cleanup(s.Close)
	h := s.Handler()
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			e.mu.Lock()
			e.asked = append(e.asked, r.URL.Query().Get("after")+"|"+r.Header.Get("Last-Event-ID"))
			e.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// client is dana's client of tenant acme.
func (e *streamEnv) client() *Client { return &Client{BaseURL: e.srv.URL, Token: e.Tokens["dana"]} }

// record writes facts of tenant acme.
func (e *streamEnv) record(t *testing.T, facts ...events.Fact) {
	t.Helper()
	require.NoError(t, events.Record(context.Background(), e.Pool, "acme", facts))
}

func (e *streamEnv) starts() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.asked...)
}

// fact is a fact of run about step (0: the run itself).
func fact(run string, step int64, typ, data string) events.Fact {
	f := events.Fact{RunID: run, Source: run + "|" + typ + "|" + strconv.FormatInt(step, 10), Step: step, Type: typ}
	if data != "" {
		f.Data = json.RawMessage(data)
	}
	return f
}

// collector gathers the events Follow hands on.
type collector struct {
	mu  sync.Mutex
	evs []Event
}

func (c *collector) add(e Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evs = append(c.evs, e)
	return nil
}

func (c *collector) events() []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Event(nil), c.evs...)
}

func (c *collector) types() []string {
	var out []string
	for _, e := range c.events() {
		out = append(out, e.Type)
	}
	return out
}

// TestClientStreamFollowsARunToItsEnd: Follow hands on a run's events
// and its child's in order and returns once the run ended; Events reads
// the same log as a page.
func TestClientStreamFollowsARunToItsEnd(t *testing.T) {
	t.Parallel()
	e := setupStream(t)
	e.record(t, fact("r1", 0, "run.started", `{"goal":"refund"}`), fact("r1", 1, "step.running", `{"tool":"spawn"}`),
		fact("r1.1", 0, "run.started", ""), fact("r1.1", 0, "run.completed", ""),
		fact("r1", 1, "step.completed", `{"tool":"spawn"}`), fact("r1", 0, "run.completed", ""))

	var c collector
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, e.client().Follow(ctx, FollowRequest{RunID: "r1"}, c.add))
	assert.Equal(t, []string{"run.started", "step.running", "run.started", "run.completed", "step.completed", "run.completed"}, c.types())
	for i, ev := range c.events() {
		assert.Equal(t, int64(i+1), ev.Offset)
	}
	assert.Equal(t, "r1.1", c.events()[2].RunID)

	var from3 collector
	require.NoError(t, e.client().Follow(ctx, FollowRequest{RunID: "r1", After: 3}, from3.add))
	assert.Equal(t, []string{"run.completed", "step.completed", "run.completed"}, from3.types())

	page, err := e.client().Events(ctx, "r1", 4, 1)
	require.NoError(t, err)
	require.Len(t, page.Events, 1)
	assert.Equal(t, "step.completed", page.Events[0].Type)
	assert.Equal(t, int64(5), page.NextAfter)
	assert.False(t, page.Ended)
}

// TestClientStreamResumesAfterALostConnection: a connection closed under
// a follower is opened again from the last event it handed on, and each
// event is handed on once, in order.
func TestClientStreamResumesAfterALostConnection(t *testing.T) {
	t.Parallel()
	e := setupStream(t)
	e.record(t, fact("r1", 0, "run.started", ""), fact("r1", 1, "step.running", `{"tool":"lookup_order"}`))

	var (
		c    collector
		lost []error
		mu   sync.Mutex
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- e.client().Follow(ctx, FollowRequest{RunID: "r1", Lost: func(err error, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			lost = append(lost, err)
		}}, c.add)
	}()
	require.Eventually(t, func() bool { return len(c.events()) == 2 }, 10*time.Second, 10*time.Millisecond)
	e.srv.CloseClientConnections()
	e.record(t, fact("r1", 1, "step.completed", `{"tool":"lookup_order"}`), fact("r1", 0, "run.completed", ""))

	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("Follow did not return after the run ended")
	}
	assert.Equal(t, []string{"run.started", "step.running", "step.completed", "run.completed"}, c.types())
	for i, ev := range c.events() {
		assert.Equal(t, int64(i+1), ev.Offset)
	}
	mu.Lock()
	assert.NotEmpty(t, lost, "the lost connection was told")
	mu.Unlock()
	starts := e.starts()
	require.GreaterOrEqual(t, len(starts), 2)
	assert.Equal(t, "0|0", starts[0])
	assert.Equal(t, "2|2", starts[1], "the second connection starts after the last event handed on")
}

// TestClientStreamFollowsTheTenant: without a run, Follow hands on the
// events of every run of the tenant after the cursor, and no other
// tenant's.
func TestClientStreamFollowsTheTenant(t *testing.T) {
	t.Parallel()
	e := setupStream(t)
	e.record(t, fact("r0", 0, "run.started", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The tenant's stream shows a transaction once every older one on the
	// server has ended: other tests' may hold it back a moment.
	var page TenantEventPage
	require.Eventually(t, func() bool {
		var err error
		page, err = e.client().TenantEvents(ctx, "", 0)
		return err == nil && len(page.Events) == 1
	}, time.Minute, 20*time.Millisecond)

	var c collector
	go func() { _ = e.client().Follow(ctx, FollowRequest{Cursor: page.NextAfter}, c.add) }()
	e.record(t, fact("r1", 0, "run.started", ""), fact("r2", 0, "run.started", ""), fact("r1", 0, "run.completed", ""))
	require.NoError(t, events.Record(ctx, e.Pool, "globex", []events.Fact{fact("g1", 0, "run.started", "")}))
	require.Eventually(t, func() bool { return len(c.events()) >= 3 }, time.Minute, 10*time.Millisecond)
	var got []string
	for _, ev := range c.events() {
		got = append(got, ev.RunID+" "+ev.Type)
		assert.NotEmpty(t, ev.Cursor)
	}
	assert.Equal(t, []string{"r1 run.started", "r2 run.started", "r1 run.completed"}, got)
}

// TestClientStreamStopsAtARefusal: an unknown run and a bad token are the
// service's refusals, returned at once; an error of the handler ends
// Follow with it.
func TestClientStreamStopsAtARefusal(t *testing.T) {
	t.Parallel()
	e := setupStream(t)
	e.record(t, fact("r1", 0, "run.started", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	never := func(Event) error { return errors.New("no event was expected") }

	err := e.client().Follow(ctx, FollowRequest{RunID: "nope"}, never)
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, http.StatusNotFound, ae.Status)
	assert.Contains(t, err.Error(), `"nope"`)

	err = (&Client{BaseURL: e.srv.URL, Token: "oncerun_wrong"}).Follow(ctx, FollowRequest{RunID: "r1"}, never)
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, http.StatusUnauthorized, ae.Status)

	stop := errors.New("enough")
	err = e.client().Follow(ctx, FollowRequest{RunID: "r1"}, func(Event) error { return stop })
	assert.ErrorIs(t, err, stop)
	assert.Len(t, e.starts(), 3, "no refusal was asked again")
}
