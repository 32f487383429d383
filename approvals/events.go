package approvals

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/events"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/untrusted"
)

// Event is one fact of a run's story (docs/events.md).
type Event = events.Event

// EventPage is the body of GET /v1/runs/{run_id}/events as JSON.
type EventPage struct {
	Events []Event `json:"events"`
	// NextAfter is the offset to ask after for the next page.
	NextAfter int64 `json:"next_after"`
	// Ended is set once the page holds the event that ended the run.
	Ended bool `json:"ended"`
}

// TenantEventPage is the body of GET /v1/events as JSON.
type TenantEventPage struct {
	Events    []Event `json:"events"`
	NextAfter string  `json:"next_after"`
}

// Timing of event streams.
const (
	// streamHeartbeat is how often a stream with nothing to say sends a
	// comment, so that proxies keep it open and clients see it alive.
	streamHeartbeat = 15 * time.Second
	// streamPoll is how often a stream reads its log though PostgreSQL
	// woke nobody. The hub wakes every stream when it connects again, so
	// this is a safety net, not the way news comes.
	streamPoll = 30 * time.Second
	// tenantPoll is streamPoll for a tenant's stream.
	tenantPoll = time.Second
	// streamRetry is the reconnection delay a stream tells its client, in
	// milliseconds.
	streamRetry      = 2000
	defaultEventPage = 100
)

// hub returns the server's hub of followers, started with the first.
func (s *Server) eventHub() *events.Hub {
	s.hubOnce.Do(func() {
		cc := s.cfg.Pool.Config().ConnConfig.Copy()
		s.hub = events.NewHub(func(ctx context.Context) (*pgx.Conn, error) {
			return pgx.ConnectConfig(ctx, cc)
		}, s.log)
	})
	return s.hub
}

// Close stops what the server runs in the background (the connection that
// follows the event logs).
func (s *Server) Close() {
	s.hubOnce.Do(func() {})
	if s.hub != nil {
		s.hub.Close()
	}
}

// eventParams reads after and limit; after from Last-Event-ID when the
// query has none.
func eventParams(r *http.Request, known ...string) (after string, limit int, err error) {
	q := r.URL.Query()
	for name := range q {
		if !slices.Contains(known, name) {
			return "", 0, errorf(http.StatusBadRequest, "invalid_request", "unknown query parameter %q (known: %s)", name, strings.Join(known, ", "))
		}
	}
	after = q.Get("after")
	if after == "" {
		after = r.Header.Get("Last-Event-ID")
	}
	limit = defaultEventPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > events.MaxPage {
			return "", 0, errorf(http.StatusBadRequest, "invalid_request", "limit %q is not a number from 1 to %d", untrusted.Cut(v, 20), events.MaxPage)
		}
		limit = n
	}
	return after, limit, nil
}

// wantsStream reports whether the request asks for Server-Sent Events.
func wantsStream(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// RunEvents serves GET /v1/runs/{run_id}/events for the identity: the
// run's events and its children's, as a page of JSON or, when the request
// accepts text/event-stream, as Server-Sent Events. The inbox serves it to
// its signed-in people too.
func (s *Server) RunEvents(w http.ResponseWriter, r *http.Request, id Identity) {
	runID := r.PathValue("run_id")
	afterText, limit, err := eventParams(r, "after", "limit", "protocol")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var after int64
	if afterText != "" {
		if after, err = strconv.ParseInt(afterText, 10, 64); err != nil || after < 0 {
			s.fail(w, r, errorf(http.StatusBadRequest, "invalid_request", "after %q is not an offset (a number from 0)", untrusted.Cut(afterText, 40)))
			return
		}
	}
	protocol := r.URL.Query().Get("protocol")
	if protocol != "" && protocol != "ag-ui" {
		s.fail(w, r, errorf(http.StatusBadRequest, "invalid_request", "protocol %q is not one the stream speaks (ag-ui, or none for oncerun's own)", untrusted.Cut(protocol, 40)))
		return
	}
	if err := s.knownRun(r.Context(), id, runID); err != nil {
		s.fail(w, r, err)
		return
	}
	read := func(ctx context.Context, gen uint64, after int64, limit int) ([]Event, error) {
		// The followers of a run are mostly at the same offset: one read
		// serves every follower that asks for the same page, having seen
		// the same wakes, at once. (A follower woken since a read began
		// must not take that read's answer: it may predate the news.)
		key := fmt.Sprintf("%s\x00%s\x00%d\x00%d\x00%d", id.Tenant, runID, after, limit, gen)
		v, err, _ := s.reads.Do(key, func() (any, error) {
			ctx, cancel := s.dbContext(context.WithoutCancel(ctx))
			defer cancel()
			return events.ReadRun(ctx, s.cfg.Pool, events.RunQuery{Tenant: id.Tenant, Run: runID, After: after, Limit: limit})
		})
		if err != nil {
			return nil, err
		}
		return v.([]Event), nil
	}
	if !wantsStream(r) {
		ctx, cancel := s.dbContext(r.Context())
		evs, err := events.ReadRun(ctx, s.cfg.Pool, events.RunQuery{Tenant: id.Tenant, Run: runID, After: after, Limit: limit})
		cancel()
		if err != nil {
			s.fail(w, r, err)
			return
		}
		page := EventPage{Events: orEmpty(evs), NextAfter: after}
		for _, e := range evs {
			page.NextAfter = e.Offset
			page.Ended = page.Ended || (e.RunID == runID && events.Ends(e.Type))
		}
		writeJSON(w, http.StatusOK, page)
		return
	}
	sub := s.eventHub().Subscribe(id.Tenant, events.Root(runID))
	defer sub.Close()
	st := newStream(w, r, protocol)
	// A child's follower gets the ephemeral events of its own tree only.
	st.keep = func(e Event) bool { return e.RunID == runID || strings.HasPrefix(e.RunID, runID+".") }
	for {
		evs, err := read(r.Context(), sub.Gen(), after, events.MaxPage)
		if err != nil {
			if r.Context().Err() == nil {
				s.log.Warn("event stream: reading the log failed; the client will reconnect", zap.Error(err))
			}
			return
		}
		ended := false
		for _, e := range evs {
			if !st.send(e, strconv.FormatInt(e.Offset, 10)) {
				return
			}
			after = e.Offset
			ended = ended || (e.RunID == runID && events.Ends(e.Type))
		}
		if ended {
			st.close()
			return
		}
		if len(evs) == events.MaxPage {
			continue
		}
		if !st.wait(sub) {
			return
		}
	}
}

// TenantEvents serves GET /v1/events for the identity: the events of
// every run of its tenant, as a page of JSON or as Server-Sent Events.
// Without a cursor, a stream starts at the events to come, a page at the
// oldest kept.
func (s *Server) TenantEvents(w http.ResponseWriter, r *http.Request, id Identity) {
	afterText, limit, err := eventParams(r, "after", "limit", "run_state", "tool", "waiting_for")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	tq := events.TenantQuery{Tenant: id.Tenant, Limit: limit, RunState: q.Get("run_state"), Tool: q.Get("tool")}
	switch q.Get("waiting_for") {
	case "":
	case "me":
		tq.Waiting = true
	default:
		s.fail(w, r, errorf(http.StatusBadRequest, "invalid_request", "waiting_for %q: the only value is me", untrusted.Cut(q.Get("waiting_for"), 40)))
		return
	}
	if tq.RunState == "waiting" {
		// Waiting is running with a step waiting for a person.
		tq.RunState, tq.Waiting = "running", true
	}
	if tq.RunState != "" && !slices.Contains(runStates, tq.RunState) {
		s.fail(w, r, errorf(http.StatusBadRequest, "invalid_request", "run_state %q is not one of %s", untrusted.Cut(tq.RunState, 40), strings.Join(runStates, ", ")))
		return
	}
	stream := wantsStream(r)
	switch {
	case afterText != "":
		if tq.After, err = events.ParseCursor(afterText); err != nil {
			s.fail(w, r, errorf(http.StatusBadRequest, "invalid_request", "after %q is not a cursor of this stream", untrusted.Cut(afterText, 60)))
			return
		}
	case stream:
		ctx, cancel := s.dbContext(r.Context())
		tq.After, err = events.Head(ctx, s.cfg.Pool, id.Tenant)
		cancel()
		if err != nil {
			s.fail(w, r, err)
			return
		}
	}
	read := func(ctx context.Context, tq events.TenantQuery) ([]Event, error) {
		ctx, cancel := s.dbContext(ctx)
		defer cancel()
		return events.ReadTenant(ctx, s.cfg.Pool, tq)
	}
	if !stream {
		evs, err := read(r.Context(), tq)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		page := TenantEventPage{Events: orEmpty(evs), NextAfter: tq.After.String()}
		if len(evs) > 0 {
			page.NextAfter = evs[len(evs)-1].Cursor
		}
		writeJSON(w, http.StatusOK, page)
		return
	}
	sub := s.eventHub().Subscribe(id.Tenant, "")
	defer sub.Close()
	st := newStream(w, r, "")
	// A tenant's events wait for the server's older transactions (see
	// events.ReadTenant): a wake may come before they can be read, so the
	// stream reads again soon.
	st.poll = tenantPoll
	// The stream says where it starts, so that a client that loses it
	// before its first event resumes from there.
	if !st.mark(tq.After.String()) {
		return
	}
	for {
		tq.Limit = events.MaxPage
		evs, err := read(r.Context(), tq)
		if err != nil {
			if r.Context().Err() == nil {
				s.log.Warn("event stream: reading the tenant's events failed; the client will reconnect", zap.Error(err))
			}
			return
		}
		for _, e := range evs {
			if !st.send(e, e.Cursor) {
				return
			}
			tq.After, _ = events.ParseCursor(e.Cursor)
		}
		if len(evs) == events.MaxPage {
			continue
		}
		if !st.wait(sub) {
			return
		}
	}
}

// runStates are the states a run is listed in.
var runStates = []string{"running", "waiting", "paused", "completed", "failed", "cancelled"}

// knownRun answers 404 unless the identity's tenant has the run: in the
// runs' index, or, for a run started before it, in Temporal.
func (s *Server) knownRun(ctx context.Context, id Identity, runID string) error {
	if _, err := keys.New(id.Tenant, runID, 1, "x"); err != nil {
		return errorf(http.StatusNotFound, "not_found", "no run %q", untrusted.Cut(runID, keys.MaxRunIDLen))
	}
	dbctx, cancel := s.dbContext(ctx)
	ok, err := events.RunExists(dbctx, s.cfg.Pool, id.Tenant, runID)
	cancel()
	if err != nil || ok {
		return err
	}
	_, err = s.Status(ctx, id, runID)
	return err
}

func orEmpty(evs []Event) []Event {
	if evs == nil {
		return []Event{}
	}
	return evs
}

// shutdownKey holds, in a request's context, the context whose end shuts
// the service down (see ListenAndServe).
type shutdownKey struct{}

// streamsEnd returns what ends the request's stream besides its client:
// the service's shutdown, when ListenAndServe serves it.
func streamsEnd(r *http.Request) <-chan struct{} {
	if ctx, ok := r.Context().Value(shutdownKey{}).(context.Context); ok {
		return ctx.Done()
	}
	return nil
}

// stream writes Server-Sent Events.
type stream struct {
	w        http.ResponseWriter
	rc       *http.ResponseController
	r        *http.Request
	agui     *aguiStream
	lastBeat time.Time
	// keep, when set, says which ephemeral events the stream passes on.
	keep func(Event) bool
	// poll is how often the stream reads though nothing woke it.
	poll time.Duration
}

func newStream(w http.ResponseWriter, r *http.Request, protocol string) *stream {
	rc := http.NewResponseController(w)
	// A stream lasts as long as its client: no write deadline.
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: %d\n\n", streamRetry)
	_ = rc.Flush()
	st := &stream{w: w, rc: rc, r: r, lastBeat: time.Now(), poll: streamPoll}
	if protocol == "ag-ui" {
		st.agui = &aguiStream{}
	}
	return st
}

// send writes one event with id; it reports false once the client is gone.
func (st *stream) send(e Event, id string) bool {
	if st.agui != nil {
		// The AG-UI events of one of oncerun's carry its id on the last,
		// so that a client that resumes gets none of them twice.
		msgs := st.agui.translate(e)
		for i, m := range msgs {
			if !st.write(map[bool]string{true: id}[i == len(msgs)-1], "", m) {
				return false
			}
		}
		return true
	}
	return st.write(id, e.Type, e)
}

func (st *stream) write(id, typ string, v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	var sb strings.Builder
	if id != "" {
		sb.WriteString("id: " + id + "\n")
	}
	if typ != "" {
		sb.WriteString("event: " + typ + "\n")
	}
	sb.WriteString("data: ")
	sb.Write(b)
	sb.WriteString("\n\n")
	if _, err := st.w.Write([]byte(sb.String())); err != nil {
		return false
	}
	return st.rc.Flush() == nil
}

// mark sets the client's resume point without an event.
func (st *stream) mark(id string) bool {
	if _, err := st.w.Write([]byte("id: " + id + "\n\n")); err != nil {
		return false
	}
	return st.rc.Flush() == nil
}

// close ends a stream whose run ended.
func (st *stream) close() {
	if st.agui != nil {
		return
	}
	_, _ = st.w.Write([]byte(": the run ended\n\n"))
	_ = st.rc.Flush()
}

// wait waits until the log may have news, passing on ephemeral events and
// heartbeats meanwhile; it reports false once the client is gone.
func (st *stream) wait(sub *events.Subscription) bool {
	poll := time.NewTimer(st.poll)
	defer poll.Stop()
	for {
		beat := time.Until(st.lastBeat.Add(streamHeartbeat))
		hb := time.NewTimer(max(beat, 0))
		select {
		case <-st.r.Context().Done():
			hb.Stop()
			return false
		case <-streamsEnd(st.r):
			hb.Stop()
			return false
		case <-sub.Wake:
			hb.Stop()
			return true
		case <-poll.C:
			hb.Stop()
			return true
		case e := <-sub.Ephemeral:
			hb.Stop()
			if st.keep != nil && !st.keep(e) {
				continue
			}
			if !st.send(e, "") {
				return false
			}
		case <-hb.C:
			st.lastBeat = time.Now()
			if _, err := st.w.Write([]byte(": heartbeat\n\n")); err != nil || st.rc.Flush() != nil {
				return false
			}
		}
	}
}
